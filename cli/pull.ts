// `hanzo-ml model pull`: the reference client for loading a registered model (spec 000: verify before load).
// It downloads one format of a version into a staging directory beside the destination, streaming each file
// through SHA-256; the manifest must hash to the checksum the registry recorded, and every file to its manifest
// entry. Any mismatch deletes what was downloaded and names the file; only a fully verified copy is renamed
// into place.
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { Readable } from 'node:stream';
import { writeMeasured } from '../lib/hash.js';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { ApiClient } from './api-client.js';
import { FormatArtifactSchema, ModelManifestSchema, type FormatArtifact, type ModelManifest } from '../contracts/models.js';
import { orderFormats } from '../lib/model-artifacts.js';

/** A download that failed verification: the message names the file and both digests. */
export class VerificationError extends Error {}

export interface PullOptions {
  name: string;
  version?: number;
  stage?: string;
  format?: string;
  dest?: string;
}

export interface PullResult {
  name: string;
  version: number;
  format: string;
  dest: string;
  checksum: string;
  files: number;
  size_bytes: number;
}

interface VersionView {
  version: number;
  stage: string;
  status: string;
  formats: string[];
  artifacts: Record<string, unknown>;
}

/** The version asked for: by number, or the newest in a stage (production has at most one). */
async function resolveVersion(api: ApiClient, o: PullOptions): Promise<VersionView> {
  const { versions } = await api.get<{ versions: VersionView[] }>(`/v1/models/${encodeURIComponent(o.name)}/versions`);
  const found = o.version !== undefined ? versions.find((v) => v.version === o.version) : versions.find((v) => v.stage === o.stage);
  if (!found) throw new Error(`model "${o.name}" has no ${o.version !== undefined ? `version ${o.version}` : `version in stage ${o.stage}`}`);
  if (found.status !== 'ready') throw new Error(`model "${o.name}" version ${found.version} is ${found.status}: nothing to pull`);
  return found;
}

function formatOf(o: PullOptions, v: VersionView): { format: string; artifact: FormatArtifact } {
  const format = o.format ?? orderFormats(v.formats)[0];
  if (!format) throw new Error(`model "${o.name}" version ${v.version} has no formats to pull`);
  const parsed = FormatArtifactSchema.safeParse(v.artifacts[format]);
  if (!parsed.success) throw new Error(`model "${o.name}" version ${v.version} has no format "${format}" (its formats: ${v.formats.join(', ') || 'none'})`);
  return { format, artifact: parsed.data };
}

/** GET one file of the format as a byte stream. */
async function fetchFile(api: ApiClient, o: { name: string; version: number; format: string }, path: string): Promise<Readable> {
  const res = await api.stream(`/v1/models/${encodeURIComponent(o.name)}/versions/${o.version}/artifacts/${encodeURIComponent(o.format)}/${path.split('/').map(encodeURIComponent).join('/')}`);
  return Readable.fromWeb(res.body as unknown as WebReadableStream<Uint8Array>);
}

/** Streams `source` to `file`, hashing on the way; returns its SHA-256 and size. */
async function saveHashed(source: Readable, file: string): Promise<{ sha256: string; size: number }> {
  await mkdir(dirname(file), { recursive: true });
  const { sha256, size_bytes } = await writeMeasured(source, file);
  return { sha256, size: size_bytes };
}

/** The manifest, verified against the registry's checksum before anything it lists is trusted. */
async function verifiedManifest(api: ApiClient, where: { name: string; version: number; format: string }, checksum: string): Promise<{ text: string; manifest: ModelManifest }> {
  const chunks: Buffer[] = [];
  for await (const c of await fetchFile(api, where, 'manifest.json')) chunks.push(c as Buffer);
  const bytes = Buffer.concat(chunks);
  const actual = `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
  if (actual !== checksum) throw new VerificationError(`manifest.json of ${where.name} v${where.version} ${where.format}: checksum ${actual} does not match the registry's ${checksum}`);
  const manifest = ModelManifestSchema.parse(JSON.parse(bytes.toString('utf8')));
  return { text: bytes.toString('utf8'), manifest };
}

/** Pulls one format of a version into `dest`, verifying every file; refuses (and leaves nothing) on any mismatch. */
export async function pullModel(api: ApiClient, o: PullOptions): Promise<PullResult> {
  if ((o.version === undefined) === (o.stage === undefined)) throw new Error('give exactly one of --version and --stage');
  const v = await resolveVersion(api, o);
  const { format, artifact } = formatOf(o, v);
  const where = { name: o.name, version: v.version, format };
  const dest = resolve(o.dest ?? `${o.name}-v${v.version}-${format}`);
  if (existsSync(dest)) throw new Error(`destination ${dest} already exists: pull into a new directory`);
  const staging = `${dest}.partial-${process.pid}`;
  try {
    await mkdir(staging, { recursive: true });
    const { text, manifest } = await verifiedManifest(api, where, artifact.checksum);
    for (const f of manifest.files) {
      const file = resolve(staging, f.path);
      if (!file.startsWith(staging + sep)) throw new VerificationError(`manifest.json lists "${f.path}", which lies outside the download`);
      const got = await saveHashed(await fetchFile(api, where, f.path), file);
      if (got.sha256 !== f.sha256 || got.size !== f.size_bytes)
        throw new VerificationError(
          `${f.path} of ${o.name} v${v.version} ${format}: sha256 ${got.sha256} (${got.size} bytes) does not match the manifest's ${f.sha256} (${f.size_bytes} bytes); refusing the download`,
        );
    }
    await writeFile(join(staging, 'manifest.json'), text);
    await rename(staging, dest);
    return { name: o.name, version: v.version, format, dest, checksum: artifact.checksum, files: manifest.files.length, size_bytes: artifact.size_bytes };
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}

// A model version's artifacts of record: each format it carries is copied under
// `{organization}/{name}/v{version}/{format}/` in the models bucket with a `manifest.json` listing every file, its
// size and SHA-256. The format's checksum is the manifest's SHA-256, so one digest in the catalogue vouches for
// every byte; a client verifies each file against the manifest and the manifest against the catalogue.
// Files are copied object to object and hashed as streams (never held in memory).
import { relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sha256Text } from './hash.js';
import { ObjectNotFoundError, ObjectOutsideStoreError, objectUri, type ObjectStore } from './object-store.js';
import {
  FormatArtifactSchema,
  FormatNameSchema,
  MODEL_MANIFEST_SCHEMA,
  ManifestFileSchema,
  ModelManifestSchema,
  type FormatArtifact,
  type ModelManifest,
} from '../contracts/models.js';

export const MANIFEST_FILE = 'manifest.json';

/** Bad artifacts (a missing file, an unreadable config): the message names the file and what was expected. */
export class ModelArtifactError extends Error {}

/** One file to publish: where it is now (an object URI), its path inside the format and its size when known. */
export interface SourceFile {
  uri: string;
  path: string;
  size_bytes?: number;
}

/** What the manifest says about the model, read from its config.json and adapter_config.json. */
export interface ModelDescription {
  architecture: string | null;
  base_model: string | null;
  method: string | null;
}

/** The key prefix of a version in the models bucket. */
export function versionPrefix(organizationId: string, name: string, version: number): string {
  return `${organizationId}/${name}/v${version}`;
}

/** Formats in the order a reader wants them: merged weights first, then the adapter, then quantizations. */
export function orderFormats(formats: string[]): string[] {
  const rank = (f: string) => (f === 'safetensors' ? 0 : f === 'lora' ? 1 : f.startsWith('gguf-') ? 2 : 3);
  return [...formats].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
}

/** Every object under a URI prefix as files relative to it; a URI naming one object yields that object alone. */
export async function filesUnder(store: ObjectStore, prefixUri: string): Promise<SourceFile[]> {
  const root = prefixUri.replace(/\/+$/, '');
  // file:// URIs may be percent-encoded or not: paths are taken relative on disk, not by slicing text.
  const relativePath = (uri: string) => (root.startsWith('file:') ? relative(fileURLToPath(root), fileURLToPath(uri)).split(sep).join('/') : uri.slice(root.length + 1));
  const listed = await store.list(root);
  if (listed.length) return listed.map((o) => ({ uri: o.uri, path: relativePath(o.uri), size_bytes: o.size_bytes }));
  if (await store.exists(root)) return [{ uri: root, path: (root.startsWith('file:') ? fileURLToPath(root) : root).split('/').pop()! }];
  return [];
}

/** A JSON file among the sources, parsed; null when there is none at that path. */
export async function readSourceJson(store: ObjectStore, files: SourceFile[], path: string): Promise<Record<string, unknown> | null> {
  const file = files.find((f) => f.path === path);
  if (!file) return null;
  const text = await store.readText(file.uri);
  if (text === null) throw new ModelArtifactError(`${file.uri}: listed but not readable`);
  try {
    const parsed = JSON.parse(text) as unknown;
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) return parsed as Record<string, unknown>;
  } catch (err) {
    throw new ModelArtifactError(`${file.uri}: not valid JSON (${(err as Error).message})`);
  }
  throw new ModelArtifactError(`${file.uri}: expected a JSON object`);
}

/** PEFT's peft_type -> the adapter family it trains (LoRA-family methods share LORA; AdaLoRA has its own). */
const PEFT_FAMILY: Record<string, string> = { LORA: 'lora', ADALORA: 'adalora' };

/**
 * Architecture from config.json (`architectures[0]`); base model and method from adapter_config.json
 * (`base_model_name_or_path`, `peft_type`) when the files hold an adapter.
 */
export function describeModel(config: Record<string, unknown> | null, adapterConfig: Record<string, unknown> | null): ModelDescription {
  const architectures = config?.architectures;
  const architecture = Array.isArray(architectures) && typeof architectures[0] === 'string' ? architectures[0] : null;
  const peftType = typeof adapterConfig?.peft_type === 'string' ? adapterConfig.peft_type : null;
  const base = typeof adapterConfig?.base_model_name_or_path === 'string' ? adapterConfig.base_model_name_or_path : null;
  return { architecture, base_model: base, method: peftType ? (PEFT_FAMILY[peftType] ?? peftType.toLowerCase()) : null };
}

/** The adapter family a training method produces (DPO and ORPO train LoRA adapters in this product). */
export function adapterFamilyOf(method: string): string | null {
  return method === 'adalora' ? 'adalora' : ['lora', 'qlora', 'dpo', 'orpo'].includes(method) ? 'lora' : null;
}

/** A format name for files registered from elsewhere (an MLflow run or logged model), from what they contain. */
export function formatOfFiles(paths: string[]): string {
  if (paths.includes('adapter_config.json')) return 'lora';
  if (paths.some((p) => p.endsWith('.safetensors'))) return 'safetensors';
  if (paths.some((p) => p.endsWith('.gguf'))) return 'gguf';
  return 'files';
}

function checkSources(format: string, files: SourceFile[]): void {
  const name = FormatNameSchema.safeParse(format);
  if (!name.success) throw new ModelArtifactError(`format "${format}": ${name.error.issues[0]!.message}`);
  if (!files.length) throw new ModelArtifactError(`format ${format}: no files to register`);
  const seen = new Set<string>();
  for (const f of files) {
    const parsed = ManifestFileSchema.shape.path.safeParse(f.path);
    if (!parsed.success) throw new ModelArtifactError(`format ${format}: file "${f.path}" (${f.uri}): ${parsed.error.issues[0]!.message}`);
    if (f.path === MANIFEST_FILE) throw new ModelArtifactError(`format ${format}: source file ${f.uri} is named ${MANIFEST_FILE}, which the registry writes itself`);
    if (seen.has(f.path)) throw new ModelArtifactError(`format ${format}: two files at "${f.path}"`);
    seen.add(f.path);
  }
}

/**
 * Copies one format's files under `{prefix}/{format}/` in `bucket` and writes its manifest. A second call with
 * the same files (a retried activity) writes the same objects and the same manifest, hence the same checksum.
 */
export async function publishFormat(
  store: ObjectStore,
  p: {
    bucket: string;
    prefix: string;
    format: string;
    files: SourceFile[];
    model: string;
    version: number;
    description: ModelDescription;
    /** bytes done in this format so far (each file counts its copy and its hash), as the copy advances */
    onProgress?: (bytesDone: number) => void;
  },
): Promise<{ artifact: FormatArtifact; manifest: ModelManifest }> {
  checkSources(p.format, p.files);
  const base = `${p.prefix}/${p.format}`;
  const entries: ModelManifest['files'] = [];
  let before = 0;
  for (const f of [...p.files].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))) {
    const done = before;
    // A missing source is bad input for good; a store that failed is retried by the caller.
    const copied = await store.copy(f.uri, p.bucket, `${base}/${f.path}`, { onProgress: (n) => p.onProgress?.(done + n) }).catch((err: Error) => {
      if (err instanceof ObjectNotFoundError) throw new ModelArtifactError(`format ${p.format}: source file ${f.path} (${f.uri}) does not exist`);
      if (err instanceof ObjectOutsideStoreError) throw new ModelArtifactError(`format ${p.format}: source file ${f.path} is refused: ${err.message}`);
      throw err;
    });
    before += 2 * copied.size_bytes;
    entries.push({ path: f.path, size_bytes: copied.size_bytes, sha256: copied.sha256 });
  }
  const manifest: ModelManifest = { schema: MODEL_MANIFEST_SCHEMA, model: p.model, version: p.version, format: p.format, ...p.description, files: entries };
  const text = `${JSON.stringify(manifest, null, 2)}\n`;
  const manifestUri = objectUri(store, p.bucket, `${base}/${MANIFEST_FILE}`);
  await store.putText(manifestUri, text);
  const artifact: FormatArtifact = {
    path: `${objectUri(store, p.bucket, base)}/`,
    size_bytes: entries.reduce((n, e) => n + e.size_bytes, 0),
    checksum: `sha256:${sha256Text(text)}`,
    manifest: manifestUri,
    files: entries.length,
  };
  return { artifact, manifest };
}

/** The version's checksum of record: its primary format's manifest checksum. */
export function versionChecksum(artifacts: Record<string, FormatArtifact>): string | null {
  const [primary] = orderFormats(Object.keys(artifacts));
  return primary ? artifacts[primary]!.checksum : null;
}

/** The formats of a version's artifacts map that are files of record (the map may hold other entries). */
export function recordedFormats(artifacts: Record<string, unknown>): Record<string, FormatArtifact> {
  const formats: Record<string, FormatArtifact> = {};
  for (const [name, value] of Object.entries(artifacts)) {
    const parsed = FormatArtifactSchema.safeParse(value);
    if (parsed.success) formats[name] = parsed.data;
  }
  return formats;
}

/** The files a published format's manifest lists, as sources for another copy (the manifest itself is rewritten). */
export async function formatSources(store: ObjectStore, format: string, artifact: FormatArtifact): Promise<SourceFile[]> {
  const text = await store.readText(artifact.manifest);
  if (text === null) throw new ModelArtifactError(`format ${format}: its manifest ${artifact.manifest} is missing`);
  const parsed = ModelManifestSchema.safeParse(JSON.parse(text));
  if (!parsed.success) throw new ModelArtifactError(`format ${format}: ${artifact.manifest} is not a model manifest (${parsed.error.issues[0]!.message})`);
  return parsed.data.files.map((f) => ({ uri: fileUriIn(artifact.path, f.path), path: f.path, size_bytes: f.size_bytes }));
}

/** The URI of a file inside a format, from the format's prefix URI (file:// paths are URL-encoded, s3:// keys raw). */
export function fileUriIn(prefixUri: string, path: string): string {
  const base = prefixUri.endsWith('/') ? prefixUri : `${prefixUri}/`;
  return base.startsWith('file:') ? base + path.split('/').map(encodeURIComponent).join('/') : base + path;
}

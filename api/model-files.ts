// A model version's files through the API: registering a version copies its source files under the version's own
// prefix (so overwriting a run artifact later cannot change it), and the pull route streams one file of a format
// (its manifest.json or a file the manifest lists). Routes whose path holds /artifacts/ are audited as downloads
// (api/app.ts). The server does not vouch for the bytes: the client checks each against the manifest, and the
// manifest against the checksum in the catalogue.
import { Readable } from 'node:stream';
import type { ApiDeps } from './deps.js';
import { ApiError, invalid, notFound } from './errors.js';
import { completeRegistration, registerModelVersion, type ModelVersionRow, type NewModelVersion } from '../db/repo/models.js';
import { FormatArtifactSchema, ModelManifestSchema, type FormatArtifact } from '../contracts/models.js';
import {
  fileUriIn,
  MANIFEST_FILE,
  orderFormats,
  ModelArtifactError,
  publishCopy,
  publishVersionCopy,
  recordedFormats,
  type ModelDescription,
  type SourceFile,
} from '../lib/model-artifacts.js';
import { safeArtifactPath } from './routes/mlflow/artifact-store.js';

/** Registers a version; with source files, it is pending while they are copied under its prefix, then ready. */
export async function registerWithCopy(deps: ApiDeps, v: NewModelVersion, files: SourceFile[]): Promise<ModelVersionRow> {
  if (!files.length) return registerModelVersion(deps.db, v);
  return registerPublishing(deps, v, (version) => publishCopy(deps.store, { bucket: deps.config.storage.buckets.models, organizationId: v.organizationId, model: v.modelName, version, files }));
}

/**
 * Registers a copy of a registered version (`models:/<name>/<version>`) with files of its own: every format is
 * copied under the new version's prefix, as a run's files are. A source without files of record (registered from
 * a location outside our store) passes on what it has: its status and description, no files.
 */
export async function registerCopyOf(deps: ApiDeps, v: NewModelVersion, from: ModelVersionRow): Promise<ModelVersionRow> {
  const formats = from.status === 'ready' ? recordedFormats(from.artifacts as Record<string, unknown>) : {};
  const described = { architecture: from.architecture, baseModel: from.baseModel, method: from.method };
  if (!Object.keys(formats).length) return registerModelVersion(deps.db, { ...v, ...described, artifacts: from.artifacts, checksum: from.checksum, status: from.status });
  const description = { architecture: from.architecture, base_model: from.baseModel, method: from.method };
  return registerPublishing(deps, v, (version) =>
    publishVersionCopy(deps.store, { bucket: deps.config.storage.buckets.models, organizationId: v.organizationId, model: v.modelName, version, formats, description }),
  );
}

type Publish = (version: number) => Promise<{ artifacts: Record<string, FormatArtifact>; checksum: string | null; description: ModelDescription }>;

/**
 * The version is registered pending (its number is taken), its files published under its prefix, then it is ready.
 * A copy that fails marks it failed_registration and answers 400 naming the file.
 */
async function registerPublishing(deps: ApiDeps, v: NewModelVersion, publish: Publish): Promise<ModelVersionRow> {
  const row = await registerModelVersion(deps.db, { ...v, status: 'pending_registration' });
  try {
    const copy = await publish(row.version);
    return await completeRegistration(deps.db, row.id, {
      artifacts: copy.artifacts,
      checksum: copy.checksum,
      architecture: copy.description.architecture,
      baseModel: copy.description.base_model,
      method: copy.description.method,
    });
  } catch (err) {
    await completeRegistration(deps.db, row.id, { artifacts: {}, checksum: null, failed: true });
    if (err instanceof ModelArtifactError) throw invalid(`version ${row.version} of model "${v.modelName}" not registered: ${err.message}`);
    throw err;
  }
}

/** A format of a ready version, or the error a client can act on (not ready, no such format). */
export function formatOf(name: string, v: ModelVersionRow, format: string): FormatArtifact {
  if (v.status !== 'ready') throw new ApiError('INVALID_STATE', `version ${v.version} of model "${name}" is ${v.status}: it has no files to download`);
  const artifacts = v.artifacts as Record<string, unknown>;
  const parsed = FormatArtifactSchema.safeParse(artifacts[format]);
  if (!parsed.success) {
    const have = orderFormats(Object.keys(artifacts).filter((k) => FormatArtifactSchema.safeParse(artifacts[k]).success));
    throw notFound(`format "${format}" of model "${name}" version ${v.version} (its formats: ${have.join(', ') || 'none'})`);
  }
  return parsed.data;
}

/** Streams one file of a format: manifest.json, or a file the manifest lists. */
export async function downloadFormatFile(deps: ApiDeps, where: { name: string; version: ModelVersionRow; format: string; rawPath: string }): Promise<Response> {
  const artifact = formatOf(where.name, where.version, where.format);
  const path = safeArtifactPath(where.rawPath);
  const shown = `${where.name} v${where.version.version} ${where.format}/${path}`;
  if (path !== MANIFEST_FILE) {
    const text = await deps.store.readText(artifact.manifest);
    if (text === null) throw notFound(`the manifest of ${where.name} v${where.version.version} ${where.format}`);
    const listed = ModelManifestSchema.safeParse(JSON.parse(text));
    if (!listed.success || !listed.data.files.some((f) => f.path === path)) throw notFound(`file "${path}" in the manifest of ${shown.slice(0, -path.length - 1)}`);
  }
  const uri = path === MANIFEST_FILE ? artifact.manifest : fileUriIn(artifact.path, path);
  if (!(await deps.store.exists(uri))) throw notFound(`file ${shown}`);
  const stream = await deps.store.read(uri);
  return new Response(Readable.toWeb(stream as Readable) as unknown as ReadableStream, {
    status: 200,
    headers: { 'content-type': path === MANIFEST_FILE ? 'application/json' : 'application/octet-stream', 'x-content-type-options': 'nosniff' },
  });
}

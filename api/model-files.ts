// A model version's files through the API: registering a version has its source files copied under the version's
// own prefix (so overwriting a run artifact later cannot change it) by a workflow the request starts and does not
// wait for (workflows/model-registration.ts), and the pull route streams one file of a format
// (its manifest.json or a file the manifest lists). Routes whose path holds /artifacts/ are audited as downloads
// (api/app.ts). The server does not vouch for the bytes: the client checks each against the manifest, and the
// manifest against the checksum in the catalogue.
import { Readable } from 'node:stream';
import type { Context } from 'hono';
import type { ApiDeps, AppEnv } from './deps.js';
import { ApiError, invalid, notFound } from './errors.js';
import { completeRegistration, registerModelVersion, type ModelVersionRow, type NewModelVersion } from '../db/repo/models.js';
import { audit } from '../db/repo/auth.js';
import type { Db } from '../db/client.js';
import type { Tx } from '../db/repo/outbox.js';
import { FormatArtifactSchema, ModelManifestSchema, type FormatArtifact } from '../contracts/models.js';
import { PIPELINE_TASK_QUEUE } from '../contracts/pipeline.js';
import { modelRegistrationWorkflowId, type ModelRegistrationInput } from '../contracts/model-registration.js';
import type { modelRegistrationWorkflow } from '../workflows/model-registration.js';
import {
  fileUriIn,
  formatOfFiles,
  formatSources,
  MANIFEST_FILE,
  orderFormats,
  recordedFormats,
  type SourceFile,
} from '../lib/model-artifacts.js';
import { safeArtifactPath } from './routes/mlflow/artifact-store.js';
import { ObjectOutsideStoreError } from '../lib/object-store.js';
import { auditContext } from './routes/identity.js';

/**
 * The files a caller's location names, or a 400 naming the field when the store refuses to follow it (a symbolic
 * link planted in the store that leads outside it).
 */
export async function filesOfLocation<T>(field: string, files: Promise<T>): Promise<T> {
  try {
    return await files;
  } catch (err) {
    if (err instanceof ObjectOutsideStoreError) throw invalid(`${field}: ${err.message}`);
    throw err;
  }
}

/** What a registration copies: formats of files in our store, and the model's description when already known. */
interface CopyPlan {
  formats: { format: string; files: SourceFile[] }[];
  description: ModelRegistrationInput['description'];
}

/** The files of a run or logged model as one format, named by what they hold, described by their config files. */
export function filesPlan(files: SourceFile[]): CopyPlan | null {
  return files.length ? { formats: [{ format: formatOfFiles(files.map((f) => f.path)), files }], description: null } : null;
}

/**
 * A copy of a registered version (`models:/<name>/<version>`): every format of record is copied under the new
 * version's prefix, as a run's files are. A source without files of record (registered from a location outside
 * our store) passes on what it has: its status and description, no files (plan null, fields for the row).
 */
export async function versionCopyPlan(deps: ApiDeps, from: ModelVersionRow): Promise<{ plan: CopyPlan | null; fields: Partial<NewModelVersion> }> {
  // Its files are not all there yet: a copy now would have nothing to copy, and nothing would ever finish it.
  if (from.status === 'pending_registration') throw new ApiError('INVALID_STATE', `version ${from.version} is still being registered (PENDING_REGISTRATION): copy it once it is READY`);
  const formats = from.status === 'ready' ? recordedFormats(from.artifacts as Record<string, unknown>) : {};
  const described = { architecture: from.architecture, baseModel: from.baseModel, method: from.method };
  if (!Object.keys(formats).length) return { plan: null, fields: { ...described, artifacts: from.artifacts, checksum: from.checksum, status: from.status, statusMessage: from.statusMessage } };
  const planned = [];
  for (const format of orderFormats(Object.keys(formats))) planned.push({ format, files: await formatSources(deps.store, format, formats[format]!) });
  return { plan: { formats: planned, description: { architecture: from.architecture, base_model: from.baseModel, method: from.method } }, fields: described };
}

/**
 * Registers a version. With files to copy it is inserted pending (its number taken, its audit row written, in one
 * short transaction that holds the model's row lock only for the numbering), and once that commits a
 * `modelRegistrationWorkflow` copies and hashes the files under the version's prefix and marks it ready or
 * failed_registration. The request never waits for the copy. Without files it is registered as given.
 * `inTransaction` adds writes that commit with the version (a logged model's record of it).
 */
export async function registerVersion(
  c: Context<AppEnv>,
  deps: ApiDeps,
  v: NewModelVersion,
  plan: CopyPlan | null,
  inTransaction?: (tx: Tx, row: ModelVersionRow) => Promise<void>,
): Promise<ModelVersionRow> {
  const principal = c.get('principal');
  const totalBytes = plan ? plan.formats.flatMap((f) => f.files).reduce((n, f) => n + (f.size_bytes ?? 0), 0) : 0;
  const row = await deps.db.transaction(async (tx) => {
    const created = await registerModelVersion(tx as unknown as Db, { ...v, ...(plan ? { status: 'pending_registration' as const } : {}) });
    // The row a request transaction would have written for this request, with what it registered.
    await audit(tx, {
      ...auditContext(c, principal),
      action: `${c.req.method} ${c.req.path}`,
      target: c.req.path,
      detail: { model: v.modelName, version: created.version, source: v.source ?? null, files: plan ? plan.formats.reduce((n, f) => n + f.files.length, 0) : 0, bytes: totalBytes },
    });
    await inTransaction?.(tx, created);
    return created;
  });
  if (!plan) return row;
  const input: ModelRegistrationInput = {
    version_id: row.id,
    organization_id: v.organizationId,
    model_name: v.modelName,
    version: row.version,
    formats: plan.formats.map((f) => ({ format: f.format, files: f.files.map((x) => ({ uri: x.uri, path: x.path, ...(x.size_bytes !== undefined ? { size_bytes: x.size_bytes } : {}) })) })),
    description: plan.description,
    total_bytes: totalBytes,
  };
  try {
    await deps.temporal.workflow.start<typeof modelRegistrationWorkflow>('modelRegistrationWorkflow', {
      taskQueue: PIPELINE_TASK_QUEUE,
      workflowId: modelRegistrationWorkflowId(row.id),
      args: [input],
      memo: { organization_id: v.organizationId },
    });
  } catch (err) {
    // The version exists (its number is spent) but nothing will copy its files: it says why instead of staying pending.
    const message = `version ${row.version} of model "${v.modelName}" not registered: the copy of its files could not start (${(err as Error).message})`;
    await completeRegistration(deps.db, row.id, { artifacts: {}, checksum: null, failed: true, message });
    throw new ApiError('TEMPORARILY_UNAVAILABLE', message);
  }
  return row;
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

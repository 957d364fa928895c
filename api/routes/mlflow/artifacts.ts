// MLflow artifacts: the artifact proxy (`/api/2.0/mlflow-artifacts/artifacts/<path>`: PUT, GET, DELETE, and a
// listing with ?path=), the run listing `mlflow/artifacts/list`, and the top-level /health, /version and
// server-info the client and UI probe. Clients upload through the proxy because experiments and runs report
// `mlflow-artifacts:/...` locations.
import { Hono, type Context } from 'hono';
import type { ApiDeps, AppEnv } from '../../deps.js';
import { auditRow } from '../../audit.js';
import { ApiError, invalid } from '../../errors.js';
import { requireRole } from '../../auth.js';
import { ListArtifactsSchema, ProxyListSchema } from '../../../contracts/mlflow-artifacts.js';
import { ensureDefaultExperiment, getExperiment } from '../../../db/repo/experiments.js';
import { getRun, type RunRow } from '../../../db/repo/runs.js';
import { artifactRootUri } from '../../../lib/object-store.js';
import { mlflowRequest, storedExperimentId, wireExperimentId } from './common.js';
import { artifactArea, keyOfUri, rawPathAfter, safeArtifactPath, wireRunArtifactUri } from './artifact-store.js';
import { isVersionFilesPath, versionFilesArea, VERSION_FILES_ROOT } from './version-artifacts.js';

/** The version of the MLflow REST protocol this server speaks, reported by GET /version. */
export const MLFLOW_PROTOCOL_VERSION = '3.17.2';

const notImplemented = (c: Context<AppEnv>, message: string) => c.json({ error_code: 'NOT_IMPLEMENTED', message, request_id: c.get('requestId') }, 501);

/** Routes under /api/2.0/mlflow-artifacts (and /ajax-api/2.0/mlflow-artifacts). */
export function mlflowArtifactProxyRoutes(deps: ApiDeps): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const area = artifactArea(deps);
  const versions = versionFilesArea(deps);
  const pathOf = (c: Context<AppEnv>) => safeArtifactPath(rawPathAfter(c, '/mlflow-artifacts/artifacts/'));

  /**
   * Writes may go anywhere in the proxy's namespace, as with MLflow's `--artifacts-destination`; each file belongs
   * to the organization that wrote it (artifact_objects), so one organization never reads, lists, overwrites or
   * deletes another's. A path whose first segment is an experiment id must be an experiment of the caller's.
   */
  async function checkWritable(organizationId: string, path: string): Promise<void> {
    if (path === '') throw invalid('Invalid path');
    // A version's files of record change only by registering a new version.
    if (isVersionFilesPath(path)) throw new ApiError('PERMISSION_DENIED', `'${VERSION_FILES_ROOT}/' holds the files of registered model versions and is read-only`);
    const [first] = path.split('/');
    if (first === '0') return ensureDefaultExperiment(deps.db, organizationId, artifactRootUri(deps));
    if (!first || !/^[0-9a-f]{32}$/.test(first) || !path.includes('/')) return;
    if (!(await getExperiment(deps.db, organizationId, storedExperimentId(first, organizationId))))
      throw new ApiError('RESOURCE_DOES_NOT_EXIST', `No Experiment with id=${first} exists`);
  }

  app.get('/artifacts', async (c) => {
    const p = requireRole(c, 'viewer');
    const q = await mlflowRequest(c, ProxyListSchema);
    const path = q.path === undefined ? '' : safeArtifactPath(q.path);
    const files = isVersionFilesPath(path) ? await versions.list(p.organizationId, path) : await area.list(p.organizationId, path ? `experiments/${path}` : 'experiments', '');
    return c.json(files.length ? { files } : {});
  });

  app.get('/artifacts/*', async (c) => {
    const p = requireRole(c, 'viewer');
    const path = pathOf(c);
    return isVersionFilesPath(path) ? versions.download(p.organizationId, path) : area.download(p.organizationId, `experiments/${path}`, path);
  });

  app.put('/artifacts/*', async (c) => {
    const p = requireRole(c, 'developer');
    const path = pathOf(c);
    await checkWritable(p.organizationId, path);
    await area.put(p.organizationId, `experiments/${path}`, c.req.raw.body, auditRow(c, 'artifact.upload', `experiments/${path}`));
    return c.json({});
  });

  app.delete('/artifacts/*', async (c) => {
    const p = requireRole(c, 'developer');
    const path = pathOf(c);
    await checkWritable(p.organizationId, path);
    await area.remove(p.organizationId, `experiments/${path}`, auditRow(c, 'artifact.delete', `experiments/${path}`));
    return c.json({});
  });

  // Multipart uploads and presigned URLs: server-info reports them disabled, so clients upload in one PUT.
  for (const op of ['create', 'complete', 'abort'])
    app.post(`/mpu/${op}`, (c) => notImplemented(c, 'Multipart upload is not supported for the current artifact repository'));
  app.get('/presigned/*', (c) => notImplemented(c, 'Presigned upload is not supported for the current artifact repository'));
  return app;
}

async function runOf(deps: ApiDeps, organizationId: string, runId: string | undefined): Promise<RunRow> {
  if (!runId) throw invalid("Missing value for required parameter 'run_id'.");
  const run = await getRun(deps.db, organizationId, runId);
  if (!run) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `Run with id=${runId} not found`);
  return run;
}

const MAX_UI_UPLOAD_BYTES = 10 * 1024 * 1024;

/**
 * `GET mlflow/artifacts/list?run_id&path`: one directory of a run's artifacts; `POST mlflow/upload-artifact?run_uuid&path`:
 * the UI's upload of one small file (at most 10 MB, as MLflow) into a run's artifacts.
 */
export function mlflowArtifactRoutes(app: Hono<AppEnv>, deps: ApiDeps): void {
  const area = artifactArea(deps);
  app.post('/upload-artifact', async (c) => {
    const p = requireRole(c, 'developer');
    const runId = c.req.query('run_uuid');
    if (!runId) throw invalid('Request must specify run_uuid.');
    const raw = c.req.query('path');
    if (!raw) throw invalid('Request must specify path.');
    const path = safeArtifactPath(raw);
    if (path === '') throw invalid('Invalid path');
    const length = Number(c.req.header('content-length') ?? 0);
    if (length > MAX_UI_UPLOAD_BYTES) throw invalid('Artifact size is too large. Max size is 10MB.');
    const data = new Uint8Array(await c.req.arrayBuffer());
    if (data.length === 0) throw invalid('Request must specify data.');
    if (data.length > MAX_UI_UPLOAD_BYTES) throw invalid('Artifact size is too large. Max size is 10MB.');
    const run = await runOf(deps, p.organizationId, runId);
    const root = keyOfUri(deps, run.artifactUri);
    if (root === null) throw invalid(`The artifacts of run ${run.id} live at ${run.artifactUri}, outside this server's artifact store.`);
    await area.put(p.organizationId, `${root}/${path}`, new Blob([data]).stream(), auditRow(c, 'artifact.upload', `${root}/${path}`));
    return c.json({});
  });

  app.get('/artifacts/list', async (c) => {
    const p = requireRole(c, 'viewer');
    const q = await mlflowRequest(c, ListArtifactsSchema);
    const path = q.path === undefined ? '' : safeArtifactPath(q.path);
    const run = await runOf(deps, p.organizationId, q.run_id || q.run_uuid);
    const root = keyOfUri(deps, run.artifactUri);
    const files = root === null ? [] : await area.list(p.organizationId, [root, path].filter(Boolean).join('/'), path);
    const rootUri = wireRunArtifactUri(run.artifactUri, wireExperimentId(run.experimentId, run.organizationId), run.id);
    return c.json({ root_uri: rootUri, ...(files.length ? { files } : {}) });
  });
}

/** `GET /get-artifact?run_uuid&path`: the UI's download of one run artifact (mount behind authentication). */
export function mlflowGetArtifactRoute(app: Hono<AppEnv>, deps: ApiDeps): void {
  const area = artifactArea(deps);
  app.get('/get-artifact', async (c) => {
    const p = requireRole(c, 'viewer');
    const raw = c.req.query('path');
    if (raw === undefined) throw invalid("Missing value for required parameter 'path'.");
    const path = safeArtifactPath(raw);
    const run = await runOf(deps, p.organizationId, c.req.query('run_id') || c.req.query('run_uuid'));
    const root = keyOfUri(deps, run.artifactUri);
    if (root === null) throw invalid(`The artifacts of run ${run.id} live at ${run.artifactUri}, outside this server's artifact store.`);
    return area.download(p.organizationId, `${root}/${path}`, path);
  });
}

/** Unauthenticated probes: `/health`, `/version` and the client's capability check `server-info`. */
export function mlflowProbeRoutes(app: Hono<AppEnv>): void {
  app.get('/health', (c) => c.text('OK'));
  app.get('/version', (c) => c.text(MLFLOW_PROTOCOL_VERSION));
  for (const prefix of ['/api/3.0/mlflow', '/ajax-api/3.0/mlflow'])
    app.get(`${prefix}/server-info`, (c) =>
      c.json({
        store_type: 'SqlStore',
        workspaces_enabled: false,
        trace_archival_enabled: false,
        multipart_uploads_enabled: false,
        multipart_downloads_enabled: false,
        presigned_upload_run_id_supported: false,
        presigned_upload_model_id_supported: false,
      }),
    );
}

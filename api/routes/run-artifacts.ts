// /v1/runs/{id}/artifacts: upload one file (raw body, streamed) at a path relative to the run's artifact root,
// list a directory, download a file (streamed). Files land where the MLflow artifact proxy keeps that run's
// artifacts, so `mlflow.artifacts.download_artifacts` and these routes see the same tree.
import { Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../deps.js';
import { invalid, notFound } from '../errors.js';
import { requireRole } from '../auth.js';
import { queryParams } from '../validate.js';
import { getRun, type RunRow } from '../../db/repo/runs.js';
import { RunArtifactListQuerySchema, RunArtifactUploadQuerySchema } from '../../contracts/mlflow-artifacts.js';
import { artifactArea, keyOfUri, rawPathAfter, safeArtifactPath } from './mlflow/artifact-store.js';
import { auditRow } from '../audit.js';

export function runArtifactRoutes(deps: ApiDeps): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const area = artifactArea(deps);

  async function runOf(organizationId: string, id: string): Promise<RunRow> {
    const run = await getRun(deps.db, organizationId, id);
    if (!run) throw notFound(`run ${id}`);
    return run;
  }
  /** The object key of the run's artifact root; a run whose artifacts live elsewhere cannot be served. */
  function rootKey(run: RunRow): string {
    const key = keyOfUri(deps, run.artifactUri);
    if (key === null) throw invalid(`run ${run.id} keeps its artifacts at ${run.artifactUri}, outside this server's artifact store`);
    return key;
  }

  app.post('/:id/artifacts', async (c) => {
    const p = requireRole(c, 'developer');
    const q = queryParams(c, RunArtifactUploadQuerySchema);
    const path = safeArtifactPath(q.path);
    if (path === '') throw invalid('path must name a file under the run artifact root');
    const run = await runOf(p.organizationId, c.req.param('id'));
    if (run.lifecycleStage !== 'active') throw invalid(`run ${run.id} is deleted; restore it before uploading artifacts`);
    const stored = await area.put(p.organizationId, `${rootKey(run)}/${path}`, c.req.raw.body, auditRow(c, 'artifact.upload', `${rootKey(run)}/${path}`));
    return c.json({ path, size_bytes: stored.sizeBytes, checksum: `sha256:${stored.sha256}` }, 201);
  });

  app.get('/:id/artifacts', async (c) => {
    const p = requireRole(c, 'viewer');
    const q = queryParams(c, RunArtifactListQuerySchema);
    const path = q.path === undefined ? '' : safeArtifactPath(q.path);
    const run = await runOf(p.organizationId, c.req.param('id'));
    const files = await area.list(p.organizationId, [rootKey(run), path].filter(Boolean).join('/'), path);
    return c.json({ root_uri: run.artifactUri, files });
  });

  app.get('/:id/artifacts/*', async (c) => {
    const p = requireRole(c, 'viewer');
    const id = c.req.param('id');
    const path = safeArtifactPath(rawPathAfter(c, `/runs/${id}/artifacts/`));
    if (path === '') throw invalid('path must name a file under the run artifact root');
    const run = await runOf(p.organizationId, id);
    return area.download(p.organizationId, `${rootKey(run)}/${path}`, path);
  });

  return app;
}

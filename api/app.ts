// createApp(deps): the Hono application (request id, logging, one JSON error handler, notFound).
// Tests call app.request() with no listening server.
import { randomUUID } from 'node:crypto';
import { Hono } from 'hono';
import { sql } from 'drizzle-orm';
import type { ApiDeps, AppEnv } from './deps.js';
import { ApiError, errorResponse } from './errors.js';
import { anonymousPrincipal, authenticate } from './auth.js';
import { datasetRoutes } from './routes/datasets.js';
import { pipelineRoutes } from './routes/pipelines.js';
import { runRoutes } from './routes/runs.js';
import { experimentRoutes } from './routes/experiments.js';
import { modelRoutes } from './routes/models.js';
import { scheduleRoutes } from './routes/schedules.js';
import { hpoRoutes } from './routes/hpo.js';
import { mlflowRoutes } from './routes/mlflow/index.js';
import { mlflowArtifactProxyRoutes, mlflowGetArtifactRoute, mlflowProbeRoutes } from './routes/mlflow/artifacts.js';
import { runArtifactRoutes } from './routes/run-artifacts.js';
import { openApiDocument } from './openapi.js';
import { mlflowUiBuildDir, mlflowUiRoutes } from './routes/mlflow-ui.js';

export function createApp(deps: ApiDeps): Hono<AppEnv> {
  const app = new Hono<AppEnv>();

  app.use('*', async (c, next) => {
    const requestId = c.req.header('x-request-id') ?? randomUUID();
    c.set('requestId', requestId);
    c.header('x-request-id', requestId);
    const started = performance.now();
    await next();
    deps.log.debug('request', { method: c.req.method, path: c.req.path, status: c.res.status, ms: Math.round(performance.now() - started), request_id: requestId });
  });

  app.get('/alive', (c) => c.json({ status: 'alive' }));
  app.get('/ready', async (c) => {
    const checks = {
      catalogue: await deps.db.execute(sql`select 1`).then(() => 'ok', (e: Error) => e.message),
      temporal: await deps.temporal.workflowService.getSystemInfo({}).then(() => 'ok', (e: Error) => e.message),
    };
    const ready = Object.values(checks).every((v) => v === 'ok');
    return c.json({ status: ready ? 'ready' : 'not ready', checks }, ready ? 200 : 503);
  });
  // Generated on first request, once every route below is registered.
  let openapi: Record<string, unknown> | null = null;
  app.get('/openapi.json', (c) => c.json((openapi ??= openApiDocument(app.routes))));
  mlflowProbeRoutes(app);

  const anonymous = anonymousPrincipal(deps.config);
  for (const prefix of ['/v1', '/api/2.0/mlflow', '/ajax-api/2.0/mlflow', '/api/2.0/mlflow-artifacts', '/ajax-api/2.0/mlflow-artifacts']) app.use(`${prefix}/*`, authenticate(deps.db, anonymous));
  app.route('/v1/datasets', datasetRoutes(deps));
  app.route('/v1/pipelines', pipelineRoutes(deps));
  app.route('/v1/experiments', experimentRoutes(deps));
  app.route('/v1/runs', runRoutes(deps));
  app.route('/v1/runs', runArtifactRoutes(deps));
  app.route('/v1/models', modelRoutes(deps));
  app.route('/v1/schedules', scheduleRoutes(deps));
  app.route('/v1/hpo', hpoRoutes(deps));
  app.route('/api/2.0/mlflow', mlflowRoutes(deps));
  app.route('/ajax-api/2.0/mlflow', mlflowRoutes(deps));
  app.route('/api/2.0/mlflow-artifacts', mlflowArtifactProxyRoutes(deps));
  app.route('/ajax-api/2.0/mlflow-artifacts', mlflowArtifactProxyRoutes(deps));
  app.use('/get-artifact', authenticate(deps.db, anonymous));
  mlflowGetArtifactRoute(app, deps);
  mlflowUiRoutes(app, mlflowUiBuildDir(deps.bootstrap.mlflow_python));

  app.notFound((c) => errorResponse(c, 'RESOURCE_DOES_NOT_EXIST', `no route for ${c.req.method} ${c.req.path}`));
  app.onError((err, c) => {
    if (err instanceof ApiError) return errorResponse(c, err.code, err.message);
    deps.log.error('unhandled error', { error: err.stack ?? String(err), request_id: c.get('requestId') });
    return errorResponse(c, 'INTERNAL_ERROR', `internal error (request ${c.get('requestId')}): ${err.message}`);
  });
  return app;
}

// createApp(deps): the Hono application (request id, logging, one JSON error handler, notFound).
// Tests call app.request() with no listening server.
import { randomUUID } from 'node:crypto';
import { Hono, type MiddlewareHandler } from 'hono';
import type { Principal } from '../db/repo/auth.js';
import { sql } from 'drizzle-orm';
import type { ApiDeps, AppEnv } from './deps.js';
import { ApiError, errorResponse, invalid } from './errors.js';

/** MLflow's own limit on a log-batch body (as its server refuses it). */
const MLFLOW_BATCH_BYTES = 1024 * 1024;
import { anonymousPrincipal, authenticate, isUploadPath, jwtVerifierFor } from './auth.js';
import { streamingBodyLimit } from './body-limit.js';
import { auditContext, identityRoutes } from './routes/identity.js';
import { eventRoutes } from './routes/events.js';
import { audit } from '../db/repo/auth.js';
import { datasetRoutes } from './routes/datasets.js';
import { pipelineRoutes } from './routes/pipelines.js';
import { runRoutes } from './routes/runs.js';
import { experimentRoutes } from './routes/experiments.js';
import { modelRoutes } from './routes/models.js';
import { scheduleRoutes } from './routes/schedules.js';
import { hpoRoutes } from './routes/hpo.js';
import { queueRoutes } from './routes/queues.js';
import { mlflowRoutes } from './routes/mlflow/index.js';
import { mlflowArtifactProxyRoutes, mlflowGetArtifactRoute, mlflowProbeRoutes } from './routes/mlflow/artifacts.js';
import { runArtifactRoutes } from './routes/run-artifacts.js';
import { openApiDocument } from './openapi.js';
import { mlflowGraphqlRoutes } from './routes/mlflow/graphql.js';
import { mlflowUiBuildDir, mlflowUiRoutes } from './routes/mlflow-ui.js';

export function createApp(deps: ApiDeps): Hono<AppEnv> {
  const app = new Hono<AppEnv>();

  if (deps.metrics) app.use('*', deps.metrics.requests);
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

  const limits = deps.config.limits;
  app.use(
    '*',
    streamingBodyLimit((path) =>
      /\/runs\/log-batch$/.test(path)
        ? { bytes: MLFLOW_BATCH_BYTES, refuse: (n) => invalid(`Batched logging API requests must be at most ${MLFLOW_BATCH_BYTES} bytes, got payload of size ${n}.`) }
        : isUploadPath(path)
          ? { bytes: limits.max_upload_bytes, refuse: (n) => new ApiError('REQUEST_LIMIT_EXCEEDED', `an upload of ${n} bytes or more exceeds limits.max_upload_bytes (${limits.max_upload_bytes})`) }
          : { bytes: limits.max_body_bytes, refuse: (n) => new ApiError('REQUEST_LIMIT_EXCEEDED', `a request body of ${n} bytes or more exceeds limits.max_body_bytes (${limits.max_body_bytes})`) },
    ),
  );
  const anonymous = anonymousPrincipal(deps.config);
  const authOptions = { anonymous, jwt: jwtVerifierFor(deps.config), port: deps.config.server.port };
  for (const prefix of ['/v1', '/api/2.0/mlflow', '/ajax-api/2.0/mlflow', '/api/2.0/mlflow-artifacts', '/ajax-api/2.0/mlflow-artifacts', '/get-artifact', '/graphql']) {
    const pattern = prefix === '/get-artifact' || prefix === '/graphql' ? prefix : `${prefix}/*`;
    app.use(pattern, auditTrail(deps, anonymous));
    app.use(pattern, authenticate(deps.db, authOptions));
  }
  app.route('/v1', identityRoutes(deps));
  app.route('/v1/events', eventRoutes(deps));
  app.route('/v1/datasets', datasetRoutes(deps));
  app.route('/v1/pipelines', pipelineRoutes(deps));
  app.route('/v1/experiments', experimentRoutes(deps));
  app.route('/v1/runs', runRoutes(deps));
  app.route('/v1/runs', runArtifactRoutes(deps));
  app.route('/v1/models', modelRoutes(deps));
  app.route('/v1/schedules', scheduleRoutes(deps));
  app.route('/v1/hpo', hpoRoutes(deps));
  app.route('/v1/queues', queueRoutes(deps));
  app.route('/api/2.0/mlflow', mlflowRoutes(deps));
  app.route('/ajax-api/2.0/mlflow', mlflowRoutes(deps));
  app.route('/api/2.0/mlflow-artifacts', mlflowArtifactProxyRoutes(deps));
  app.route('/ajax-api/2.0/mlflow-artifacts', mlflowArtifactProxyRoutes(deps));
  mlflowGetArtifactRoute(app, deps);
  mlflowGraphqlRoutes(app);
  mlflowUiRoutes(app, mlflowUiBuildDir(deps.bootstrap.mlflow_python));

  app.notFound((c) => errorResponse(c, 'RESOURCE_DOES_NOT_EXIST', `no route for ${c.req.method} ${c.req.path}`));
  app.onError((err, c) => {
    if (err instanceof ApiError) return errorResponse(c, err.code, err.message);
    deps.log.error('unhandled error', { error: err.stack ?? String(err), request_id: c.get('requestId') });
    return errorResponse(c, 'INTERNAL_ERROR', `internal error (request ${c.get('requestId')}): ${err.message}`);
  });
  return app;
}

/** Reads that hand out data (artifacts, dataset and model files): audited as downloads. */
const DOWNLOAD = /\/artifacts\/.+|\/get-artifact$|\/download$/;

/**
 * The audit trail of every call that changes state, every download and every denial. A handler that writes its
 * own row inside the transaction of its change marks the request `audited`; any other successful change gets a
 * row here, after its response, naming method and path.
 */
function auditTrail(deps: ApiDeps, anonymous: Principal | null): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    await next();
    if (c.get('audited')) return;
    const status = c.res.status;
    const method = c.req.method;
    const denied = status === 403;
    const download = method === 'GET' && status < 300 && DOWNLOAD.test(c.req.path);
    const change = !['GET', 'HEAD', 'OPTIONS'].includes(method) && status < 400;
    if (!denied && !download && !change) return;
    const principal = c.get('principal') ?? anonymous;
    if (!principal) return;
    await audit(deps.db, {
      ...auditContext(c, principal),
      action: denied ? `denied ${method} ${c.req.path}` : download ? 'download' : `${method} ${c.req.path}`,
      target: c.req.path,
      outcome: denied ? 'denied' : 'ok',
      detail: { status },
    }).catch((err: unknown) => deps.log.error('audit row not written', { error: String(err), request_id: c.get('requestId') }));
  };
}

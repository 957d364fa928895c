// createApp(deps): the Hono application (request id, logging, one JSON error handler, notFound).
// Tests call app.request() with no listening server.
import { randomUUID } from 'node:crypto';
import { Hono, type MiddlewareHandler } from 'hono';
import { DrizzleQueryError, sql } from 'drizzle-orm';
import type { ApiDeps, AppEnv } from './deps.js';
import { ApiError, errorResponse, invalid } from './errors.js';

/** MLflow's own limit on a log-batch body (as its server refuses it). */
const MLFLOW_BATCH_BYTES = 1024 * 1024;
import { anonymousPrincipal, authenticate, isUploadPath, jwtVerifierFor, tokenPrincipal } from './auth.js';
import { streamingBodyLimit } from './body-limit.js';
import { identityRoutes } from './routes/identity.js';
import { auditTrail, requestTransactions } from './audit.js';
import { eventRoutes, streamSlots } from './routes/events.js';
import { createOutboxListener } from '../events/outbox-listener.js';
import { datasetRoutes, signedDownloadRoutes } from './routes/datasets/index.js';
import { evalSuiteRoutes } from './routes/eval-suites.js';
import { pipelineRoutes } from './routes/pipelines.js';
import { usageRoutes } from './routes/usage.js';
import { jobRoutes } from './routes/jobs.js';
import { jobStreamRoutes } from './routes/job-streams.js';
import { fileRoutes } from './routes/files.js';
import { fineTuningRoutes } from './routes/fine-tuning.js';
import { webhookRoutes } from './routes/webhooks.js';
import { runRoutes } from './routes/runs.js';
import { seriesRoutes } from './routes/series.js';
import { pageStreamRoutes } from './routes/stream.js';
import { estimateRoutes } from './routes/estimates.js';
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
import { revocableSessions, sessionLoginRoutes, sessionRoutes, sessionSealer } from './routes/console-session.js';
import { consoleBuildDir, consoleRoutes } from './routes/console.js';
import { oidcLoginRoutes, sessionRenewer } from './routes/console-oidc.js';

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
  // Signed dataset downloads of the file store: the URL's signature is the credential, so no bearer token.
  app.route('/downloads/datasets', signedDownloadRoutes(deps));

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
  const sessions = revocableSessions(deps.db, sessionSealer(deps.home, deps.config.auth.session_secret));
  const authOptions = { anonymous, jwt: jwtVerifierFor(deps.config), port: deps.config.server.port, sessions, renewSession: sessionRenewer(deps, sessions) };
  // Signing in and out of the console take no credentials of their own: mounted before authentication.
  app.route('/v1/session', sessionLoginRoutes(deps, sessions, tokenPrincipal(deps.db, authOptions.jwt)));
  app.route('/v1/session', oidcLoginRoutes(deps, sessions, tokenPrincipal(deps.db, authOptions.jwt)));
  const trail = auditTrail(deps, anonymous);
  for (const prefix of ['/v1', '/api/2.0/mlflow', '/ajax-api/2.0/mlflow', '/api/2.0/mlflow-artifacts', '/ajax-api/2.0/mlflow-artifacts', '/get-artifact', '/graphql']) {
    const pattern = prefix === '/get-artifact' || prefix === '/graphql' ? prefix : `${prefix}/*`;
    app.use(pattern, trail);
    app.use(pattern, authenticate(deps.db, authOptions));
  }
  // Route families whose changes are catalogue writes only run each change in one transaction with its audit
  // row. Uploads stream their bodies first and audit with the catalogue row they write (api/audit.ts); a logged
  // batch, training's hot path, writes its points and audit row in one statement (mlflow/runs.ts).
  const requests = requestTransactions(deps.db);
  // A model version's registration commits its row and audit row in a short transaction of its own and then starts
  // the workflow that copies its files (api/model-files.ts): a request transaction would still be open at the start.
  const registersVersion = (path: string): boolean => /^\/v1\/models\/[^/]+\/versions$|\/2\.0\/mlflow\/model-versions\/create$/.test(path);
  const writesOwnAudit = (path: string): boolean =>
    isUploadPath(path) || path.endsWith('/upload-artifact') || /\/2\.0\/mlflow\/runs\/log-batch$/.test(path) || registersVersion(path);
  const atomic: MiddlewareHandler<AppEnv> = (c, next) => (writesOwnAudit(c.req.path) ? next() : requests.atomic(c, next));
  for (const prefix of ['/v1/experiments', '/v1/runs', '/v1/models', '/api/2.0/mlflow', '/ajax-api/2.0/mlflow']) app.use(`${prefix}/*`, atomic);
  deps = { ...deps, db: requests.db };
  app.route('/v1', identityRoutes(deps));
  app.route('/v1/session', sessionRoutes(deps, sessions));
  // One count of each caller's open streams, events and job streams alike: limits.event_streams_per_token is theirs.
  const streams = streamSlots(deps.config.limits.event_streams_per_token);
  // One outbox poller per process for /v1/events and the page streams alike.
  const outboxListener = createOutboxListener(deps.db, { onError: (err) => deps.log.warn('event stream poll failed', { error: String(err) }) });
  app.route('/v1/events', eventRoutes(deps, streams, outboxListener));
  app.route('/v1/datasets', datasetRoutes(deps));
  app.route('/v1/eval-suites', evalSuiteRoutes(deps));
  app.route('/v1/pipelines', pipelineRoutes(deps));
  app.route('/v1/jobs', jobRoutes(deps));
  app.route('/v1/jobs', jobStreamRoutes(deps, streams));
  app.route('/v1/stream', pageStreamRoutes(deps, streams, outboxListener));
  app.route('/v1/estimates', estimateRoutes(deps));
  app.route('/v1/files', fileRoutes(deps));
  app.route('/v1/fine_tuning/jobs', fineTuningRoutes(deps));
  app.route('/v1/webhooks', webhookRoutes(deps));
  app.route('/v1/experiments', experimentRoutes(deps));
  app.route('/v1/runs', seriesRoutes(deps));
  app.route('/v1/runs', runRoutes(deps));
  app.route('/v1/runs', runArtifactRoutes(deps));
  app.route('/v1/models', modelRoutes(deps));
  app.route('/v1/schedules', scheduleRoutes(deps));
  app.route('/v1/hpo', hpoRoutes(deps));
  app.route('/v1/queues', queueRoutes(deps));
  app.route('/v1/usage', usageRoutes(deps));
  app.route('/api/2.0/mlflow', mlflowRoutes(deps));
  app.route('/ajax-api/2.0/mlflow', mlflowRoutes(deps));
  app.route('/api/2.0/mlflow-artifacts', mlflowArtifactProxyRoutes(deps));
  app.route('/ajax-api/2.0/mlflow-artifacts', mlflowArtifactProxyRoutes(deps));
  mlflowGetArtifactRoute(app, deps);
  mlflowGraphqlRoutes(app, deps.config.limits);
  mlflowUiRoutes(app, deps.config.server.mlflow_ui_dir ?? mlflowUiBuildDir(deps.bootstrap.mlflow_ui, deps.bootstrap.mlflow_python));
  const consolePage = consoleRoutes(app, consoleBuildDir(deps.config.server.console_dir, deps.bootstrap));

  app.notFound(async (c) => (await consolePage(c)) ?? errorResponse(c, 'RESOURCE_DOES_NOT_EXIST', `no route for ${c.req.method} ${c.req.path}`));
  app.onError((err, c) => {
    if (err instanceof ApiError) return errorResponse(c, err.code, err.message);
    deps.log.error('unhandled error', { error: err.stack ?? String(err), request_id: c.get('requestId') });
    // A failed query's message is its SQL and bound values: the client gets the database's reason alone.
    const reason = err instanceof DrizzleQueryError && err.cause instanceof Error ? err.cause.message : err.message;
    return errorResponse(c, 'INTERNAL_ERROR', `internal error (request ${c.get('requestId')}): ${reason}`);
  });
  return app;
}

// The whole control plane in one process: catalogue, object store, Temporal client, worker and API.
// `hanzo-ml dev` adds the embedded Temporal dev server; tests build the same runtime around theirs.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { serve, type ServerType } from '@hono/node-server';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime as TemporalRuntime, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Config } from '../contracts/config.js';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { revokeDevTokens, seedDevOrganization } from '../db/repo/auth.js';
import { ConfigError, trainerPython } from './config.js';
import { createApp } from '../api/app.js';
import { createMetrics, serveMetrics } from '../api/metrics.js';
import { startEventRelay, startOutboxPruner, type EventRelay } from './event-relay.js';
import { createPipelineWorker, type PipelineWorker } from '../workers/worker.js';
import { detectLocalGpus } from '../scheduling/admission.js';
import { LocalExecutor, runningLocalJobs, signalJob, jobState } from '../activities/executor/local.js';
import { kubernetesExecutorFromConfig } from '../activities/executor/kubernetes.js';
import type { JobExecutor } from '../activities/executor/types.js';
import { jobTokenSecrets } from '../activities/deps.js';
import { localJobEnvironment } from '../activities/jobs.js';
import { createObjectStore, type ObjectStore } from './object-store.js';
import { createLogger, type Logger } from './log.js';
import type { Bootstrap } from './config.js';

export interface Runtime {
  catalogue: Catalogue;
  store: ObjectStore;
  client: Client;
  worker: PipelineWorker | null;
  app: ReturnType<typeof createApp>;
  server: ServerType | null;
  apiUrl: string;
  /** the Prometheus scrape URL; null when metrics are off or nothing listens */
  metricsUrl: string | null;
  log: Logger;
  stop(opts?: { stopJobs?: boolean }): Promise<void>;
}

export interface RuntimeOptions {
  config: Config;
  home: string;
  bootstrap: Bootstrap;
  temporalAddress: string;
  temporalUiUrl: string | null;
  /** false: API only (no worker), as `hanzo-ml serve`. */
  worker?: boolean;
  /** false: worker only (no API), as `hanzo-ml worker`. */
  api?: boolean;
  /**
   * The development token: seeded only by the embedded stack (`hanzo-ml dev`, tests) listening on loopback.
   * false (`hanzo-ml serve`/`worker`): not seeded, and any development token seeded earlier is revoked.
   */
  devToken?: boolean;
  /** false: this process does not run the outbox relay even with stream.brokers set. */
  relay?: boolean;
  /** false: no listening HTTP server (tests use app.request()). */
  listen?: boolean;
  workflowBundle?: WorkflowBundleWithSourceMap;
  taskQueue?: string;
}

let sdkRuntimeInstalled = false;

/** The Temporal SDK logs through its own runtime; keep it to warnings unless debugging. */
function installSdkRuntime(level: string): void {
  if (sdkRuntimeInstalled) return;
  sdkRuntimeInstalled = true;
  try {
    TemporalRuntime.install({ logger: new DefaultLogger(level === 'debug' ? 'INFO' : 'WARN') });
  } catch {
    // already installed by the embedding process (tests)
  }
}

export async function startRuntime(o: RuntimeOptions): Promise<Runtime> {
  const log = createLogger(o.config.logging);
  installSdkRuntime(o.config.logging.level);
  for (const dir of ['logs', 'work', 'tmp', 'objects']) mkdirSync(join(o.home, dir), { recursive: true });
  const catalogue = await openCatalogue({ url: o.config.database.url, pgliteDir: join(o.home, 'pg') });
  try {
    await devTokenPolicy(o, catalogue.db);
  } catch (err) {
    await catalogue.close();
    throw err;
  }
  const store = await createObjectStore(o.config.storage, o.home);
  const connection = await Connection.connect({ address: o.temporalAddress });
  const client = new Client({ connection, namespace: o.config.temporal.namespace });
  const apiUrl = o.config.server.public_url ?? `http://${o.config.server.host === '0.0.0.0' ? '127.0.0.1' : o.config.server.host}:${o.config.server.port}`;
  const deps = { db: catalogue.db, store, config: o.config, home: o.home, bootstrap: o.bootstrap, log };

  let worker: PipelineWorker | null = null;
  let workerRun: Promise<void> | null = null;
  let nativeConnection: NativeConnection | null = null;
  if (o.worker !== false) {
    nativeConnection = await NativeConnection.connect({ address: o.temporalAddress });
    worker = await createPipelineWorker({
      connection: nativeConnection,
      namespace: o.config.temporal.namespace,
      deps: { ...deps, executor: createExecutor(o, log), trackingUri: apiUrl, jobSecrets: jobTokenSecrets(catalogue.db) },
      ...(o.workflowBundle ? { workflowBundle: o.workflowBundle } : {}),
      ...(o.taskQueue ? { taskQueue: o.taskQueue } : {}),
    });
    workerRun = worker.run();
  }
  // Built in every shape (it is only a function); served only by the API shapes.
  // Every process may run the relay (one at a time publishes, under the catalogue's relay lock).
  const relay: EventRelay | null = o.config.stream.brokers && o.relay !== false ? await startEventRelay({ db: catalogue.db, config: o.config, log }) : null;
  const pruner = o.config.stream.brokers ? null : startOutboxPruner({ db: catalogue.db, config: o.config, log });
  // Served by API and worker pods alike (both are annotated for scraping); the catalogue-backed series are the
  // same on every pod, the alert rules take max() across them.
  const metrics = o.config.metrics.enabled ? createMetrics(catalogue.db, o.config) : null;
  const app = createApp({ ...deps, temporal: client, temporalUiUrl: o.temporalUiUrl, metrics });
  const server = o.listen === false || o.api === false ? null : await listen(app, o.config.server.host, o.config.server.port);
  const metricsServer = metrics && o.listen !== false ? await serveMetrics(metrics, o.config) : null;
  const metricsAddress = metricsServer?.address();
  const metricsUrl = metricsAddress && typeof metricsAddress === 'object' ? `http://${hostOf(o.config.server.host)}:${metricsAddress.port}${o.config.metrics.path}` : null;

  return {
    catalogue,
    store,
    client,
    worker,
    app,
    server,
    apiUrl,
    metricsUrl,
    log,
    async stop(opts = {}) {
      // Order matters: the worker stops first (so no activity restarts a job we are stopping), the jobs stop
      // while the API still takes their last metrics, and only then the API closes.
      if (worker && worker.getState() === 'RUNNING') worker.shutdown();
      if (opts.stopJobs && o.config.scheduler.executor === 'local') await stopLocalJobs(o.home, log);
      if (server) await new Promise<void>((r) => server.close(() => r()));
      if (metricsServer) await new Promise<void>((r) => metricsServer.close(() => r()));
      await relay?.stop();
      pruner?.stop();
      await workerRun?.catch((err: unknown) => log.error('worker stopped with an error', { error: String(err) }));
      await nativeConnection?.close();
      await connection.close();
      await catalogue.close();
    },
  };
}

const hostOf = (host: string): string => (host === '0.0.0.0' ? '127.0.0.1' : host);

const DEFAULT_DEV_TOKEN = 'hanzo-ml-dev-token';
const isLoopback = (host: string): boolean => /^(127\.\d+\.\d+\.\d+|::1|localhost)$/.test(host);

/** The well-known development token is an admin credential: it must never reach a network. */
async function devTokenPolicy(o: RuntimeOptions, db: Catalogue['db']): Promise<void> {
  const { auth, server } = o.config;
  if (o.devToken === false) {
    if (auth.dev_token !== DEFAULT_DEV_TOKEN) throw new ConfigError('auth.dev_token: the development token exists only for a loopback `hanzo-ml dev`; unset it and create tokens with `hanzo-ml token create`');
    await revokeDevTokens(db, auth.dev_organization);
    return;
  }
  if (!isLoopback(server.host))
    throw new ConfigError(`server.host: ${server.host} is reachable from other machines, and the development stack's admin token is well known; listen on 127.0.0.1, or run \`hanzo-ml serve\` with real tokens`);
  await seedDevOrganization(db, auth.dev_organization, auth.dev_token);
}

function listen(app: ReturnType<typeof createApp>, hostname: string, port: number): Promise<ServerType> {
  return new Promise((resolve, reject) => {
    const server = serve({ fetch: app.fetch, hostname, port }, () => resolve(server));
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(err.code === 'EADDRINUSE' ? new Error(`port ${port} is in use: is another hanzo-ml running? (HANZO_ML_SERVER_PORT changes it)`) : err),
    );
  });
}

/** The executor of scheduler.executor, chosen once at start-up. */
export function createExecutor(o: Pick<RuntimeOptions, 'config' | 'home' | 'bootstrap'>, log: Logger): JobExecutor {
  if (o.config.scheduler.executor === 'kubernetes') return kubernetesExecutorFromConfig(o.config, log);
  const gpus = detectLocalGpus(o.config.scheduler.local_gpus);
  return new LocalExecutor({ workRoot: localJobsRoot(o.home), python: trainerPython(o), env: localJobEnvironment(o), gpus });
}

export const localJobsRoot = (home: string): string => join(home, 'work', 'jobs');

/**
 * Ctrl-C stops local jobs too: SIGTERM makes the trainer write an emergency checkpoint (the job runner uploads
 * it), and the restarted stack resumes from it. Waits up to 60 s for the jobs to exit. Jobs of a cluster are
 * the cluster's: stopping this process leaves them running, and the next worker attaches.
 */
export async function stopLocalJobs(home: string, log: Logger): Promise<void> {
  const running = runningLocalJobs(localJobsRoot(home));
  for (const w of running) {
    log.info('stopping job (emergency checkpoint)', { workdir: w });
    signalJob(w, 'SIGTERM');
  }
  const deadline = Date.now() + 60_000;
  while (running.some((w) => jobState(w).state === 'running') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
}

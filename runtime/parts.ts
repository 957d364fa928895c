// The wiring every process shape shares: the catalogue with its development-token policy, the object store, the
// Temporal worker, the API server, the metrics server and the event relay. Each shape (serve.ts, worker.ts,
// relay.ts, embedded.ts for `dev` and tests) composes only the parts it runs.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { serve, type ServerType } from '@hono/node-server';
import type { Client } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime as TemporalRuntime, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Config } from '../contracts/config.js';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { revokeDevTokens, seedDevOrganization } from '../db/repo/auth.js';
import { ConfigError, type Bootstrap } from '../lib/config.js';
import { createObjectStore, type ObjectStore } from '../lib/object-store.js';
import { createLogger, type Logger } from '../lib/log.js';
import { temporalConnectionOptions } from '../lib/temporal-tls.js';
import { startEventRelay, startOutboxPruner } from '../events/relay.js';
import { startWebhookRelay } from '../events/webhooks.js';
import { jobTokenSecrets, withStorageAccess } from '../jobs/deps.js';
import { createExecutor } from '../jobs/executor/factory.js';
import { createPipelineWorker, type PipelineWorker } from '../workers/worker.js';
import { createApp } from '../api/app.js';
import { createMetrics, serveMetrics, type ApiMetrics } from '../api/metrics.js';

export interface ProcessOptions {
  config: Config;
  home: string;
  bootstrap: Bootstrap;
}

/** What a shape is built on: the configuration, its log, the catalogue and the object store. */
export interface Core extends ProcessOptions {
  log: Logger;
  catalogue: Catalogue;
  store: ObjectStore;
}

/**
 * `seed`: the embedded stack on loopback, with the development token. `revoke`: `serve`/`worker`, where any
 * development token seeded earlier stops working.
 */
export type DevTokenPolicy = 'seed' | 'revoke';

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

export async function openCore(o: ProcessOptions, devToken: DevTokenPolicy): Promise<Core> {
  const log = createLogger(o.config.logging);
  installSdkRuntime(o.config.logging.level);
  for (const dir of ['logs', 'work', 'tmp', 'objects']) mkdirSync(join(o.home, dir), { recursive: true });
  const catalogue = await openCatalogue({ url: o.config.database.url, pgliteDir: join(o.home, 'pg') });
  try {
    await applyDevTokenPolicy(o.config, catalogue.db, devToken);
  } catch (err) {
    await catalogue.close();
    throw err;
  }
  const store = await createObjectStore(o.config.storage, o.home);
  return { ...o, log, catalogue, store };
}

const DEFAULT_DEV_TOKEN = 'hanzo-ml-dev-token';
const isLoopback = (host: string): boolean => /^(127\.\d+\.\d+\.\d+|::1|localhost)$/.test(host);
export const hostOf = (host: string): string => (host === '0.0.0.0' ? '127.0.0.1' : host);

/** The well-known development token is an admin credential: it must never reach a network. */
async function applyDevTokenPolicy(config: Config, db: Catalogue['db'], policy: DevTokenPolicy): Promise<void> {
  const { auth, server } = config;
  if (policy === 'revoke') {
    if (auth.dev_token !== DEFAULT_DEV_TOKEN) throw new ConfigError('auth.dev_token: the development token exists only for a loopback `hanzo-ml dev`; unset it and create tokens with `hanzo-ml token create`');
    await revokeDevTokens(db, auth.dev_organization);
    return;
  }
  if (!isLoopback(server.host))
    throw new ConfigError(`server.host: ${server.host} is reachable from other machines, and the development stack's admin token is well known; listen on 127.0.0.1, or run \`hanzo-ml serve\` with real tokens`);
  await seedDevOrganization(db, auth.dev_organization, auth.dev_token);
}

/** Where jobs report their metrics: the public URL, or the API's own address. */
export const apiUrlOf = (config: Config): string => config.server.public_url ?? `http://${hostOf(config.server.host)}:${config.server.port}`;

export interface WorkerPart {
  worker: PipelineWorker;
  stop(): Promise<void>;
}

export async function startWorkerPart(core: Core, o: { temporalAddress: string; workflowBundle?: WorkflowBundleWithSourceMap; taskQueue?: string }): Promise<WorkerPart> {
  const connection = await NativeConnection.connect(temporalConnectionOptions(o.temporalAddress, core.config.temporal));
  const deps = { db: core.catalogue.db, store: core.store, config: core.config, home: core.home, bootstrap: core.bootstrap, log: core.log };
  const worker = await createPipelineWorker({
    connection,
    namespace: core.config.temporal.namespace,
    deps: { ...deps, executor: createExecutor(core, core.log), trackingUri: apiUrlOf(core.config), jobSecrets: withStorageAccess(jobTokenSecrets(core.catalogue.db), core.config) },
    ...(o.workflowBundle ? { workflowBundle: o.workflowBundle } : {}),
    ...(o.taskQueue ? { taskQueue: o.taskQueue } : {}),
  });
  const run = worker.run();
  return {
    worker,
    async stop() {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await run.catch((err: unknown) => core.log.error('worker stopped with an error', { error: String(err) }));
      await connection.close();
    },
  };
}

export type App = ReturnType<typeof createApp>;

/** The API app (not listening: see listen()). */
export function buildApp(core: Core, temporal: Client, temporalUiUrl: string | null, metrics: ApiMetrics | null): App {
  const deps = { db: core.catalogue.db, store: core.store, config: core.config, home: core.home, bootstrap: core.bootstrap, log: core.log };
  return createApp({ ...deps, temporal, temporalUiUrl, metrics });
}

export function listen(app: App, hostname: string, port: number): Promise<ServerType> {
  return new Promise((resolve, reject) => {
    const server = serve({ fetch: app.fetch, hostname, port }, () => resolve(server));
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(err.code === 'EADDRINUSE' ? new Error(`port ${port} is in use: is another hanzo-ml running? (HANZO_ML_SERVER_PORT changes it)`) : err),
    );
  });
}

const STREAM_GRACE_MS = 1000;

/**
 * Stops listening and waits for requests in flight; streams that never end by themselves (server-sent events of
 * followers) are cut after STREAM_GRACE_MS, and their clients reconnect to the next server from their last id.
 */
export const closeServer = (server: ServerType | null): Promise<void> =>
  server
    ? new Promise<void>((r) => {
        server.close(() => r());
        if ('closeAllConnections' in server) setTimeout(() => server.closeAllConnections(), STREAM_GRACE_MS).unref();
      })
    : Promise.resolve();

export interface MetricsPart {
  metrics: ApiMetrics | null;
  /** the Prometheus scrape URL; null when metrics are off or nothing listens */
  url: string | null;
  stop(): Promise<void>;
}

/**
 * Served by API and worker pods alike (both are annotated for scraping); the catalogue-backed series are the
 * same on every pod, the alert rules take max() across them.
 */
export async function startMetricsPart(core: Core, listening: boolean): Promise<MetricsPart> {
  const metrics = core.config.metrics.enabled ? createMetrics(core.catalogue.db, core.config) : null;
  const server = metrics && listening ? await serveMetrics(metrics, core.config) : null;
  const address = server?.address();
  const url = address && typeof address === 'object' ? `http://${hostOf(core.config.server.host)}:${address.port}${core.config.metrics.path}` : null;
  return { metrics, url, stop: () => closeServer(server) };
}

/**
 * Every process may run the relay (one at a time publishes, under the catalogue's relay lock); without brokers,
 * the outbox is pruned instead. Every process also sends due webhook deliveries (rows are claimed one relay at a time).
 */
export async function startEventsPart(core: Core): Promise<{ stop(): Promise<void> }> {
  const webhooks = startWebhookRelay({ db: core.catalogue.db, config: core.config, log: core.log });
  if (!core.config.stream.brokers) {
    const pruner = startOutboxPruner({ db: core.catalogue.db, config: core.config, log: core.log });
    return { stop: async () => (pruner.stop(), await webhooks.stop()) };
  }
  const relay = await startEventRelay({ db: core.catalogue.db, config: core.config, log: core.log });
  return { stop: async () => (await relay.stop(), await webhooks.stop()) };
}

/** Runs until SIGINT/SIGTERM, then `stop`. */
export async function untilSignalled(what: string, stop: () => Promise<void>): Promise<void> {
  process.stderr.write(`${what}: ready (SIGTERM stops it)\n`);
  await new Promise<void>((resolve) => {
    const onSignal = (): void => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      void stop().then(resolve);
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });
}

// The whole control plane in one process: catalogue, object store, Temporal client, worker and API. `hanzo-ml dev`
// runs it around the embedded Temporal dev server (dev.ts); tests run it around theirs. `serve` and `worker`
// compose their own parts (serve.ts, worker.ts).
import type { ServerType } from '@hono/node-server';
import { Client, Connection } from '@temporalio/client';
import type { WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Catalogue } from '../db/client.js';
import type { ObjectStore } from '../lib/object-store.js';
import type { Logger } from '../lib/log.js';
import { stopLocalJobs } from '../jobs/executor/factory.js';
import type { PipelineWorker } from '../workers/worker.js';
import { temporalConnectionOptions } from '../lib/temporal-tls.js';
import { apiUrlOf, buildApp, closeServer, listen, openCore, startEventsPart, startMetricsPart, startWorkerPart, type App, type ProcessOptions, type WorkerPart } from './parts.js';

export interface Runtime {
  catalogue: Catalogue;
  store: ObjectStore;
  client: Client;
  worker: PipelineWorker | null;
  app: App;
  server: ServerType | null;
  apiUrl: string;
  /** the Prometheus scrape URL; null when metrics are off or nothing listens */
  metricsUrl: string | null;
  log: Logger;
  stop(opts?: { stopJobs?: boolean }): Promise<void>;
}

export interface RuntimeOptions extends ProcessOptions {
  temporalAddress: string;
  temporalUiUrl: string | null;
  /** false: the API without a worker (a test of the API alone, as `hanzo-ml serve` is). */
  worker?: boolean;
  /**
   * The development token: seeded by default (the embedded stack listening on loopback). false: not seeded, and
   * any development token seeded earlier is revoked, as `serve` and `worker` do.
   */
  devToken?: boolean;
  /** false: no listening HTTP server (tests use app.request()). */
  listen?: boolean;
  workflowBundle?: WorkflowBundleWithSourceMap;
  taskQueue?: string;
}

export async function startRuntime(o: RuntimeOptions): Promise<Runtime> {
  const core = await openCore(o, o.devToken === false ? 'revoke' : 'seed');
  const connection = await Connection.connect(temporalConnectionOptions(o.temporalAddress, o.config.temporal));
  const client = new Client({ connection, namespace: o.config.temporal.namespace });
  const worker: WorkerPart | null =
    o.worker === false ? null : await startWorkerPart(core, { temporalAddress: o.temporalAddress, ...(o.workflowBundle ? { workflowBundle: o.workflowBundle } : {}), ...(o.taskQueue ? { taskQueue: o.taskQueue } : {}) });
  const events = await startEventsPart(core);
  const metrics = await startMetricsPart(core, o.listen !== false);
  const app = buildApp(core, client, o.temporalUiUrl, metrics.metrics);
  const server = o.listen === false ? null : await listen(app, o.config.server.host, o.config.server.port);

  return {
    catalogue: core.catalogue,
    store: core.store,
    client,
    worker: worker?.worker ?? null,
    app,
    server,
    apiUrl: apiUrlOf(o.config),
    metricsUrl: metrics.url,
    log: core.log,
    async stop(opts = {}) {
      // Order matters: the worker stops taking tasks first (so no activity restarts a job we are stopping), the
      // jobs stop while the API still takes their last metrics, and only then the API closes.
      if (worker && worker.worker.getState() === 'RUNNING') worker.worker.shutdown();
      if (opts.stopJobs && o.config.scheduler.executor === 'local') await stopLocalJobs(o.home, core.log);
      await closeServer(server);
      await metrics.stop();
      await events.stop();
      await worker?.stop();
      await connection.close();
      await core.catalogue.close();
    },
  };
}

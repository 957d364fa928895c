// Prometheus metrics of spec 000 on metrics.port/metrics.path. Across API replicas: the request-latency
// histogram is per process (each pod is scraped; PromQL sums them), every other metric is read from the
// catalogue at scrape time, so each replica reports the same totals and none is lost when a pod restarts.
import { createServer, type Server } from 'node:http';
import type { MiddlewareHandler } from 'hono';
import { routePath } from 'hono/route';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Config } from '../contracts/config.js';
import { nvidiaGpuNames } from '../lib/gpus.js';
import type { Db } from '../db/client.js';
import * as q from '../db/repo/monitoring.js';
import type { AppEnv } from './deps.js';
import { priorityValue } from '../jobs/queue/kueue-objects.js';
import { JOB_PRIORITIES } from '../contracts/config.js';

/** A stored priority value back to its name (an unknown value, from a newer version, shows as its number). */
const priorityName = (value: number): string => JOB_PRIORITIES.find((p) => priorityValue(p) === value) ?? String(value);

export interface ApiMetrics {
  registry: Registry;
  /** Hono middleware observing hanzo_ml_api_request_duration_seconds{endpoint} */
  requests: MiddlewareHandler<AppEnv>;
}

const DURATION_BUCKETS = [60, 300, 900, 1800, 3600, 2 * 3600, 6 * 3600, 24 * 3600, 3 * 24 * 3600];

/** GPUs of this machine (the local executor runs jobs here), counted by model name. */
function localGpus(): Map<string, number> {
  const gpus = new Map<string, number>();
  for (const name of nvidiaGpuNames()) gpus.set(name, (gpus.get(name) ?? 0) + 1);
  return gpus;
}

export function createMetrics(db: Db, config: Config): ApiMetrics {
  const registry = new Registry();
  const gpus = config.scheduler.executor === 'local' ? localGpus() : new Map<string, number>();
  /** A counter whose value is the catalogue's: reset and re-added on each scrape. */
  const catalogueCounter = <L extends string>(name: string, help: string, labelNames: L[], read: (c: Counter<L>) => Promise<void>) =>
    new Counter<L>({
      name,
      help,
      labelNames,
      registers: [registry],
      async collect() {
        this.reset();
        await read(this);
      },
    });
  const catalogueGauge = <L extends string>(name: string, help: string, labelNames: L[], read: (g: Gauge<L>) => Promise<void>) =>
    new Gauge<L>({
      name,
      help,
      labelNames,
      registers: [registry],
      async collect() {
        this.reset();
        await read(this);
      },
    });

  catalogueCounter('hanzo_ml_jobs_total', 'Jobs submitted, and finished by status', ['type', 'status', 'org'], async (c) => {
    for (const r of await q.jobCounts(db)) c.inc({ type: r.type, status: r.status, org: r.org }, r.n);
  });
  catalogueCounter('hanzo_ml_gpu_hours_total', 'Device-hours consumed by finished train jobs (gpu_type "cpu" for CPU jobs)', ['gpu_type', 'org'], async (c) => {
    for (const r of await q.gpuHours(db)) c.inc({ gpu_type: r.gpu_type, org: r.org }, r.hours);
  });
  catalogueCounter('hanzo_ml_datasets_created_total', 'Dataset versions created', ['org'], async (c) => {
    for (const r of await q.countsByOrg(db, 'datasets')) c.inc({ org: r.org }, r.n);
  });
  catalogueCounter('hanzo_ml_models_registered_total', 'Model versions registered', ['org'], async (c) => {
    for (const r of await q.countsByOrg(db, 'model_versions')) c.inc({ org: r.org }, r.n);
  });
  new Histogram({
    name: 'hanzo_ml_job_duration_seconds',
    help: 'Duration of finished jobs',
    labelNames: ['type'],
    buckets: DURATION_BUCKETS,
    registers: [registry],
    async collect() {
      this.reset();
      for (const r of await q.jobDurations(db)) this.observe({ type: r.type }, r.seconds);
    },
  });
  const requestDuration = new Histogram({
    name: 'hanzo_ml_api_request_duration_seconds',
    help: 'API request latency (this process)',
    labelNames: ['endpoint'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  catalogueGauge('hanzo_ml_jobs_running', 'Jobs running now', ['type', 'org'], async (g) => {
    for (const r of await q.jobsRunning(db)) g.set({ type: r.type, org: r.org }, r.n);
  });
  catalogueGauge('hanzo_ml_gpus_allocated', 'GPUs held by running train stages', ['gpu_type'], async (g) => {
    const rows = await q.gpusAllocated(db);
    for (const r of rows) g.set({ gpu_type: r.gpu_type }, r.n);
    if (rows.length === 0) g.set({ gpu_type: 'none' }, 0);
  });
  catalogueGauge('hanzo_ml_gpus_available', 'GPUs of the local executor not held by a running train stage', ['gpu_type'], async (g) => {
    const held = new Map((await q.gpusAllocated(db)).map((r) => [r.gpu_type, r.n]));
    for (const [name, n] of gpus) g.set({ gpu_type: name }, Math.max(0, n - (held.get(name) ?? held.get('gpu') ?? 0)));
    if (gpus.size === 0) g.set({ gpu_type: 'none' }, 0);
  });
  catalogueGauge('hanzo_ml_queue_depth', 'Jobs waiting for a slot of their organization (scheduler.quotas), by priority', ['org', 'priority'], async (g) => {
    for (const r of await q.queueDepth(db)) g.set({ org: r.org, priority: priorityName(r.priority) }, r.n);
  });
  catalogueGauge('hanzo_ml_storage_bytes', 'Bytes of objects the catalogue records, by bucket', ['bucket'], async (g) => {
    const bucket = { datasets: config.storage.buckets.datasets, checkpoints: config.storage.buckets.checkpoints } as Record<string, string>;
    for (const r of await q.storageBytes(db)) g.set({ bucket: bucket[r.kind] ?? r.kind }, r.bytes);
  });

  // Beyond the eleven of the spec: what its alerts (stalled training, stale checkpoint) are computed from.
  catalogueGauge('hanzo_ml_run_seconds_since_last_metric', 'Seconds since a running run last logged a metric', ['org', 'run_id'], async (g) => {
    for (const r of await q.runFreshness(db)) g.set({ org: r.org, run_id: r.run_id }, Math.max(0, r.since_metric));
  });
  catalogueGauge('hanzo_ml_run_seconds_since_last_checkpoint', 'Seconds since a running run recorded a checkpoint (or started, before its first)', ['org', 'run_id'], async (g) => {
    for (const r of await q.runFreshness(db)) g.set({ org: r.org, run_id: r.run_id }, Math.max(0, r.since_checkpoint));
  });

  const requests: MiddlewareHandler<AppEnv> = async (c, next) => {
    const end = requestDuration.startTimer();
    try {
      await next();
    } finally {
      // The route pattern, not the path: ids would make a series per object.
      end({ endpoint: `${c.req.method} ${c.res.status === 404 && !routePath(c, -1).includes(':') ? 'unmatched' : routePath(c, -1)}` });
    }
  };
  return { registry, requests };
}

/** The scrape endpoint, on its own port so it is never behind the API's authentication. */
export function serveMetrics(metrics: ApiMetrics, config: Config): Promise<Server> {
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== config.metrics.path) return void res.writeHead(404).end();
    metrics.registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text),
      (err: Error) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`metrics unavailable: ${err.message}\n`),
    );
  });
  return new Promise((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(err.code === 'EADDRINUSE' ? new Error(`metrics.port ${config.metrics.port} is in use (HANZO_ML_METRICS_PORT changes it, HANZO_ML_METRICS_ENABLED=false turns it off)`) : err),
    );
    server.listen(config.metrics.port, config.server.host, () => resolve(server));
  });
}

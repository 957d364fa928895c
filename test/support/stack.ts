// A real embedded stack for a test file: Temporal dev server (headless, SQLite in a temp dir), PGlite or
// Postgres, file:// objects, the worker and the API listening on free ports.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { startTemporalDevServer, type DevServer } from '../../lib/temporal-dev-server.js';
import { startRuntime, type Runtime } from '../../runtime/embedded.js';
import { startWorkerPart, type Core } from '../../runtime/parts.js';
import { bundleWorkflows } from '../../workers/worker.js';
import { testConfig, auth } from './config.js';
import { freePort } from './ports.js';
import type { LoadedConfig } from '../../lib/config.js';

export interface TestStack {
  runtime: Runtime;
  temporal: DevServer;
  loaded: LoadedConfig;
  home: string;
  /** JSON request through the listening API. */
  api<T = Record<string, unknown>>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }>;
  stop(): Promise<void>;
}

let bundle: Awaited<ReturnType<typeof bundleWorkflows>> | null = null;

export async function startTestStack(env: Record<string, string> = {}, opts: { worker?: boolean } = {}): Promise<TestStack> {
  const port = await freePort();
  const loaded = testConfig({ HANZO_ML_SERVER_PORT: String(port), HANZO_ML_TEMPORAL_HEARTBEAT_TIMEOUT: '10s', ...env });
  mkdirSync(join(loaded.home, 'logs'), { recursive: true });
  const temporal = await startTemporalDevServer({ binary: loaded.bootstrap.temporal, home: loaded.home, port: 0, uiPort: null, namespace: 'default' });
  bundle ??= await bundleWorkflows();
  const runtime = await startRuntime({
    config: loaded.config,
    home: loaded.home,
    bootstrap: loaded.bootstrap,
    temporalAddress: temporal.address,
    temporalUiUrl: null,
    workflowBundle: bundle,
    worker: opts.worker ?? true,
  });
  return {
    runtime,
    temporal,
    loaded,
    home: loaded.home,
    async api(method, path, body) {
      const res = await fetch(runtime.apiUrl + path, {
        method,
        headers: { ...auth, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
        body: body !== undefined ? JSON.stringify(body) : undefined,
      });
      const text = await res.text();
      return { status: res.status, body: (text ? JSON.parse(text) : {}) as never };
    },
    async stop() {
      await runtime.stop({ stopJobs: true });
      await temporal.stop();
    },
  };
}

/** What a worker beside a worker-less API is built on: its configuration, catalogue, store and Temporal server. */
export interface WorkerHost extends Core {
  temporalAddress: string;
}

/** A test stack's parts as a worker host. */
const hostOf = (s: TestStack): WorkerHost => ({ ...s.loaded, log: s.runtime.log, catalogue: s.runtime.catalogue, store: s.runtime.store, temporalAddress: s.temporal.address });

/**
 * A worker beside a worker-less API while `fn` runs, then stopped: what `fn` starts and waits for (an upload with
 * wait=true, whose preparation job runs as in production) ends ready, and the stack is worker-less again after.
 */
export async function withWorker<T>(on: TestStack | WorkerHost, fn: () => Promise<T>): Promise<T> {
  bundle ??= await bundleWorkflows();
  const part = await startWorkerPart('runtime' in on ? hostOf(on) : on, { temporalAddress: 'runtime' in on ? on.temporal.address : on.temporalAddress, workflowBundle: bundle });
  try {
    return await fn();
  } finally {
    await part.stop();
  }
}

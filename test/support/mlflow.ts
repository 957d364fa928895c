// The reference `mlflow server` (SQLite backend, artifact serving on) and a runner for compatibility
// scenarios: a Python script using the stock mlflow client that writes a JSON transcript of every call.
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { DEV_TOKEN } from './config.js';
import { freePort } from './ports.js';
import { startTestStack, type TestStack } from './stack.js';
import { afterAll, beforeAll } from 'vitest';

const run = promisify(execFile);

export interface ReferenceMlflow {
  url: string;
  dir: string;
  stop(): void;
}

async function waitForHealth(url: string, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await fetch(`${url}/health`).then((r) => r.ok, () => false)) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`reference mlflow server at ${url} did not answer /health within ${ms} ms`);
}

/** Starts `mlflow server` from the pinned client venv; its own process group, because it forks workers. */
export async function startReferenceMlflow(python: string): Promise<ReferenceMlflow> {
  if (!python) throw new Error('.bootstrap.json has no mlflow_python: run scripts/bootstrap.sh --tests');
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'mlflow-reference-'));
  const child: ChildProcess = spawn(
    join(dirname(python), 'mlflow'),
    ['server', '--backend-store-uri', `sqlite:///${dir}/mlflow.db`, '--host', '127.0.0.1', '--port', String(port), '--workers', '1'],
    { stdio: 'ignore', cwd: dir, detached: true },
  );
  const url = `http://127.0.0.1:${port}`;
  const stop = () => {
    if (child.pid) process.kill(-child.pid, 'SIGTERM');
    // Its workers may still be closing files: a leftover temporary directory is no test failure.
    rmSync(dir, { recursive: true, force: true, maxRetries: 5 });
  };
  try {
    await waitForHealth(url, 60_000);
  } catch (err) {
    stop();
    throw err;
  }
  return { url, dir, stop };
}

/** Runs a scenario script against one tracking URI and returns its transcript. */
export async function runScenario(python: string, script: string, uri: string, extraEnv: Record<string, string> = {}): Promise<unknown> {
  const dir = mkdtempSync(join(tmpdir(), 'mlflow-transcript-'));
  const out = join(dir, 'transcript.json');
  try {
    await run(python, [script, out], {
      env: { ...process.env, MLFLOW_TRACKING_URI: uri, MLFLOW_TRACKING_TOKEN: DEV_TOKEN, MLFLOW_HTTP_REQUEST_MAX_RETRIES: '0', PYTHONWARNINGS: 'ignore', ...extraEnv },
      maxBuffer: 16 * 1024 * 1024,
      timeout: 300_000,
    });
    return JSON.parse(readFileSync(out, 'utf8'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export interface CompatServers {
  /** The mlflow client venv's python. */
  python: string;
  stack: TestStack;
  reference: ReferenceMlflow;
}

/**
 * Registers the hooks of a compatibility suite: our API (with a worker only when asked: registering model files
 * needs one) and a reference mlflow server, both up
 * before the suite and stopped after it. The returned object is filled in by `beforeAll`.
 */
export function useCompatServers(o: { worker?: boolean } = {}): CompatServers {
  const servers = {} as CompatServers;
  beforeAll(async () => {
    // Stock MLflow promotes hand-registered versions: the scenarios compare that, not the eval gate.
    servers.stack = await startTestStack({ HANZO_ML_REGISTRY_REQUIRE_GATE_FOR_PRODUCTION: 'false' }, { worker: o.worker ?? false });
    servers.python = servers.stack.loaded.bootstrap.mlflow_python ?? '';
    servers.reference = await startReferenceMlflow(servers.python);
  }, 120_000);
  afterAll(async () => {
    servers.reference?.stop();
    await servers.stack?.stop();
  });
  return servers;
}

/** Runs one scenario against both servers at once: [ours, theirs]. */
export async function runBothScenarios(s: CompatServers, script: string, extraEnv: Record<string, string> = {}): Promise<[unknown, unknown]> {
  return Promise.all([runScenario(s.python, script, s.stack.runtime.apiUrl, extraEnv), runScenario(s.python, script, s.reference.url, extraEnv)]);
}

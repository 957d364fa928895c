// The stock mlflow Python client against our API and against a reference `mlflow server` (SQLite): the same
// scenario (test/mlflow-compat/scenario.py) must print the same transcript — values, shapes, error codes and
// messages — on both.
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { DEV_TOKEN } from './support/config.js';
import { freePort } from './support/ports.js';

const run = promisify(execFile);
let stack: TestStack;
let reference: ChildProcess | null = null;
let referenceUrl = '';
let python = '';

async function waitForHealth(url: string, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await fetch(`${url}/health`).then((r) => r.ok, () => false)) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`reference mlflow server at ${url} did not answer /health within ${ms} ms`);
}

async function scenario(uri: string): Promise<unknown> {
  const out = join(mkdtempSync(join(tmpdir(), 'mlflow-transcript-')), 'transcript.json');
  await run(python, ['test/mlflow-compat/scenario.py', out], {
    env: { ...process.env, MLFLOW_TRACKING_URI: uri, MLFLOW_TRACKING_TOKEN: DEV_TOKEN, MLFLOW_HTTP_REQUEST_MAX_RETRIES: '0', PYTHONWARNINGS: 'ignore' },
    maxBuffer: 16 * 1024 * 1024,
    timeout: 120_000,
  });
  return JSON.parse(readFileSync(out, 'utf8'));
}

describe('the stock mlflow client', () => {
  beforeAll(async () => {
    stack = await startTestStack({}, { worker: false });
    python = stack.loaded.bootstrap.mlflow_python ?? '';
    if (!python) throw new Error('.bootstrap.json has no mlflow_python: run scripts/bootstrap.sh --tests');
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'mlflow-reference-'));
    reference = spawn(
      join(dirname(python), 'mlflow'),
      ['server', '--backend-store-uri', `sqlite:///${dir}/mlflow.db`, '--host', '127.0.0.1', '--port', String(port), '--workers', '1'],
      { stdio: 'ignore', cwd: dir, detached: true }, // its own process group: the server forks workers
    );
    referenceUrl = `http://127.0.0.1:${port}`;
    await waitForHealth(referenceUrl, 60_000);
  }, 120_000);

  afterAll(async () => {
    if (reference?.pid) process.kill(-reference.pid, 'SIGTERM');
    await stack?.stop();
  });

  it('sees the same transcript from our API as from the reference mlflow server', async () => {
    const [ours, theirs] = await Promise.all([scenario(stack.runtime.apiUrl), scenario(referenceUrl)]);
    expect(ours).toEqual(theirs);
    // The scenario really ran: every step is there, the 2500-point history came back across pages.
    const steps = ours as { step: string; result?: unknown; error?: string }[];
    expect(steps).toHaveLength(29);
    expect(steps.find((s) => s.step === 'history')?.result).toMatchObject({ count: 2500, steps_in_order: true });
    expect(steps.find((s) => s.step === 'batch: 1001 metrics')).toMatchObject({ status: 400, error: 'INVALID_PARAMETER_VALUE' });
  }, 180_000);
});

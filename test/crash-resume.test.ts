// Durability: kill the whole `hanzo-ml dev` process AND the trainer (as a machine crash would) in the middle
// of training, start dev again on the same HANZO_ML_HOME, and the pipeline completes: the trainer resumes
// from its last checkpoint, and no step is trained twice beyond the checkpoint interval.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, existsSync, openSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { demoPipelineRequest } from '../cli/demo.js';
import { DEV_TOKEN } from './support/config.js';
import { freePort } from './support/ports.js';
import { pids, until as untilLogged } from './support/processes.js';
import type { PipelineProgress, PipelineResult } from '../contracts/pipeline.js';

const bin = fileURLToPath(new URL('../bin/hanzo-ml', import.meta.url));
const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-crash-'));
const until = <T>(fn: () => Promise<T | null>, timeoutMs: number, what: string) => untilLogged(fn, timeoutMs, what, join(home, 'dev-test.log'));
let env: Record<string, string>;
let dev: ChildProcess | null = null;

function startDev(): ChildProcess {
  const log = openSync(join(home, 'dev-test.log'), 'a');
  const child = spawn(bin, ['dev'], { env: { ...process.env, ...env }, stdio: ['ignore', log, log], detached: true });
  return child;
}

async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`http://127.0.0.1:${env.HANZO_ML_SERVER_PORT}${path}`, {
    method,
    headers: { authorization: `Bearer ${DEV_TOKEN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}



type Status = { status: string; progress: PipelineProgress; result: PipelineResult | null };

describe('crash and restart of the whole dev process mid-training', () => {
  afterAll(async () => {
    if (dev?.pid) {
      process.kill(-dev.pid, 'SIGTERM');
      await new Promise((r) => setTimeout(r, 3000));
    }
  });

  it('completes the pipeline after kill -9 of dev and trainer, resuming from the last checkpoint', { timeout: 25 * 60_000 }, async () => {
    env = {
      HANZO_ML_HOME: home,
      HANZO_ML_SERVER_PORT: String(await freePort()),
      HANZO_ML_TEMPORAL_PORT: String(await freePort()),
      HANZO_ML_TEMPORAL_UI_PORT: '0',
      // Not the default 9090: other tests run `dev` beside this one.
      HANZO_ML_METRICS_PORT: '0',
      HANZO_ML_TEMPORAL_HEARTBEAT_TIMEOUT: '10s',
      HANZO_ML_LOGGING_LEVEL: 'warn',
    };
    dev = startDev();
    await until(() => api('GET', '/v1/models'), 120_000, 'dev to start');
    const every = 10;
    const { id } = await api<{ id: string }>('POST', '/v1/pipelines', demoPipelineRequest({ model_name: 'crash-model', checkpoint: { every_steps: every, keep_last: 2 } }));
    const beforeCrash = await until(async () => {
      const s = await api<Status>('GET', `/v1/pipelines/${id}`);
      return s.progress.last_checkpoint && s.progress.step >= every + 3 ? s : null;
    }, 10 * 60_000, 'a checkpoint');

    // Kill right after the object store caught up with the trainer's latest checkpoint: what the crash may lose
    // is then at most the steps since that checkpoint (the job runner uploads a checkpoint within seconds).
    const jobDir = join(home, 'work', 'jobs', `${id}-train`);
    const storeDir = join(home, 'objects', 'hanzo-ml-checkpoints');
    const durable = (): number[] => {
      const dir = join(storeDir, 'checkpoints', 'dev', beforeCrash.progress.run_id!);
      return existsSync(dir) ? readdirSync(dir).filter((n) => /^\d+$/.test(n) && existsSync(join(dir, n, 'manifest.json'))).map(Number) : [];
    };
    const storedProgress = (job: string): { step: number; resumed_from_step: number | null } | null => {
      const f = join(storeDir, 'jobs', 'dev', job, 'progress.json');
      return existsSync(f) ? (JSON.parse(readFileSync(f, 'utf8')) as { step: number; resumed_from_step: number | null }) : null;
    };
    await until(async () => {
      const step = storedProgress(`${id}-train`)?.step ?? 0;
      return Math.max(0, ...durable()) >= step - (step % every) && step >= every ? true : null;
    }, 5 * 60_000, 'the store to hold the current checkpoint');
    // Crash: the dev process group (API, worker, Temporal) and the detached job (runner and trainer), with no
    // chance to clean up.
    const wrapperPid = Number(readFileSync(join(jobDir, 'wrapper.pid'), 'utf8'));
    process.kill(-dev.pid!, 'SIGKILL');
    process.kill(-wrapperPid, 'SIGKILL');
    for (const pid of pids(jobDir)) process.kill(pid, 'SIGKILL');
    await new Promise((r) => setTimeout(r, 1000));
    expect(existsSync(join(jobDir, 'exitcode'))).toBe(false);
    // What was durable when it died (the API's progress lags it by up to a heartbeat): the newest checkpoint in
    // the object store is where the resume must start, and the step it last reported bounds the rework.
    const newestAtCrash = Math.max(...durable());
    const stepAtCrash = Math.max(newestAtCrash, storedProgress(`${id}-train`)!.step);
    expect(newestAtCrash).toBeGreaterThanOrEqual(beforeCrash.progress.step - (beforeCrash.progress.step % every));

    dev = startDev();
    // The retried activity starts one new attempt of the lost job, which resumes from the stored checkpoint.
    await until(async () => (storedProgress(`${id}-train-r2`)?.resumed_from_step != null ? true : null), 5 * 60_000, 'the trainer to resume');
    const trainers = pids(`hanzo_ml train --spec .*${id}-train`);
    expect(trainers).toHaveLength(1);
    const waiting = await until(async () => {
      const s = await api<Status>('GET', `/v1/pipelines/${id}`);
      return s.progress.awaiting_approval || s.status !== 'RUNNING' ? s : null;
    }, 15 * 60_000, 'the pipeline to finish training after the restart');
    expect(waiting.progress.awaiting_approval).toBe(true);
    await api('POST', `/v1/pipelines/${id}/approve`, { reason: 'resumed run passed the gate' });
    const done = await until(async () => {
      const s = await api<Status>('GET', `/v1/pipelines/${id}`);
      return s.status === 'COMPLETED' ? s : null;
    }, 120_000, 'completion');
    expect(done.result!.outcome).toBe('promoted');

    const result = JSON.parse(readFileSync(join(storeDir, 'jobs', 'dev', `${id}-train-r2`, 'result.json'), 'utf8')) as { resumed_from_step: number; steps: number; steps_trained_this_process: number };
    expect(result.resumed_from_step).toBeGreaterThanOrEqual(every);
    expect(result.steps).toBe(done.progress.max_steps);
    // It resumed from the newest checkpoint the crash left; the steps trained after it were trained twice,
    // never more than the interval.
    expect(result.resumed_from_step).toBe(newestAtCrash);
    const retrained = stepAtCrash - result.resumed_from_step;
    expect(retrained).toBeGreaterThanOrEqual(0);
    expect(retrained).toBeLessThan(every);
    expect(result.steps - result.steps_trained_this_process).toBe(result.resumed_from_step);
    const hist = await api<{ metrics: { step: number }[] }>('GET', `/v1/runs/${done.progress.run_id}/metrics?key=train/loss&limit=5000`);
    const counts = new Map<number, number>();
    for (const m of hist.metrics) counts.set(m.step, (counts.get(m.step) ?? 0) + 1);
    const twice = [...counts.values()].filter((n) => n > 1).length;
    expect(twice).toBeLessThanOrEqual(every);
  });
});

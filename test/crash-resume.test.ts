// Durability: kill the whole `hanzo-ml dev` process AND the trainer (as a machine crash would) in the middle
// of training, start dev again on the same HANZO_ML_HOME, and the pipeline completes: the trainer resumes
// from its last checkpoint, and no step is trained twice beyond the checkpoint interval.
import { mkdtempSync, readFileSync, readdirSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { demoPipelineRequest } from '../cli/demo.js';
import { DevProcess, pids } from './support/processes.js';
import type { PipelineProgress, PipelineResult } from '../contracts/pipeline.js';

const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-crash-'));
let running: DevProcess | null = null;

type Status = { status: string; progress: PipelineProgress; result: PipelineResult | null };

describe('crash and restart of the whole dev process mid-training', () => {
  afterAll(async () => {
    await running?.stop();
  });

  it('completes the pipeline after kill -9 of dev and trainer, resuming from the last checkpoint', { timeout: 25 * 60_000 }, async () => {
    const dev = await DevProcess.on(home);
    running = dev;
    await dev.start(120_000);
    const every = 10;
    const { id } = await dev.api<{ id: string }>('POST', '/v1/pipelines', demoPipelineRequest({ model_name: 'crash-model', checkpoint: { every_steps: every, keep_last: 2 } }));
    const beforeCrash = await dev.until(async () => {
      const s = await dev.api<Status>('GET', `/v1/pipelines/${id}`);
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
    await dev.until(async () => {
      const step = storedProgress(`${id}-train`)?.step ?? 0;
      return Math.max(0, ...durable()) >= step - (step % every) && step >= every ? true : null;
    }, 5 * 60_000, 'the store to hold the current checkpoint');
    // Crash: the dev process group (API, worker, Temporal) and the detached job (runner and trainer), with no
    // chance to clean up.
    await dev.crash(jobDir);
    expect(existsSync(join(jobDir, 'exitcode'))).toBe(false);
    // What was durable when it died (the API's progress lags it by up to a heartbeat): the newest checkpoint in
    // the object store is where the resume must start, and the step it last reported bounds the rework.
    const newestAtCrash = Math.max(...durable());
    const stepAtCrash = Math.max(newestAtCrash, storedProgress(`${id}-train`)!.step);
    expect(newestAtCrash).toBeGreaterThanOrEqual(beforeCrash.progress.step - (beforeCrash.progress.step % every));

    await dev.start(180_000, 'dev to start again');
    // The retried activity starts one new attempt of the lost job, which resumes from the stored checkpoint.
    await dev.until(async () => (storedProgress(`${id}-train-r2`)?.resumed_from_step != null ? true : null), 5 * 60_000, 'the trainer to resume');
    const trainers = pids(`hanzo_ml train --spec .*${id}-train`);
    expect(trainers).toHaveLength(1);
    const waiting = await dev.until(async () => {
      const s = await dev.api<Status>('GET', `/v1/pipelines/${id}`);
      return s.progress.awaiting_approval || s.status !== 'RUNNING' ? s : null;
    }, 15 * 60_000, 'the pipeline to finish training after the restart');
    expect(waiting.progress.awaiting_approval).toBe(true);
    await dev.api('POST', `/v1/pipelines/${id}/approve`, { reason: 'resumed run passed the gate' });
    const done = await dev.until(async () => {
      const s = await dev.api<Status>('GET', `/v1/pipelines/${id}`);
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
    const hist = await dev.api<{ metrics: { step: number }[] }>('GET', `/v1/runs/${done.progress.run_id}/metrics?key=train/loss&limit=5000`);
    const counts = new Map<number, number>();
    for (const m of hist.metrics) counts.set(m.step, (counts.get(m.step) ?? 0) + 1);
    const twice = [...counts.values()].filter((n) => n > 1).length;
    expect(twice).toBeLessThanOrEqual(every);
  });
});

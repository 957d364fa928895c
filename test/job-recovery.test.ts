// Restart rules for training faults: the spec adjustment itself, and runJobToCompletion driving the real
// trainer (tiny base model, a few steps) through an injected out-of-memory and an injected divergence.
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MockActivityEnvironment } from '@temporalio/testing';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { LocalExecutor } from '../activities/executor/local.js';
import { runJobToCompletion, trainerCommand, writeSpec, type JobHeartbeat } from '../activities/jobs.js';
import { adjustSpecAfterFault } from '../activities/recovery.js';
import type { ActivityDeps } from '../activities/deps.js';
import { HardwareSchema, RecoveryPolicySchema, TrainResultSchema, type TrainJobSpec, type TrainResult } from '../contracts/trainer-job.js';
import type { JobRecovery } from '../contracts/pipeline.js';
import { createLogger } from '../lib/log.js';
import { loadConfig } from '../lib/config.js';
import { offlineActivityDeps } from './support/deps.js';

const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-recovery-'));
const policy = RecoveryPolicySchema.parse({});

function trainSpec(workdir: string, data: string, hyperparameters: Partial<TrainJobSpec['hyperparameters']> = {}, recovery = policy): TrainJobSpec {
  return {
    kind: 'train',
    job_name: 'recovery-test',
    run_id: 'r1',
    tracking_uri: null,
    base_model_path: deps.bootstrap.base_model,
    train_path: data,
    validation_path: null,
    output_dir: join(workdir, 'output'),
    checkpoint_dir: join(workdir, 'checkpoints'),
    method: 'lora',
    hyperparameters: {
      learning_rate: 5e-3,
      max_steps: 3,
      batch_size: 4,
      gradient_accumulation_steps: 1,
      warmup_steps: 0,
      weight_decay: 0,
      max_grad_norm: 1,
      lora_rank: 4,
      lora_alpha: 8,
      lora_dropout: 0,
      target_modules: ['q_proj', 'v_proj'],
      max_seq_length: 128,
      seed: 1,
      ...hyperparameters,
    },
    checkpoint: { every_steps: 1, keep_last: 2, every_seconds: null, keep_best: false },
    recovery,
    hardware: HardwareSchema.parse({}),
    threads: 1,
  } as TrainJobSpec;
}

let cat: Catalogue;
let deps: ActivityDeps;
let data: string;

describe('adjustSpecAfterFault', () => {
  const base = { hyperparameters: { batch_size: 8, gradient_accumulation_steps: 1, learning_rate: 0.01 } } as unknown as TrainJobSpec;
  const recovery = (kind: JobRecovery['kind']): JobRecovery => ({ kind, step: 1, restart: 1, change: '', at: '' });

  it('halves the micro-batch and doubles the accumulation after out-of-memory, keeping the effective batch', () => {
    const r = adjustSpecAfterFault(base, 'out_of_memory', policy, []);
    expect(r).toMatchObject({ ok: true, change: 'batch_size 8 -> 4, gradient_accumulation_steps 1 -> 2' });
    if (r.ok) expect(r.spec.hyperparameters).toMatchObject({ batch_size: 4, gradient_accumulation_steps: 2, learning_rate: 0.01 });
  });

  it('splits an odd micro-batch by its largest divisor so the effective batch stays exact', () => {
    const five = { hyperparameters: { batch_size: 5, gradient_accumulation_steps: 2 } } as unknown as TrainJobSpec;
    const r = adjustSpecAfterFault(five, 'out_of_memory', policy, []);
    if (!r.ok) throw new Error(r.reason);
    expect(r.spec.hyperparameters.batch_size * r.spec.hyperparameters.gradient_accumulation_steps).toBe(10);
    expect(r.spec.hyperparameters.batch_size).toBe(1);
  });

  it('gives up at a micro-batch of one and after max_oom_retries restarts', () => {
    const one = { hyperparameters: { batch_size: 1, gradient_accumulation_steps: 8 } } as unknown as TrainJobSpec;
    expect(adjustSpecAfterFault(one, 'out_of_memory', policy, [])).toMatchObject({ ok: false, reason: expect.stringContaining('micro-batch of 1') });
    const earlier = [recovery('out_of_memory'), recovery('lost'), recovery('out_of_memory'), recovery('out_of_memory')];
    expect(adjustSpecAfterFault(base, 'out_of_memory', policy, earlier)).toMatchObject({ ok: false, reason: expect.stringContaining('max_oom_retries') });
  });

  it('scales the learning rate after divergence, and with max_divergence_retries 0 only stops and alerts', () => {
    const r = adjustSpecAfterFault(base, 'diverged', policy, []);
    if (!r.ok) throw new Error(r.reason);
    expect(r.spec.hyperparameters.learning_rate).toBeCloseTo(0.001, 12);
    expect(adjustSpecAfterFault(base, 'diverged', policy, [recovery('diverged')]).ok).toBe(false);
    const stopOnly = RecoveryPolicySchema.parse({ max_divergence_retries: 0 });
    expect(adjustSpecAfterFault(base, 'diverged', stopOnly, [])).toMatchObject({ ok: false, reason: expect.stringContaining('stop and alert') });
  });
});

describe('runJobToCompletion restart records', () => {
  it('fails a restarted job that dies before writing a failure record, instead of replaying the last fault', async () => {
    const loaded = loadConfig({ HANZO_ML_HOME: home, HANZO_ML_LOGGING_LEVEL: 'error' });
    const quick = { executor: new LocalExecutor(), log: createLogger({ level: 'error', format: 'text' }), config: loaded.config } as unknown as ActivityDeps;
    const workdir = mkdtempSync(join(tmpdir(), 'hanzo-ml-restarts-'));
    writeFileSync(join(workdir, 'spec.json'), JSON.stringify({ hyperparameters: { batch_size: 8, gradient_accumulation_steps: 1, learning_rate: 0.01 } }));
    // The first run runs out of memory as the trainer does; the restarted one exits 1 before it gets that far.
    const script = `const fs = require('fs'); const d = process.argv[1];
      if (fs.existsSync(d + '/ran')) process.exit(1);
      fs.writeFileSync(d + '/ran', '');
      fs.writeFileSync(d + '/failure.json', JSON.stringify({ kind: 'out_of_memory', step: 3, message: 'CUDA out of memory', at: '2026-01-01T00:00:00Z' }));
      process.exit(3);`;
    const run = new MockActivityEnvironment().run(() =>
      runJobToCompletion(quick, { job: 'j', request: { workdir, command: [process.execPath, '-e', script, workdir], env: {} }, resultPath: join(workdir, 'result.json'), resultSchema: z.object({ ok: z.boolean() }), pollMs: 100, recovery: { policy } }),
    );
    await expect(run).rejects.toThrow(/exited with code 1/);
    const recoveries = (JSON.parse(readFileSync(join(workdir, 'recoveries.json'), 'utf8')) as { recoveries: JobRecovery[] }).recoveries;
    expect(recoveries.map((r) => r.kind)).toEqual(['out_of_memory']);
  }, 60_000);

  it('records a preemption and a job lost with its worker as recoveries, in the heartbeat and in recoveries.json', async () => {
    const loaded = loadConfig({ HANZO_ML_HOME: home, HANZO_ML_LOGGING_LEVEL: 'error' });
    const quick = { executor: new LocalExecutor(), log: createLogger({ level: 'error', format: 'text' }), config: loaded.config } as unknown as ActivityDeps;
    const workdir = mkdtempSync(join(tmpdir(), 'hanzo-ml-restarts-'));
    writeFileSync(join(workdir, 'progress.json'), JSON.stringify({ step: 7 }));
    // The first run exits 143 as a preempted trainer does; the second writes its result.
    const script = `const fs = require('fs'); const d = process.argv[1];
      if (!fs.existsSync(d + '/ran')) { fs.writeFileSync(d + '/ran', ''); process.exit(143); }
      fs.writeFileSync(d + '/result.json', JSON.stringify({ ok: true }));`;
    writeFileSync(join(workdir, 'child.pid'), '999999\n'); // a job that died with its worker: lost
    const env = new MockActivityEnvironment();
    const heartbeats: JobHeartbeat[] = [];
    env.on('heartbeat', (d: JobHeartbeat) => heartbeats.push(d));
    const result = await env.run(() =>
      runJobToCompletion(quick, { job: 'j', request: { workdir, command: [process.execPath, '-e', script, workdir], env: {} }, resultPath: join(workdir, 'result.json'), resultSchema: z.object({ ok: z.boolean() }), pollMs: 100 }),
    );
    expect(result).toEqual({ ok: true });
    const kinds = (JSON.parse(readFileSync(join(workdir, 'recoveries.json'), 'utf8')) as { recoveries: JobRecovery[] }).recoveries.map((r) => [r.kind, r.step, r.restart]);
    expect(kinds).toEqual([['lost', 7, 1], ['preempted', 7, 2]]);
    expect(heartbeats.at(-1)).toMatchObject({ phase: 'finished', recoveries: [{ kind: 'lost' }, { kind: 'preempted' }] });
  }, 60_000);
});

describe('runJobToCompletion with the real trainer', () => {
  beforeAll(async () => {
    cat = await openCatalogue({});
    const loaded = loadConfig({ HANZO_ML_HOME: home, HANZO_ML_LOGGING_LEVEL: 'error' });
    deps = offlineActivityDeps(cat.db, loaded, home);
    const lines = readFileSync(join(import.meta.dirname, '..', 'examples', 'data', 'demo-task.jsonl'), 'utf8').split('\n').slice(0, 24);
    data = join(home, 'train.jsonl');
    writeFileSync(data, lines.join('\n') + '\n');
  });
  afterAll(async () => cat.close());

  it('restarts a job that ran out of memory with half the micro-batch, records the recovery, and finishes', async () => {
    const workdir = join(home, 'oom');
    mkdirSync(workdir, { recursive: true });
    await writeSpec(workdir, trainSpec(workdir, data));
    const request = trainerCommand(deps, 'train', workdir);
    request.env.HANZO_ML_FAULT_OOM_ABOVE_MICRO_BATCH = '2';
    request.env.HANZO_ML_FAULT_OOM_FROM_STEP = '2';
    const env = new MockActivityEnvironment();
    const heartbeats: JobHeartbeat[] = [];
    env.on('heartbeat', (d: JobHeartbeat) => heartbeats.push(d));
    const faults: { recovery: JobRecovery; restarting: boolean }[] = [];
    const result: TrainResult = await env.run(() => runJobToCompletion(deps, {
      job: 'oom',
      request,
      resultPath: join(workdir, 'result.json'),
      resultSchema: TrainResultSchema,
      pollMs: 200,
      recovery: { policy, onFault: async (recovery, restarting) => void faults.push({ recovery, restarting }) },
    }));
    expect(result.steps).toBe(3);
    expect(result.resumed_from_step).toBe(1); // the checkpoint of step 1, written before step 2 ran out of memory
    expect(faults).toEqual([{ recovery: expect.objectContaining({ kind: 'out_of_memory', step: 1, restart: 1, change: 'batch_size 4 -> 2, gradient_accumulation_steps 1 -> 2' }), restarting: true }]);
    const spec = JSON.parse(readFileSync(join(workdir, 'spec.json'), 'utf8')) as TrainJobSpec;
    expect([spec.hyperparameters.batch_size, spec.hyperparameters.gradient_accumulation_steps]).toEqual([2, 2]);
    expect(heartbeats.some((h) => h.phase === 'restarting')).toBe(true);
    expect(heartbeats.at(-1)).toMatchObject({ phase: 'finished', recoveries: [expect.objectContaining({ kind: 'out_of_memory' })] });
  }, 240_000);

  it('stops a diverged job for good when the policy allows no restart, reporting the fault before failing', async () => {
    const workdir = join(home, 'nan');
    mkdirSync(workdir, { recursive: true });
    await writeSpec(workdir, trainSpec(workdir, data, {}, RecoveryPolicySchema.parse({ max_divergence_retries: 0 })));
    const request = trainerCommand(deps, 'train', workdir);
    request.env.HANZO_ML_FAULT_NAN_AT_STEP = '2';
    const faults: { recovery: JobRecovery; restarting: boolean }[] = [];
    const run = new MockActivityEnvironment().run(() => runJobToCompletion(deps, {
      job: 'nan',
      request,
      resultPath: join(workdir, 'result.json'),
      resultSchema: TrainResultSchema,
      pollMs: 200,
      recovery: { policy: RecoveryPolicySchema.parse({ max_divergence_retries: 0 }), onFault: async (recovery, restarting) => void faults.push({ recovery, restarting }) },
    }));
    await expect(run).rejects.toMatchObject({ type: 'TrainingDiverged', nonRetryable: true, message: expect.stringContaining('step 2: loss nan') });
    expect(faults).toEqual([{ recovery: expect.objectContaining({ kind: 'diverged', step: 1, change: expect.stringContaining('stop and alert') }), restarting: false }]);
  }, 240_000);
});

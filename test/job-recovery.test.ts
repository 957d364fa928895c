// Restart rules for training faults: the spec adjustment itself, and runJobToCompletion driving the real
// trainer (tiny base model, a few steps) through an injected out-of-memory and an injected divergence.
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MockActivityEnvironment } from '@temporalio/testing';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { LocalExecutor } from '../jobs/executor/local.js';
import { localJobEnvironment } from '../jobs/environment.js';
import { runJobToCompletion } from '../activities/run-job.js';
import type { JobDefinition } from '../jobs/definition.js';
import type { JobHeartbeat } from '../jobs/activity.js';
import type { JobOutcome } from '../jobs/attempts.js';
import { adjustSpecAfterFault, readRecoveries } from '../jobs/recovery.js';
import { FileObjectStore } from '../lib/object-store.js';
import { JobFiles, checkpointsUri } from '../lib/job-files.js';
import type { ActivityDeps } from '../activities/deps.js';
import { HardwareSchema, RecoveryPolicySchema, TrainResultSchema, type TrainJobSpec, type TrainResult } from '../contracts/trainer-job.js';
import type { JobRecovery } from '../contracts/pipeline.js';
import { createLogger } from '../lib/log.js';
import { loadConfig } from '../lib/config.js';
import { offlineActivityDeps, trainJobDefinition } from './support/deps.js';

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
    // the trainer must run the halved batch_size, not size the micro-batch again from the estimate that ran out
    if (r.ok) expect(r.spec.hardware.micro_batch).toBe('recipe');
  });

  it('halves the micro-batch the trainer sized to the GPU, not the smaller batch_size of the recipe', () => {
    const auto = { hyperparameters: { batch_size: 2, gradient_accumulation_steps: 4 }, hardware: { micro_batch: 'auto' } } as unknown as TrainJobSpec;
    const r = adjustSpecAfterFault(auto, 'out_of_memory', policy, [], 8);
    if (!r.ok) throw new Error(r.reason);
    expect(r.spec.hyperparameters).toMatchObject({ batch_size: 4, gradient_accumulation_steps: 2 });
    expect(r.spec.hardware.micro_batch).toBe('recipe');
    expect(r.change).toContain('micro-batch 8 (sized to the GPU) -> 4');
    // with micro_batch recipe the trainer ran batch_size: that is what is halved
    const recipe = { ...auto, hardware: { micro_batch: 'recipe' } } as unknown as TrainJobSpec;
    const again = adjustSpecAfterFault(recipe, 'out_of_memory', policy, [], 8);
    if (again.ok) expect(again.spec.hyperparameters).toMatchObject({ batch_size: 1, gradient_accumulation_steps: 8 });
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

/** Quick deps whose jobs are node scripts playing the job runner: they get the job's directory in the store. */
function scriptDeps(script: string, extraEnv: Record<string, string> = {}): { deps: ActivityDeps; store: FileObjectStore; marker: string } {
  const loaded = loadConfig({ HANZO_ML_HOME: home, HANZO_ML_LOGGING_LEVEL: 'error' });
  const root = mkdtempSync(join(tmpdir(), 'hanzo-ml-restarts-'));
  const store = new FileObjectStore(join(root, 'objects'));
  const marker = join(root, 'marker');
  const executor = new LocalExecutor({
    workRoot: join(root, 'work'),
    python: 'unused',
    env: extraEnv,
    command: (job, scratch) => [process.execPath, '-e', script, dirname(fileURLToPath(job.envelopeUri)), marker, scratch],
  });
  const deps = { executor, store, log: createLogger({ level: 'error', format: 'text' }), config: loaded.config, jobSecrets: async () => ({}) } as unknown as ActivityDeps;
  return { deps, store, marker };
}

const scriptJob = (name: string): JobDefinition => ({ name, kind: 'train', organizationId: 'dev', envelope: { tool: 'trainer', spec: { hyperparameters: { batch_size: 8, gradient_accumulation_steps: 1, learning_rate: 0.01 } } } });

describe('runJobToCompletion restart records', () => {
  it('fails a restarted job that dies before writing a failure record, instead of replaying the last fault', async () => {
    // The first attempt runs out of memory as the trainer does; the next one exits 1 before it gets that far.
    const script = `const fs = require('fs'); const [d, marker] = process.argv.slice(1);
      if (fs.existsSync(marker)) process.exit(1);
      fs.writeFileSync(marker, '');
      fs.writeFileSync(d + '/failure.json', JSON.stringify({ kind: 'out_of_memory', step: 3, message: 'CUDA out of memory', at: '2026-01-01T00:00:00Z' }));
      process.exit(3);`;
    const { deps: quick, store } = scriptDeps(script);
    const run = new MockActivityEnvironment().run(() => runJobToCompletion(quick, { job: scriptJob('j'), resultSchema: z.object({ ok: z.boolean() }), pollMs: 100, recovery: { policy } }));
    await expect(run).rejects.toThrow(/exited with code 1/);
    const recoveries = await readRecoveries(JobFiles.of(store, quick.config, 'dev', 'j'));
    expect(recoveries.map((r) => r.kind)).toEqual(['out_of_memory']);
    // The second attempt ran the adjusted spec, from its own envelope in the object store.
    const second = await JobFiles.of(store, quick.config, 'dev', 'j-r2').readEnvelope();
    expect((second?.spec as TrainJobSpec).hyperparameters.batch_size).toBe(4);
  }, 60_000);

  it('records a preemption and a job lost with its worker as recoveries, in the heartbeat and in recoveries.json', async () => {
    // The first attempt is lost (it died with its worker); the second exits 143 as a preempted trainer does;
    // the third writes its result.
    const script = `const fs = require('fs'); const [d, marker] = process.argv.slice(1);
      if (!fs.existsSync(marker)) { fs.writeFileSync(marker, ''); fs.writeFileSync(d + '/progress.json', JSON.stringify({ step: 9 })); process.exit(143); }
      fs.writeFileSync(d + '/result.json', JSON.stringify({ ok: true }));`;
    const { deps: quick, store } = scriptDeps(script);
    const lostDir = (quick.executor as LocalExecutor).workdir('j');
    mkdirSync(lostDir, { recursive: true });
    writeFileSync(join(lostDir, 'child.pid'), '999999\n'); // a job that died with its worker: lost
    await JobFiles.of(store, quick.config, 'dev', 'j').writeJson('progress.json', { step: 7 });
    const env = new MockActivityEnvironment();
    const heartbeats: JobHeartbeat[] = [];
    env.on('heartbeat', (d: JobHeartbeat) => heartbeats.push(d));
    const { result } = await env.run(async (): Promise<JobOutcome<{ ok: boolean }>> => runJobToCompletion(quick, { job: scriptJob("j"), resultSchema: z.object({ ok: z.boolean() }), pollMs: 100 }));
    expect(result).toEqual({ ok: true });
    const kinds = (await readRecoveries(JobFiles.of(store, quick.config, 'dev', 'j'))).map((r) => [r.kind, r.step, r.restart]);
    expect(kinds).toEqual([['lost', 7, 1], ['preempted', 9, 2]]);
    expect(heartbeats.at(-1)).toMatchObject({ phase: 'finished', job: 'j-r3', recoveries: [{ kind: 'lost' }, { kind: 'preempted' }] });
  }, 60_000);
});

/** A train job of the tiny base model reading its data through the object store, with faults injected. */
function trainJob(name: string, hyperparameters: Partial<TrainJobSpec['hyperparameters']> = {}, recovery = policy): JobDefinition {
  const spec = trainSpec('/unused', 'input:train_path', hyperparameters, recovery);
  return trainJobDefinition({ name, spec, baseModel: deps.bootstrap.base_model, trainUri: pathToFileURL(data).href, checkpointsUri: checkpointsUri(deps.store, deps.config, 'dev', `run-${name}`) });
}

function withFaults(env: Record<string, string>): ActivityDeps {
  const base = offlineActivityDeps(cat.db, loadConfig({ HANZO_ML_HOME: home, HANZO_ML_LOGGING_LEVEL: 'error' }), home);
  const executor = new LocalExecutor({ workRoot: join(home, 'work', 'jobs'), python: base.bootstrap.python, env: { ...localJobEnvironment(base), ...env } });
  return { ...base, executor };
}

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
    const faulty = withFaults({ HANZO_ML_FAULT_OOM_ABOVE_MICRO_BATCH: '2', HANZO_ML_FAULT_OOM_FROM_STEP: '2' });
    const env = new MockActivityEnvironment();
    const heartbeats: JobHeartbeat[] = [];
    env.on('heartbeat', (d: JobHeartbeat) => heartbeats.push(d));
    const faults: { recovery: JobRecovery; restarting: boolean }[] = [];
    const job = trainJob('oom');
    const { result, files } = await env.run(async (): Promise<JobOutcome<TrainResult>> => runJobToCompletion(faulty, {
      job,
      resultSchema: TrainResultSchema,
      pollMs: 200,
      recovery: { policy, onFault: async (recovery, restarting) => void faults.push({ recovery, restarting }) },
    }));
    expect(result.steps).toBe(3);
    expect(result.resumed_from_step).toBe(1); // the checkpoint of step 1, written before step 2 ran out of memory
    expect(result.adapter_path).toBe(`${files.outputUri('output_dir')}/adapter`);
    expect(faults).toEqual([{ recovery: expect.objectContaining({ kind: 'out_of_memory', step: 1, restart: 1, change: 'batch_size 4 -> 2, gradient_accumulation_steps 1 -> 2' }), restarting: true }]);
    const spec = (await files.readEnvelope())!.spec as TrainJobSpec;
    expect([spec.hyperparameters.batch_size, spec.hyperparameters.gradient_accumulation_steps]).toEqual([2, 2]);
    expect(heartbeats.some((h) => h.phase === 'restarting')).toBe(true);
    expect(heartbeats.at(-1)).toMatchObject({ phase: 'finished', recoveries: [expect.objectContaining({ kind: 'out_of_memory' })] });
  }, 240_000);

  it('stops a diverged job for good when the policy allows no restart, reporting the fault before failing', async () => {
    const stopOnly = RecoveryPolicySchema.parse({ max_divergence_retries: 0 });
    const faulty = withFaults({ HANZO_ML_FAULT_NAN_AT_STEP: '2' });
    const faults: { recovery: JobRecovery; restarting: boolean }[] = [];
    const job = trainJob('nan', {}, stopOnly);
    const run = new MockActivityEnvironment().run(() => runJobToCompletion(faulty, {
      job,
      resultSchema: TrainResultSchema,
      pollMs: 200,
      recovery: { policy: stopOnly, onFault: async (recovery, restarting) => void faults.push({ recovery, restarting }) },
    }));
    await expect(run).rejects.toMatchObject({ type: 'TrainingDiverged', nonRetryable: true, message: expect.stringContaining('step 2: loss nan') });
    expect(faults).toEqual([{ recovery: expect.objectContaining({ kind: 'diverged', step: 1, change: expect.stringContaining('stop and alert') }), restarting: false }]);
  }, 240_000);
});

// Sweeps end to end on the real embedded stack (Temporal dev server, PGlite, the worker with the real
// activities, the suggestion process): synthetic trials, so the tests are about the scheduler, fast.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NativeConnection } from '@temporalio/worker';
import { startTestStack, type TestStack } from './support/stack.js';
import { HPO_TASK_QUEUE, hpoWorkflowId, hpoTrialWorkflowId, type SweepProgress, type SweepRequest, type SweepResult, type SweepWorkflowInput } from '../contracts/hpo.js';
import { sweepProgressQuery } from '../contracts/hpo-messages.js';
import { createPipelineWorker, bundleWorkflows, type PipelineWorker } from '../workers/worker.js';
import { createExecutor } from '../jobs/executor/factory.js';
import { jobTokenSecrets } from '../jobs/deps.js';
import { SweepConfigSchema } from '../contracts/hpo.js';
import type { JobView } from '../contracts/jobs.js';

const bin = fileURLToPath(new URL('../bin/hanzo-ml', import.meta.url));
const run = promisify(execFile);

interface SweepView {
  status: string;
  best_trial: { number: number; objective_values: number[]; params: Record<string, number> } | null;
  trials: { total: number; by_status: Record<string, number> };
  trial_steps_saved: number | null;
  gpu_hours: number;
  experiment_id: string;
  pareto_front: number[];
}
interface TrialView {
  number: number;
  status: string;
  run_id: string;
  params: Record<string, number>;
  objective_values: number[] | null;
  steps: number;
  gpu_hours: number;
}

const branin = (over: Partial<SweepRequest> = {}): SweepRequest => ({
  experiment: 'branin-sweep',
  base_config: { method: 'synthetic', function: 'branin', max_steps: 20, eval_steps: 5 },
  search_space: { x1: { type: 'uniform', min: -5, max: 10 }, x2: { type: 'uniform', min: 0, max: 15 } },
  strategy: 'bayesian',
  objective: { metric: 'eval/loss', direction: 'minimize' },
  max_trials: 12,
  max_concurrent_trials: 3,
  seed: 7,
  ...over,
});

describe('hyperparameter sweeps on Temporal', () => {
  let stack: TestStack;

  beforeAll(async () => {
    stack = await startTestStack();
  });
  afterAll(async () => {
    await stack?.stop();
  });

  async function start(body: SweepRequest): Promise<string> {
    const res = await stack.api<{ id: string; error_code?: string; message?: string }>('POST', '/v1/hpo', body);
    expect(res.status, res.body.message).toBe(201);
    return res.body.id;
  }

  async function finished(id: string, timeoutMs = 90_000): Promise<SweepView> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const { status, body } = await stack.api<SweepView>('GET', `/v1/hpo/${id}`);
      if (status === 200 && body.status !== 'running') return body;
      if (Date.now() > deadline) throw new Error(`sweep ${id} still running: ${JSON.stringify(body.trials)}`);
      await new Promise((r) => setTimeout(r, 300));
    }
  }

  const trials = async (id: string, query = ''): Promise<TrialView[]> => (await stack.api<{ trials: TrialView[] }>('GET', `/v1/hpo/${id}/trials${query}`)).body.trials;

  it('runs a bayesian sweep to the end, each trial a tracked run, and reports the best trial', async () => {
    const id = await start(branin());
    const sweep = await finished(id);
    expect(sweep.status).toBe('completed');
    expect(sweep.trials).toMatchObject({ total: 12, by_status: { completed: 12 } });
    const all = await trials(id);
    const best = Math.min(...all.map((t) => t.objective_values![0]!));
    expect(sweep.best_trial!.objective_values[0]).toBe(best);
    const top = await trials(id, '?top=5');
    expect(top.map((t) => t.objective_values![0])).toEqual([...top.map((t) => t.objective_values![0]!)].sort((a, b) => a - b));
    expect(top).toHaveLength(5);
    // Each trial is a run of the sweep's experiment with its hyperparameters as params.
    const { body: run } = await stack.api<{ run?: { info?: { experiment_id: string }; data?: { params?: { key: string; value: string }[] } } }>('GET', `/api/2.0/mlflow/runs/get?run_id=${all[3]!.run_id}`);
    expect(run.run?.info?.experiment_id).toBe(sweep.experiment_id);
    expect(run.run?.data?.params).toContainEqual({ key: 'x1', value: String(all[3]!.params.x1) });
  });

  it('starts a sweep from a YAML file with the CLI and prints the top trials', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hanzo-ml-hpo-cli-'));
    const file = join(dir, 'sweep.yaml');
    writeFileSync(file, stringify(branin({ max_trials: 5, experiment: 'cli-sweep' })));
    const env = { ...process.env, HANZO_ML_API_URL: stack.runtime.apiUrl, HANZO_ML_TOKEN: stack.loaded.config.auth.dev_token };
    // Asynchronously: the API answering the CLI runs in this process.
    const id = (await run(bin, ['hpo', 'start', '--config', file], { env })).stdout.trim();
    await finished(id);
    const { stdout: out } = await run(bin, ['hpo', 'results', id, '--top', '3'], { env });
    const lines = out.trim().split('\n');
    expect(lines[0]).toMatch(/^trial\s+eval\/loss\s+params/);
    expect(lines).toHaveLength(4);
    const values = lines.slice(1).map((l) => Number(l.split(/\s+/)[1]));
    expect(values).toEqual([...values].sort((a, b) => a - b));
  });

  it('gives the same suggestions for the same seed, and others for another seed', async () => {
    const a = await start(branin({ max_trials: 4, max_concurrent_trials: 1, seed: 11 }));
    const b = await start(branin({ max_trials: 4, max_concurrent_trials: 1, seed: 11 }));
    const c = await start(branin({ max_trials: 4, max_concurrent_trials: 1, seed: 12 }));
    await Promise.all([a, b, c].map((id) => finished(id)));
    const params = async (id: string) => (await trials(id)).sort((x, y) => x.number - y.number).map((t) => t.params);
    expect(await params(a)).toEqual(await params(b));
    expect(await params(a)).not.toEqual(await params(c));
  });

  it('warm-starts from the trials of earlier sweeps on the same function and search space', async () => {
    const space = { x1: { type: 'uniform' as const, min: -5, max: 10 }, x2: { type: 'uniform' as const, min: 0, max: 14.5 } };
    // Random and the start-up phase of TPE draw the same first point for a seed; ten earlier trials end that phase.
    const cold = await start(branin({ strategy: 'random', search_space: space, max_trials: 10, max_concurrent_trials: 5, seed: 21, experiment: 'cold' }));
    await finished(cold);
    const warm = await start(branin({ search_space: space, max_trials: 1, seed: 21, experiment: 'warm', warm_start: true }));
    await finished(warm);
    const result = (await stack.runtime.client.workflow.getHandle(hpoWorkflowId(warm)).result()) as SweepResult;
    expect(result.progress.warm_start_trials).toBe(10);
    const first = async (id: string) => (await trials(id)).find((t) => t.number === 0)!.params;
    expect(await first(warm)).not.toEqual(await first(cold));
    const other = await start(branin({ search_space: { ...space, x2: { type: 'uniform', min: 0, max: 14 } }, max_trials: 1, seed: 21, warm_start: true }));
    await finished(other);
    expect(((await stack.runtime.client.workflow.getHandle(hpoWorkflowId(other)).result()) as SweepResult).progress.warm_start_trials).toBe(0);
  });

  it('runs an evolutionary multi-objective sweep and reports its Pareto front, eval loss against model size', async () => {
    const id = await start({
      experiment: 'pareto-sweep',
      base_config: { method: 'synthetic', function: 'learning-curve', max_steps: 20, eval_steps: 10 },
      search_space: { learning_rate: { type: 'log_uniform', min: 1e-4, max: 0.1 }, width: { type: 'int', min: 16, max: 1024 } },
      strategy: 'evolutionary',
      objective: [{ metric: 'eval/loss', direction: 'minimize' }, { metric: 'model/parameters', direction: 'minimize' }],
      max_trials: 12,
      max_concurrent_trials: 4,
      seed: 4,
    });
    const sweep = await finished(id);
    expect(sweep.status).toBe('completed');
    const all = (await trials(id)).filter((t) => t.status === 'completed');
    expect(all).toHaveLength(12);
    const front = all.filter((t) => sweep.pareto_front.includes(t.number));
    expect(front.length).toBeGreaterThan(0);
    const dominates = (a: number[], b: number[]) => a.every((v, i) => v <= b[i]!) && a.some((v, i) => v < b[i]!);
    for (const t of all) {
      const dominated = all.some((o) => dominates(o.objective_values!, t.objective_values!));
      expect(sweep.pareto_front.includes(t.number)).toBe(!dominated);
    }
  });

  it('stops poor trials early with ASHA, freeing their slots and accounting their GPU time', async () => {
    const id = await start({
      experiment: 'asha-sweep',
      base_config: { method: 'synthetic', function: 'learning-curve', max_steps: 90, eval_steps: 10, step_ms: 15 },
      search_space: { learning_rate: { type: 'log_uniform', min: 1e-5, max: 0.5 }, width: { type: 'int', min: 16, max: 1024 } },
      strategy: 'random',
      max_trials: 12,
      max_concurrent_trials: 4,
      early_stopping: { rule: 'asha', reduction_factor: 3, grace_steps: 10 },
      seed: 3,
    });
    const sweep = await finished(id);
    expect(sweep.status).toBe('completed');
    const all = await trials(id);
    const pruned = all.filter((t) => t.status === 'pruned');
    expect(pruned.length).toBeGreaterThan(0);
    for (const t of pruned) {
      expect(t.steps).toBeLessThan(90);
      expect(t.gpu_hours).toBeGreaterThan(0);
    }
    expect(sweep.trial_steps_saved).toBeGreaterThan(0);
    expect(all.filter((t) => t.status === 'completed').every((t) => t.steps === 90)).toBe(true);
    // Each trial is a training job of the job list under its sweep: a pruned one ends cancelled, saying so.
    const { body } = await stack.api<{ jobs: JobView[] }>('GET', `/v1/jobs?parent=sweep:${id}&limit=100`);
    const byRun = new Map(body.jobs.map((j) => [j.run_id, j]));
    expect(body.jobs).toHaveLength(all.length);
    for (const t of all) {
      const job = byRun.get(t.run_id)!;
      expect(job).toMatchObject({ parent: `sweep:${id}`, type: 'training', kind: 'stage', status: t.status === 'completed' ? 'succeeded' : 'cancelled' });
      if (t.status === 'pruned') expect(job.message).toMatch(/^pruned/);
    }
  });

  it('rejects a bad sweep configuration naming the field, before anything starts', async () => {
    const bad = await stack.api<{ error_code: string; message: string }>('POST', '/v1/hpo', branin({ search_space: { x1: { type: 'uniform', min: 3, max: 1 }, x2: { type: 'uniform', min: 0, max: 15 } } }));
    expect(bad.status).toBe(400);
    expect(bad.body.message).toContain('search_space.x1.max');
    const grid = await stack.api<{ message: string }>('POST', '/v1/hpo', branin({ strategy: 'grid' }));
    expect(grid.body.message).toMatch(/search_space\.x1: grid search needs a discrete grid/);
    const axes = Object.fromEntries([1, 2, 3, 4, 5, 6].map((i) => [`x${i}`, { type: 'uniform' as const, min: 0, max: 1, points: 11 }]));
    const huge = await stack.api<{ message: string }>('POST', '/v1/hpo', branin({ strategy: 'grid', base_config: { method: 'synthetic', function: 'hartmann6', max_steps: 20, eval_steps: 5 }, search_space: axes }));
    expect(huge.body.message).toMatch(/search_space: the grid has 1,771,561 points, more than 1,000,000; use random or bayesian/);
    const rounds = await stack.api<{ message: string }>('POST', '/v1/hpo', branin({ strategy: 'pbt', base_config: { method: 'synthetic', function: 'learning-curve', max_steps: 100_000, eval_steps: 5 }, search_space: { learning_rate: { type: 'log_uniform', min: 1e-5, max: 1e-1 }, width: { type: 'int', min: 8, max: 64 } }, pbt: { population_size: 8, interval_steps: 5 } }));
    expect(rounds.body.message).toMatch(/pbt\.interval_steps: 160,000 member rounds .* more than 100,000: use a longer interval/);
    const multi = await stack.api<{ message: string }>('POST', '/v1/hpo', branin({ objective: [{ metric: 'eval/loss', direction: 'minimize' }, { metric: 'cost/gpu_hours', direction: 'minimize' }] }));
    expect(multi.body.message).toMatch(/objective: several objectives need strategy "evolutionary"/);
    const unknown = await stack.api<{ message: string }>('POST', '/v1/hpo', branin({ search_space: { x1: { type: 'uniform', min: -5, max: 10 }, x2: { type: 'uniform', min: 0, max: 15 }, x9: { type: 'uniform', min: 0, max: 1 } } }));
    expect(unknown.body.message).toMatch(/search_space\.x9: not a parameter of branin/);
    const listed = await stack.api<{ sweeps: unknown[] }>('GET', '/v1/hpo');
    expect(listed.status).toBe(200);
  });

  it('continues-as-new before its history limit and still runs every trial', async () => {
    const sweepId = `can-${Date.now()}`;
    const config = SweepConfigSchema.parse(branin({ strategy: 'random', max_trials: 40, max_concurrent_trials: 4, experiment: 'can-sweep' }));
    const input: SweepWorkflowInput = {
      sweep_id: sweepId,
      config: { ...config, strategy: 'random' },
      organization_id: stack.loaded.config.auth.dev_organization,
      requested_by: 'tester',
      runtime: { heartbeat_timeout: '10s', continue_as_new_after_events: 150 },
    };
    const handle = await stack.runtime.client.workflow.start('hpoSweepWorkflow', { taskQueue: HPO_TASK_QUEUE, workflowId: hpoWorkflowId(sweepId), args: [input] });
    const result = (await handle.result()) as SweepResult;
    expect(result.status).toBe('completed');
    expect(result.progress.continued_as_new).toBeGreaterThan(0);
    expect(result.progress.trials_finished).toBe(40);
    expect((await trials(sweepId)).map((t) => t.number).sort((a, b) => a - b)).toEqual(Array.from({ length: 40 }, (_, i) => i));
  });

  it('cancelling the sweep cancels its running trials', async () => {
    const id = await start(branin({ strategy: 'random', max_trials: 6, max_concurrent_trials: 2, base_config: { method: 'synthetic', function: 'branin', max_steps: 2000, eval_steps: 10, step_ms: 20 } }));
    const handle = stack.runtime.client.workflow.getHandle(hpoWorkflowId(id));
    await waitFor(async () => (await handle.query(sweepProgressQuery)).running.length === 2);
    await waitFor(async () => (await trials(id)).filter((t) => t.status === 'running' && t.steps > 0).length === 2); // both training
    const cancel = await stack.api('POST', `/v1/hpo/${id}/cancel`);
    expect(cancel.status).toBe(200);
    const sweep = await finished(id);
    expect(sweep.status).toBe('cancelled');
    expect(sweep.trials.by_status.cancelled).toBe(2);
    for (const n of [0, 1]) {
      const d = await stack.runtime.client.workflow.getHandle(hpoTrialWorkflowId(id, n)).describe();
      expect(d.status.name).toBe('CANCELLED');
    }
    expect((await trials(id)).every((t) => t.steps < 2000)).toBe(true);
  });

  it('finishes the sweep after its worker stops mid-sweep and a new worker takes over', { timeout: 150_000 }, async () => {
    const id = await start(branin({ strategy: 'random', max_trials: 8, max_concurrent_trials: 2, base_config: { method: 'synthetic', function: 'branin', max_steps: 60, eval_steps: 10, step_ms: 25 } }));
    const handle = stack.runtime.client.workflow.getHandle(hpoWorkflowId(id));
    await waitFor(async () => (await handle.query(sweepProgressQuery)).trials_finished >= 2);
    const old = stack.runtime.worker!;
    old.shutdown();
    await waitFor(async () => old.getState() === 'STOPPED');
    const before: SweepProgress = await handle.query(sweepProgressQuery).catch(() => null as never);
    expect(before === null || before.trials_finished < 8).toBe(true);
    const worker = await replacementWorker(stack);
    const result = (await worker.runUntil(handle.result())) as SweepResult;
    expect(result.status).toBe('completed');
    expect(result.progress.trials_finished).toBe(8);
    expect(result.progress.counts.completed).toBe(8);
  });

  it('trains a population in rounds where the bottom member copies the checkpoint and perturbed hyperparameters of a top one', { timeout: 150_000 }, async () => {
    const id = await start({
      experiment: 'pbt-sweep',
      base_config: { method: 'synthetic', function: 'learning-curve', max_steps: 60, eval_steps: 10, step_ms: 20 },
      search_space: { learning_rate: { type: 'log_uniform', min: 1e-5, max: 0.5 }, width: { type: 'int', min: 16, max: 1024 } },
      strategy: 'pbt',
      pbt: { population_size: 4, interval_steps: 20, quantile: 0.25 },
      seed: 5,
    });
    // One worker runs the first round and stops during the second; another takes over: the population carries on.
    const stackWorker = stack.runtime.worker!;
    if (stackWorker.getState() === 'RUNNING') stackWorker.shutdown();
    await waitFor(async () => stackWorker.getState() === 'STOPPED');
    const handle = stack.runtime.client.workflow.getHandle(hpoWorkflowId(id));
    const first = await replacementWorker(stack);
    const firstRun = first.run();
    await waitFor(async () => (await handle.query(sweepProgressQuery)).counts.round! >= 1);
    first.shutdown();
    await firstRun;
    const worker = await replacementWorker(stack);
    const result = (await worker.runUntil(handle.result())) as SweepResult;
    expect(result.status).toBe('completed');
    const { body } = await stack.api<{ lineage: { member: number; round: number; action: string; parent_member: number | null; params: Record<string, number>; step: number; value: number; checkpoint: string }[] }>('GET', `/v1/hpo/${id}/lineage`);
    expect(body.lineage).toHaveLength(4 * 3);
    const at = (m: number, r: number) => body.lineage.find((l) => l.member === m && l.round === r)!;
    for (const l of body.lineage) expect(l.step).toBe(Math.min(60, (l.round + 1) * 20));
    const exploits = body.lineage.filter((l) => l.action === 'exploit');
    expect(exploits.length).toBe(2); // one per round boundary (quantile 0.25 of 4)
    for (const e of exploits) {
      const source = at(e.parent_member!, e.round - 1);
      const before = at(e.member, e.round - 1);
      expect(source.value).toBeLessThan(before.value); // copied from a better member
      expect(e.params.learning_rate).not.toBe(source.params.learning_rate); // explored
      // Its round started from the source's checkpoint (in the object store, checkpoints/{org}/{run}/{step}/ with a
      // manifest): the learning curve continues from the source's loss.
      const manifest = JSON.parse((await stack.runtime.store.readText(`${e.checkpoint}/manifest.json`))!) as { step: number; pbt: { started_from: string; start: { loss: number; step: number } } };
      expect(manifest.step).toBe(e.step);
      expect(manifest.pbt.started_from).toBe(source.checkpoint);
      expect(manifest.pbt.start).toEqual({ step: source.step, loss: source.value });
    }
    const sweep = await finished(id);
    expect(sweep.best_trial!.objective_values[0]).toBe(Math.min(...[0, 1, 2, 3].map((m) => at(m, 2).value)));
    // Every member's GPU time over its rounds is accounted, as for the trials of any other sweep.
    expect(sweep.gpu_hours).toBeGreaterThan(0);
  });
});

async function waitFor(pred: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await pred().catch(() => false))) {
    if (Date.now() > deadline) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function replacementWorker(stack: TestStack): Promise<PipelineWorker> {
  const { runtime, loaded } = stack;
  return createPipelineWorker({
    connection: await NativeConnection.connect({ address: stack.temporal.address }),
    namespace: loaded.config.temporal.namespace,
    workflowBundle: await bundleWorkflows(),
    deps: {
      db: runtime.catalogue.db,
      store: runtime.store,
      config: loaded.config,
      home: loaded.home,
      bootstrap: loaded.bootstrap,
      log: runtime.log,
      executor: createExecutor(loaded, runtime.log),
      trackingUri: runtime.apiUrl,
      jobSecrets: jobTokenSecrets(runtime.catalogue.db),
    },
  });
}

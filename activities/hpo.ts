// Sweep activities: the catalogue side of sweeps and trials, the stateless suggestion call, and the two
// trial kinds (synthetic objectives evaluated step by step; LoRA training jobs of the tiny model).
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { CancelledFailure, Context, getClient, sleep } from '@temporalio/activity';
import type { ActivityDeps } from './deps.js';
import {
  SuggestResponseSchema,
  objectivesOf,
  type PbtMemberRoundInput,
  type PbtRoundOrder,
  type PbtRoundResult,
  type HistoryTrial,
  type LoraBaseConfig,
  type Params,
  type SuggestRequest,
  type SuggestResponse,
  type SweepWorkflowInput,
  type SyntheticBaseConfig,
  type TrialInput,
  type TrialOutcome,
  type TrialState,
} from '../contracts/hpo.js';
import { LoraHyperparametersSchema, TRAIN_JOB_IO_FIELDS, TrainJobSpecSchema, TrainResultSchema, type TrainJobSpec } from '../contracts/trainer-job.js';
import { finishTrialJob, recordTrialJob } from '../jobs/child-jobs.js';
import { accountTrial, createSweep, finishSweep, finishTrial, insertTrial, recordLineage, warmStartTrials } from '../db/repo/hpo.js';
import { getOrCreateExperiment } from '../db/repo/experiments.js';
import { logParams } from '../db/repo/params-tags.js';
import { createRun, setRunStatus } from '../db/repo/runs.js';
import { findDatasetVersion } from '../db/repo/datasets.js';
import { deterministicUuid } from '../lib/ids.js';
import { artifactRootUri } from '../lib/object-store.js';
import { checkpointsUri } from '../lib/job-files.js';
import { repoRoot, trainerPython } from '../lib/config.js';
import { BaseModelError } from '../lib/base-models.js';
import { learningCurve, learningCurveStep, syntheticMetrics } from './hpo-objectives.js';
import { readProgress } from '../jobs/attempts.js';
import { runJobToCompletion, stopJob } from './run-job.js';
import { defineJob, type JobDefinition } from '../jobs/definition.js';
import { baseModelInput, fileInput } from '../jobs/inputs.js';
import { syntheticTrialSlot } from './hpo-slots.js';
import { datasetRef } from './datasets.js';
import { trialReportUpdate } from '../contracts/hpo-messages.js';
import { logMetrics } from '../db/repo/metrics.js';
import { pbtCheckpointUri, readPbtCheckpoint, writePbtCheckpoint, WRITER, type PbtState } from './pbt-checkpoints.js';
import { FailureType, nonRetryable, retryable } from '../contracts/failures.js';

const WARM_START_LIMIT = 500;

export const trialRunId = (sweepId: string, n: number): string => deterministicUuid(`hpo:${sweepId}:trial:${n}:run`);

/**
 * One long-lived `python -m hanzo_ml hpo-suggest --serve` process answering one request per line. It holds no
 * state between requests (every request carries the whole history); it only saves the interpreter start.
 */
/**
 * A hung suggestion process would hold the queue forever: every later request, and every retry of the activity
 * (whose start-to-close timeout is 2 minutes), would wait behind it. Past this it is killed and the request
 * fails as retryable; the next one starts a fresh process.
 */
const SUGGEST_TIMEOUT_MS = 90_000;

class SuggestServer {
  private proc: ChildProcessWithoutNullStreams | null = null;
  private waiting: ((line: string) => void)[] = [];
  private queue: Promise<unknown> = Promise.resolve();
  constructor(private readonly deps: ActivityDeps) {}

  request(req: SuggestRequest): Promise<SuggestResponse> {
    const next = this.queue.then(() => this.roundTrip(req));
    this.queue = next.catch(() => undefined);
    return next;
  }

  private start(): ChildProcessWithoutNullStreams {
    const python = trainerPython(this.deps);
    const proc = spawn(python, ['-m', 'hanzo_ml', 'hpo-suggest', '--serve'], {
      env: { ...process.env, PYTHONPATH: join(repoRoot, 'trainer'), OMP_NUM_THREADS: '1', PYTHONUNBUFFERED: '1' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stderr = '';
    proc.stderr.on('data', (d: Buffer) => void (stderr = (stderr + d.toString()).slice(-4000)));
    createInterface({ input: proc.stdout }).on('line', (line) => this.waiting.shift()?.(line));
    const fail = (why: string) => this.failWaiting(proc, `${why}: ${stderr.trim().split('\n').slice(-3).join(' ')}`);
    proc.on('exit', (code, signal) => fail(`hpo-suggest exited with ${signal ?? `code ${code}`}`));
    proc.on('error', (err) => fail(`hpo-suggest could not run (${python}): ${err.message}`));
    // Writing to a process that just died fails with EPIPE; its 'exit' reports why, so the write error is moot.
    proc.stdin.on('error', () => undefined);
    // The worker's own work keeps the process alive; an idle suggestion process must not.
    proc.unref();
    for (const stream of [proc.stdin, proc.stdout, proc.stderr]) (stream as unknown as { unref?: () => void }).unref?.();
    return proc;
  }

  private async roundTrip(req: SuggestRequest): Promise<SuggestResponse> {
    this.proc ??= this.start();
    const proc = this.proc;
    const timer = setTimeout(() => {
      this.failWaiting(proc, `hpo-suggest gave no answer within ${SUGGEST_TIMEOUT_MS / 1000} s and was killed`);
      proc.kill('SIGKILL');
    }, SUGGEST_TIMEOUT_MS);
    const line = await new Promise<string>((resolve) => {
      this.waiting.push(resolve);
      proc.stdin.write(JSON.stringify(req) + '\n');
    }).finally(() => clearTimeout(timer));
    const body = JSON.parse(line) as { error?: string; crashed?: boolean };
    if (body.error && body.crashed) throw retryable(FailureType.SuggestCrashed, body.error);
    if (body.error) throw nonRetryable(FailureType.BadInput, `suggestion rejected: ${body.error}`);
    return SuggestResponseSchema.parse(body);
  }

  /** Every request waiting on `proc` fails as retryable; the next request starts a fresh process. A process
   * already failed and replaced (killed on timeout, exiting later) has no waiters left to fail. */
  private failWaiting(proc: ChildProcessWithoutNullStreams, error: string): void {
    if (this.proc !== proc) return;
    this.proc = null;
    for (const w of this.waiting.splice(0)) w(JSON.stringify({ error, crashed: true }));
  }

  stop(): void {
    this.proc?.stdin.end();
    this.proc = null;
  }
}

export function createHpoActivities(deps: ActivityDeps) {
  const suggester = new SuggestServer(deps);

  async function experimentFor(organizationId: string, experiment: string): Promise<string> {
    return getOrCreateExperiment(deps.db, organizationId, experiment, artifactRootUri(deps));
  }

  /** Logs every metric to the trial's run and reports the objective to the sweep; returns its stop decision. */
  async function report(t: TrialInput, runId: string, step: number, metrics: Record<string, number>): Promise<string | null> {
    const now = Date.now();
    await logMetrics(deps.db, runId, Object.entries(metrics).map(([key, value]) => ({ key, value, step, timestamp: now })));
    const value = metrics[objectivesOf(t.config)[0]!.metric];
    return value !== undefined && Number.isFinite(value) ? askSweep(t, step, value) : null;
  }

  /** The steps of a synthetic trial (runSyntheticTrial), keeping its admission slot fresh as it goes. */
  async function evaluateSynthetic(
    a: { trial: TrialInput; runId: string },
    prior: { step: number; gpu_seconds: number; curve: [number, number][] } | undefined,
    refreshSlot: () => Promise<void>,
  ): Promise<TrialOutcome> {
    const base = a.trial.config.base_config as SyntheticBaseConfig;
    const ctx = Context.current();
    const objective = objectivesOf(a.trial.config)[0]!.metric;
    const curve: [number, number][] = prior?.curve ?? [];
    const gpus = a.trial.config.resources_per_trial.gpus;
    let step = prior?.step ?? 0;
    let gpuSeconds = prior?.gpu_seconds ?? 0;
    let last = Date.now();
    const account = () => {
      const now = Date.now();
      gpuSeconds += ((now - last) / 1000) * gpus;
      last = now;
    };
    let metrics: Record<string, number> = {};
    let stopped: string | null = null;
    try {
      while (step < base.max_steps && stopped === null) {
        if (base.step_ms > 0) await sleep(base.step_ms);
        step++;
        if (step % base.eval_steps === 0 || step === base.max_steps) {
          metrics = syntheticMetrics(base.function, a.trial.params, step, base.max_steps, base.noise);
          account();
          stopped = await report(a.trial, a.runId, step, metrics);
          curve.push([step, metrics[objective]!]);
          await accountTrial(deps.db, a.trial.sweep_id, a.trial.n, { steps: step, gpuSeconds });
          await refreshSlot();
        }
        ctx.heartbeat({ step, gpu_seconds: gpuSeconds, curve });
        if (base.step_ms === 0 && step % 50 === 0) await sleep(0); // let a cancellation in
      }
    } catch (err) {
      if (err instanceof CancelledFailure) {
        account();
        await accountTrial(deps.db, a.trial.sweep_id, a.trial.n, { steps: step, gpuSeconds });
      }
      throw err;
    }
    account();
    const state = stopped === null ? 'completed' : 'pruned';
    return { n: a.trial.n, state, metrics: { ...metrics, 'cost/gpu_hours': gpuSeconds / 3600 }, steps: step, gpu_seconds: gpuSeconds, run_id: a.runId, error: stopped, curve };
  }

  return {
    /** The sweep's row and experiment; returns the key warm start looks earlier trials up by. */
    /** The sweep's row and experiment (the API made them already unless the sweep was started directly). */
    async recordSweep(a: { input: SweepWorkflowInput }): Promise<{ experimentId: string; spaceKey: string }> {
      return createSweep(deps.db, a.input, artifactRootUri(deps));
    },

    async loadWarmStart(a: { sweepId: string; organizationId: string; spaceKey: string; objectives: string[] }): Promise<HistoryTrial[]> {
      const rows = await warmStartTrials(deps.db, a.organizationId, a.spaceKey, a.sweepId, WARM_START_LIMIT);
      return rows.map((r, i) => ({
        n: i,
        params: r.params as Params,
        state: r.status as TrialState,
        values: r.status === 'completed' ? (r.objectiveValues as number[]) : null,
        intermediate: r.intermediate as [number, number][],
        system_attrs: {},
      }));
    },

    async suggestTrials(req: SuggestRequest): Promise<SuggestResponse> {
      return suggester.request(req);
    },

    async startTrial(t: TrialInput): Promise<{ runId: string }> {
      const runId = trialRunId(t.sweep_id, t.n);
      const experimentId = await experimentFor(t.organization_id, t.config.experiment);
      const base = t.config.base_config;
      await createRun(deps.db, {
        id: runId,
        organizationId: t.organization_id,
        experimentId,
        name: `${t.config.experiment}-trial-${t.n}`,
        userId: t.requested_by,
        artifactRoot: artifactRootUri(deps),
        config: { sweep_id: t.sweep_id, trial: t.n, base_config: base, params: t.params },
        params: {
          hpo_sweep_id: t.sweep_id,
          hpo_trial: String(t.n),
          method: base.method,
          ...(base.method === 'lora' ? { model: base.model, dataset: base.dataset } : { function: base.function }),
          max_steps: String(base.max_steps),
          ...Object.fromEntries(Object.entries(t.params).map(([k, v]) => [k, String(v)])),
        },
      });
      await insertTrial(deps.db, { sweepId: t.sweep_id, number: t.n, runId, params: t.params });
      await recordTrialJob(deps, { sweepId: t.sweep_id, n: t.n, organizationId: t.organization_id, requestedBy: t.requested_by, runId, params: t.params });
      return { runId };
    },

    /**
     * Evaluates a synthetic objective step by step; resumes from its last heartbeat after a worker restart. A
     * synthetic trial stands in for a training job (it is how the scheduler is tested without GPU time), so it
     * holds a slot of its organization's admission gate, as a LoRA trial's job does.
     */
    async runSyntheticTrial(a: { trial: TrialInput; runId: string }): Promise<TrialOutcome> {
      const ctx = Context.current();
      const prior = ctx.info.heartbeatDetails as { step: number; gpu_seconds: number; curve: [number, number][] } | undefined;
      const slot = await syntheticTrialSlot(deps, a.trial);
      try {
        return await evaluateSynthetic(a, prior, slot.refresh);
      } finally {
        await slot.release();
      }
    },

    /** Trains the tiny model with the trial's hyperparameters as a trainer job; reports eval/loss at each eval. */
    async runLoraTrial(a: { trial: TrialInput; runId: string }): Promise<TrialOutcome> {
      const t = a.trial;
      const base = t.config.base_config as LoraBaseConfig;
      const dataset = await findDatasetVersion(deps.db, t.organization_id, base.dataset, base.dataset_version);
      if (!dataset) throw nonRetryable(FailureType.NotFound, `dataset "${base.dataset}" has no version ${base.dataset_version}`);
      const ref = datasetRef(dataset);
      let baseModel: Awaited<ReturnType<typeof baseModelInput>>;
      try {
        baseModel = await baseModelInput(deps, base.model);
      } catch (err) {
        if (err instanceof BaseModelError) throw nonRetryable(FailureType.BadInput, err.message);
        throw err;
      }
      const spec = TrainJobSpecSchema.parse({
        kind: 'train',
        job_name: `hpo-${t.sweep_id}-trial-${t.n}`,
        run_id: a.runId,
        tracking_uri: deps.trackingUri,
        ...TRAIN_JOB_IO_FIELDS,
        method: 'lora',
        hyperparameters: loraHyperparameters(base, t.params),
        // By steps only: a checkpoint (and its eval) at every eval step is what the sweep compares.
        checkpoint: { every_steps: base.eval_steps, keep_last: base.keep_checkpoints, every_seconds: null },
        threads: deps.config.trainer.threads,
      });
      const job = defineJob({
        name: spec.job_name,
        kind: 'trial',
        organizationId: t.organization_id,
        runId: a.runId,
        priority: t.config.priority,
        tool: 'trainer',
        spec,
        inputs: { base_model_path: baseModel, train_path: fileInput(ref.splits.train), validation_path: fileInput(ref.splits.validation) },
        outputs: { output_dir: 'dir' },
        checkpoints: { field: 'checkpoint_dir', uri: checkpointsUri(deps.store, deps.config, t.organization_id, a.runId) },
        resources: { gpus_per_node: t.config.resources_per_trial.gpus },
      });
      return runTrainerJob(deps, { trial: t, runId: a.runId, job, spec });
    },

    async finishTrial(a: {
      sweepId: string;
      n: number;
      state: TrialState;
      values: number[] | null;
      metrics: Record<string, number>;
      intermediate: [number, number][];
      steps: number;
      gpuSeconds: number;
      reason: string | null;
    }): Promise<void> {
      await finishTrial(deps.db, a.sweepId, a.n, { status: a.state, objectiveValues: a.values, metrics: a.metrics, intermediate: a.intermediate, steps: a.steps, gpuSeconds: a.gpuSeconds, reason: a.reason });
      await setRunStatus(deps.db, trialRunId(a.sweepId, a.n), a.state === 'completed' ? 'completed' : a.state === 'failed' ? 'failed' : 'cancelled');
      await finishTrialJob(deps, { sweepId: a.sweepId, n: a.n, state: a.state, reason: a.reason });
    },

    /**
     * One round of a population-based training member (synthetic learning-curve kind): start from its own
     * checkpoint of the previous round, or from another member's (exploit), train to the round's end step with
     * this round's hyperparameters, and write this round's checkpoint to the object store
     * (`checkpoints/{org}/{member run}/{end step}/`, manifest last), where a member on any worker finds it. A retried
     * round whose checkpoint exists returns it; one interrupted mid-way starts the round again from the same
     * checkpoint, which no round overwrites.
     */
    async trainPbtRound(a: { input: PbtMemberRoundInput; runId: string }): Promise<PbtRoundResult> {
      const { input, runId } = a;
      const { order } = input;
      const base = input.config.base_config as SyntheticBaseConfig;
      const out = pbtCheckpointUri(deps, input.organization_id, runId, order.end_step);
      const result = (state: PbtState, gpuSeconds: number): PbtRoundResult => ({ member: input.member, round: order.round, step: state.step, value: state.loss, checkpoint: out, gpu_seconds: gpuSeconds });
      const finished = await readPbtCheckpoint(deps, out);
      if (finished?.record.round === order.round) return result(finished.state, finished.record.gpu_seconds);
      let state: PbtState = { step: 0, loss: learningCurve(num(order.params.learning_rate), Math.round(num(order.params.width)), 0) };
      let startedFrom: string | null = null;
      if (order.round > 0) {
        // The previous round's checkpoint of the member it continues (its own, or the one it exploits): immutable,
        // since that member writes its next round under another step.
        const from = order.exploit_from ?? input.member;
        const startStep = Math.min(order.round * input.config.pbt!.interval_steps, input.config.base_config.max_steps);
        startedFrom = pbtCheckpointUri(deps, input.organization_id, trialRunId(input.sweep_id, from), startStep);
        const start = await readPbtCheckpoint(deps, startedFrom);
        if (!start || start.record.round !== order.round - 1) throw new Error(`member ${from}'s checkpoint of round ${order.round - 1} is not at ${startedFrom}`);
        state = start.state;
      }
      const start = state;
      const gpus = input.config.resources_per_trial.gpus;
      const started = Date.now();
      const ctx = Context.current();
      while (state.step < order.end_step) {
        if (base.step_ms > 0) await sleep(base.step_ms);
        state = { step: state.step + 1, loss: learningCurveStep(num(order.params.learning_rate), Math.round(num(order.params.width)), state.loss) };
        if (state.step % base.eval_steps === 0) await logMetrics(deps.db, runId, [{ key: 'eval/loss', value: state.loss, step: state.step, timestamp: Date.now() }]);
        ctx.heartbeat({ step: state.step });
      }
      const gpuSeconds = ((Date.now() - started) / 1000) * gpus;
      await writePbtCheckpoint(deps, out, state, { sweep_id: input.sweep_id, member: input.member, round: order.round, params: order.params, started_from: startedFrom, start, gpu_seconds: gpuSeconds, writer: WRITER });
      return result(state, gpuSeconds);
    },

    async recordPbtRound(a: { sweepId: string; member: number; order: PbtRoundOrder; result: PbtRoundResult }): Promise<void> {
      const { order, result } = a;
      await recordLineage(deps.db, {
        sweepId: a.sweepId,
        member: a.member,
        round: order.round,
        parentMember: order.round === 0 ? null : (order.exploit_from ?? a.member),
        action: order.round === 0 ? 'start' : order.exploit_from === null ? 'continue' : 'exploit',
        params: order.params,
        step: result.step,
        value: result.value,
        checkpoint: result.checkpoint,
        gpuSeconds: result.gpu_seconds,
      });
      // GPU time is summed over the rounds by the workflow and recorded when the member finishes.
      await accountTrial(deps.db, a.sweepId, a.member, { steps: result.step, gpuSeconds: 0 });
      // Params are immutable: a retried round writes the same value again, which logParams accepts.
      const round = { key: `round_${order.round}`, value: JSON.stringify({ ...order.params, from: order.exploit_from ?? a.member }) };
      if (result.value !== null) await logParams(deps.db, trialRunId(a.sweepId, a.member), [round]);
    },

    async finishSweep(a: { sweepId: string; status: 'completed' | 'cancelled' | 'failed'; bestTrial: number | null }): Promise<void> {
      await finishSweep(deps.db, a.sweepId, a.status, a.bestTrial);
    },
  };
}

const num = (v: unknown): number => {
  if (typeof v !== 'number' || !Number.isFinite(v)) throw nonRetryable(FailureType.BadInput, `expected a number, got ${JSON.stringify(v)}`);
  return v;
};

/** Reports one eval to the sweep; the reason when the sweep's early-stopping rule stops the trial, else null. */
export async function askSweep(t: TrialInput, step: number, value: number): Promise<string | null> {
  const update = getClient()
    .workflow.getHandle(t.report_to)
    .executeUpdate(trialReportUpdate, { args: [{ n: t.n, step, value }] })
    // The sweep is between runs (continue-as-new) or gone: the trial goes on; its result is recorded either way.
    .catch(() => ({ stop: false, reason: '' }));
  // The sweep's workflow may run on this very worker: a worker shutting down cancels the activity, and the
  // activity must not sit on an Update that worker will never answer.
  const answer = await Promise.race([update, Context.current().cancelled, sleep(60_000).then(() => ({ stop: false, reason: '' }))]);
  return answer.stop ? answer.reason : null;
}

/** The trial's hyperparameters: the base config's fixed ones, overridden by the trial's sampled ones. */
export function loraHyperparameters(base: LoraBaseConfig, params: Params): TrainJobSpec['hyperparameters'] {
  const checked = LoraHyperparametersSchema.safeParse({ learning_rate: 2e-3, batch_size: 8, ...base.hyperparameters, ...params, max_steps: base.max_steps });
  if (!checked.success) throw nonRetryable(FailureType.BadInput, `trial hyperparameters: ${checked.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  return checked.data;
}

/** Runs one trainer job for a trial: eval points go to the sweep as they appear; GPU time is accounted. */
async function runTrainerJob(
  deps: ActivityDeps,
  p: { trial: TrialInput; runId: string; job: JobDefinition; spec: TrainJobSpec },
): Promise<TrialOutcome> {
  const gpus = p.trial.config.resources_per_trial.gpus;
  const started = Date.now();
  const prior = Context.current().info.heartbeatDetails as { gpu_seconds?: number; reported?: number; curve?: [number, number][] } | undefined;
  const curve: [number, number][] = prior?.curve ?? [];
  const priorGpu = prior?.gpu_seconds ?? 0;
  const gpuSeconds = () => priorGpu + ((Date.now() - started) / 1000) * gpus;
  let reported = prior?.reported ?? 0;
  let step = 0;
  const evalEvery = p.spec.checkpoint.every_steps;
  const objective = objectivesOf(p.trial.config)[0]!.metric;
  let stopped: string | null = null;
  try {
    const { result } = await runJobToCompletion(deps, {
      job: p.job,
      resultSchema: TrainResultSchema,
      pollMs: 500,
      onPoll: async (files) => {
        const progress = await readProgress(files);
        if (!progress) return { gpu_seconds: gpuSeconds(), reported, curve };
        step = progress.step;
        const evalStep = Math.floor(step / evalEvery) * evalEvery;
        const value = progress.metrics[objective];
        if (evalStep > reported && value !== undefined) {
          reported = evalStep;
          // The trainer logs its own metrics to the run; only the objective goes to the sweep here.
          stopped = await askSweep(p.trial, evalStep, value);
          curve.push([evalStep, value]);
          await accountTrial(deps.db, p.trial.sweep_id, p.trial.n, { steps: step, gpuSeconds: gpuSeconds() });
          if (stopped !== null) throw new TrialStopped(stopped);
        }
        return { gpu_seconds: gpuSeconds(), reported, step, curve };
      },
    });
    const gpu = gpuSeconds();
    return { n: p.trial.n, state: 'completed', metrics: { ...result.final_metrics, 'cost/gpu_hours': gpu / 3600 }, steps: result.steps, gpu_seconds: gpu, run_id: p.runId, error: null, curve };
  } catch (err) {
    if (err instanceof TrialStopped) {
      await stopJob(deps, p.job);
      const gpu = gpuSeconds();
      await accountTrial(deps.db, p.trial.sweep_id, p.trial.n, { steps: step, gpuSeconds: gpu });
      return { n: p.trial.n, state: 'pruned', metrics: { 'cost/gpu_hours': gpu / 3600 }, steps: step, gpu_seconds: gpu, run_id: p.runId, error: err.message, curve };
    }
    if (err instanceof CancelledFailure) await accountTrial(deps.db, p.trial.sweep_id, p.trial.n, { steps: step, gpuSeconds: gpuSeconds() });
    throw err;
  }
}

class TrialStopped extends Error {}

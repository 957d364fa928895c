// hpoSweepWorkflow: suggests trials through a stateless activity (it holds the trial history and passes it in),
// runs each as a child workflow `hpo:<sweep>:trial:<n>`, applies the early-stopping rule to every intermediate
// report and cancels a stopped trial at once, and continues-as-new with a compact history before the event
// limit. hpoTrialWorkflow: one trial (catalogue row + tracked run, then the synthetic or LoRA trial activity).
import {
  ActivityCancellationType,
  CancellationScope,
  ChildWorkflowCancellationType,
  ParentClosePolicy,
  allHandlersFinished,
  condition,
  continueAsNew,
  executeChild,
  isCancellation,
  proxyActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { createActivities } from '../activities/index.js';
import { jobsTaskQueueOf } from '../contracts/pipeline.js';
import {
  SweepWorkflowInputSchema,
  hpoTrialWorkflowId,
  objectivesOf,
  type HistoryTrial,
  type Objective,
  type Params,
  type SweepProgress,
  type SweepResult,
  type SweepWorkflowInput,
  type TrialInput,
  type TrialOutcome,
  type TrialReport,
  type TrialState,
} from '../contracts/hpo.js';
import { bestIndex, decideStop, emptyRuleState, paretoFront, trialInputOf, type Curve, type RuleState } from './hpo-rules.js';
import { sweepProgressQuery, trialReportUpdate } from '../contracts/hpo-messages.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';

type Activities = ReturnType<typeof createActivities>;

const quick = proxyActivities<Activities>({
  startToCloseTimeout: '2 minutes',
  retry: { maximumAttempts: 10, nonRetryableErrorTypes: [FailureType.BadInput, FailureType.NotFound] },
});

/** Stay well under Temporal's 50 MB history: suggestion requests carry the history, so size grows fast. */
const MAX_HISTORY_BYTES = 8 * 1024 * 1024;

/** What a sweep carries into its next run when it continues-as-new. */
export interface SweepCarry {
  history: HistoryTrial[];
  warm: HistoryTrial[];
  next_n: number;
  exhausted: boolean;
  rules: RuleState;
  counts: Record<string, number>;
  steps_run: number;
  steps_saved: number;
  continued: number;
}

interface LiveTrial {
  n: number;
  params: Params;
  system_attrs: Record<string, unknown>;
  curve: Curve;
  scope: CancellationScope;
  settled: Promise<void>;
  stopReason: string | null;
}

interface Settled {
  n: number;
  outcome: TrialOutcome | null;
  cancelled: boolean;
  error: string | null;
}

export async function hpoSweepWorkflow(rawInput: SweepWorkflowInput, carried?: SweepCarry): Promise<SweepResult> {
  const parsed = SweepWorkflowInputSchema.safeParse(rawInput);
  if (!parsed.success) throw nonRetryable(FailureType.BadInput, `invalid sweep input: ${parsed.error.message}`);
  const input = parsed.data;
  const { config } = input;
  const sweepId = input.sweep_id;
  const objectives = objectivesOf(config);
  const directions = objectives.map((o) => o.direction);
  const baseSteps = config.base_config.max_steps;
  const evalSteps = config.base_config.eval_steps;

  const s: SweepCarry = carried ?? { history: [], warm: [], next_n: 0, exhausted: false, rules: emptyRuleState(), counts: {}, steps_run: 0, steps_saved: 0, continued: 0 };
  const live = new Map<number, LiveTrial>();
  const settled: Settled[] = [];
  let status: SweepProgress['status'] = 'running';
  let error: string | null = null;

  setHandler(trialReportUpdate, (r) => applyReport(r));
  setHandler(sweepProgressQuery, () => progress());

  function ranked(): { best: HistoryTrial | null; front: HistoryTrial[] } {
    const done = s.history.filter((h) => h.state === 'completed' && h.values);
    if (objectives.length > 1) return { best: null, front: paretoFront(directions, done.map((h) => h.values!)).map((i) => done[i]!) };
    const i = bestIndex(directions[0]!, done.map((h) => h.values![0]!));
    return { best: i >= 0 ? done[i]! : null, front: i >= 0 ? [done[i]!] : [] };
  }

  function progress(): SweepProgress {
    const { best, front } = ranked();
    return {
      sweep_id: sweepId,
      status,
      strategy: config.strategy,
      trials_started: s.next_n,
      trials_finished: s.history.length,
      counts: { ...s.counts, running: live.size },
      running: [...live.values()].map((l) => ({ n: l.n, params: l.params, last_step: l.curve.at(-1)?.[0] ?? null, last_value: l.curve.at(-1)?.[1] ?? null })),
      best: best ? { n: best.n, params: best.params, values: best.values! } : null,
      pareto_front: front.map((h) => h.n),
      continued_as_new: s.continued,
      warm_start_trials: s.warm.length,
      trial_steps_run: s.steps_run,
      trial_steps_saved: s.steps_saved,
      error,
    };
  }

  function launch(n: number, params: Params, systemAttrs: Record<string, unknown>): void {
    const scope = new CancellationScope();
    const trial = trialInputOf(input, n, params, workflowInfo().workflowId);
    const run = scope.run(() =>
      executeChild(hpoTrialWorkflow, {
        workflowId: hpoTrialWorkflowId(sweepId, n),
        args: [trial],
        // A stopped trial frees its slot as soon as the cancel request is accepted; its job stops meanwhile.
        cancellationType: ChildWorkflowCancellationType.WAIT_CANCELLATION_REQUESTED,
        parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
      }),
    );
    const done = run.then(
      (outcome) => void settled.push({ n, outcome, cancelled: false, error: null }),
      (err: unknown) => void settled.push({ n, outcome: null, cancelled: isCancellation(err), error: String(err) }),
    );
    live.set(n, { n, params, system_attrs: systemAttrs, curve: [], scope, settled: done, stopReason: null });
  }

  async function fillSlots(): Promise<void> {
    const free = Math.min(config.max_concurrent_trials - live.size, config.max_trials - s.next_n);
    if (free <= 0 || s.exhausted) return;
    const numbers = Array.from({ length: free }, (_, i) => s.next_n + i);
    const running: HistoryTrial[] = [...live.values()].map((l) => ({ n: l.n, params: l.params, state: 'running', values: null, intermediate: l.curve, system_attrs: l.system_attrs }));
    // Random sampling depends on (seed, trial number) only: it is sent no history at all.
    const history = config.strategy === 'random' ? [] : [...s.warm, ...s.history, ...running];
    const res = await quick.suggestTrials({ space: config.search_space, strategy: config.strategy as 'grid', directions, seed: config.seed, history, numbers });
    for (const sug of res.suggestions) launch(sug.n, sug.params, sug.system_attrs);
    s.next_n += res.suggestions.length;
    if (res.exhausted || res.suggestions.length < free) s.exhausted = true;
  }

  function applyReport(r: TrialReport): { stop: boolean; reason: string } {
    const l = live.get(r.n);
    if (!l) return { stop: false, reason: 'not a running trial of this sweep run' };
    if (l.stopReason) return { stop: true, reason: l.stopReason };
    if (l.curve.length && l.curve.at(-1)![0] >= r.step) return { stop: false, reason: '' }; // repeated after a retry
    l.curve.push([r.step, r.value]);
    const decision = decideStop(config.early_stopping, evalSteps, directions[0]!, l.curve, s.rules);
    if (!decision.stop || r.step >= baseSteps) return { stop: false, reason: '' };
    l.stopReason = decision.reason;
    return decision;
  }

  async function recordSettled(): Promise<void> {
    for (const d of settled.splice(0)) {
      const l = live.get(d.n)!;
      live.delete(d.n);
      // A trial that ended on its own recorded itself (hpoTrialWorkflow); one cancelled with the sweep is recorded here.
      const outcome: TrialOutcome = d.outcome ?? { n: d.n, state: d.cancelled ? 'cancelled' : 'failed', metrics: {}, steps: l.curve.at(-1)?.[0] ?? 0, gpu_seconds: 0, run_id: null, error: d.error };
      if (!d.outcome) await quick.finishTrial(trialRecord(sweepId, objectives, outcome, l.curve));
      const { state, values } = judged(objectives, outcome);
      s.steps_run += outcome.steps;
      if (state === 'pruned') s.steps_saved += Math.max(0, baseSteps - outcome.steps);
      s.counts[state] = (s.counts[state] ?? 0) + 1;
      if (state === 'completed') s.rules.completed.push(l.curve);
      s.history.push({ n: d.n, params: l.params, state, values, intermediate: l.curve, system_attrs: l.system_attrs });
    }
  }

  const historyFull = (): boolean => {
    const info = workflowInfo();
    return info.continueAsNewSuggested || info.historyLength > input.runtime.continue_as_new_after_events || info.historySize > MAX_HISTORY_BYTES;
  };

  try {
    if (!carried) {
      const { spaceKey } = await quick.recordSweep({ input });
      if (config.warm_start) s.warm = await quick.loadWarmStart({ sweepId, organizationId: input.organization_id, spaceKey, objectives: objectives.map((o) => o.metric) });
    }
    for (;;) {
      if (status === 'running' && historyFull()) status = 'draining';
      if (status === 'running') await fillSlots();
      if (live.size === 0) {
        if (status === 'draining' && !(s.exhausted || s.next_n >= config.max_trials)) {
          await condition(allHandlersFinished);
          s.continued += 1;
          return await continueAsNew<typeof hpoSweepWorkflow>(input, s);
        }
        if (s.exhausted || s.next_n >= config.max_trials) break;
      }
      await condition(() => settled.length > 0);
      await recordSettled();
    }
    status = 'completed';
    const { best } = ranked();
    await quick.finishSweep({ sweepId, status: 'completed', bestTrial: best?.n ?? null });
    return { status: 'completed', progress: progress() };
  } catch (err) {
    error = err instanceof Error ? err.message : String(err);
    const cancelled = isCancellation(err);
    status = cancelled ? 'cancelled' : 'failed';
    await CancellationScope.nonCancellable(async () => {
      // Cancelling the sweep cancelled every trial's scope; wait for the requests to land, then record them.
      for (const l of live.values()) l.scope.cancel();
      await Promise.all([...live.values()].map((l) => l.settled));
      await recordSettled();
      const { best } = ranked();
      await quick.finishSweep({ sweepId, status: cancelled ? 'cancelled' : 'failed', bestTrial: best?.n ?? null });
    });
    throw err;
  }
}

function trialActivities(heartbeatTimeout: string) {
  return proxyActivities<Activities>({
    // Trials are jobs: they take the job queue's slots like any other job.
    taskQueue: jobsTaskQueueOf(workflowInfo().taskQueue),
    startToCloseTimeout: '7 days',
    heartbeatTimeout,
    // Without this the SDK sends TRY_CANCEL and forgets the job; a stopped trial must stop its job.
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: { maximumAttempts: 5, initialInterval: '2 seconds', nonRetryableErrorTypes: [FailureType.BadInput, FailureType.BadJobSpec, FailureType.NotFound, FailureType.JobRestartLimit] },
  });
}

/** A trial's final state and objective values: completed only with every objective metric reported. */
export function judged(objectives: Objective[], o: TrialOutcome): { state: TrialState; values: number[] | null; reason: string | null } {
  if (o.state !== 'completed') return { state: o.state, values: null, reason: o.error };
  const got = objectives.map((ob) => o.metrics[ob.metric]);
  if (got.every((v) => v !== undefined && Number.isFinite(v))) return { state: 'completed', values: got as number[], reason: null };
  return { state: 'failed', values: null, reason: `the trial did not report ${objectives.map((ob) => ob.metric).join(', ')}` };
}

function trialRecord(sweepId: string, objectives: Objective[], o: TrialOutcome, curve: Curve) {
  const { state, values, reason } = judged(objectives, o);
  return { sweepId, n: o.n, state, values, metrics: o.metrics, intermediate: curve, steps: o.steps, gpuSeconds: o.gpu_seconds, reason };
}

/** One trial: its catalogue row and tracked run, the trial activity, and its recorded end (unless cancelled). */
export async function hpoTrialWorkflow(trial: TrialInput): Promise<TrialOutcome> {
  const { runId } = await quick.startTrial(trial);
  const acts = trialActivities(trial.heartbeat_timeout);
  const curve: Curve = [];
  let outcome: TrialOutcome;
  try {
    outcome = trial.config.base_config.method === 'synthetic' ? await acts.runSyntheticTrial({ trial, runId }) : await acts.runLoraTrial({ trial, runId });
  } catch (err) {
    if (isCancellation(err)) throw err;
    const cause = err instanceof Error && err.cause instanceof Error ? `: ${err.cause.message}` : '';
    outcome = { n: trial.n, state: 'failed', metrics: {}, steps: 0, gpu_seconds: 0, run_id: runId, error: `${err instanceof Error ? err.message : String(err)}${cause}` };
  }
  for (const [step, value] of outcome.curve ?? []) curve.push([step, value]);
  await quick.finishTrial(trialRecord(trial.sweep_id, objectivesOf(trial.config), outcome, curve));
  return outcome;
}

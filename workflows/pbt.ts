// pbtWorkflow: population-based training. N members train concurrently in rounds of interval_steps; each round
// of each member is a child workflow `hpo:<sweep>:member:<m>:round:<r>`. Between rounds the members in the
// bottom quantile copy the checkpoint (exploit) and perturbed hyperparameters (explore) of members in the top
// quantile; every member's round is recorded as lineage. All state lives in this workflow and the member
// checkpoints (in the object store, so a member may exploit one written on another worker), so the whole
// population survives a worker crash.
import { CancellationScope, ParentClosePolicy, executeChild, isCancellation, proxyActivities, setHandler, workflowInfo } from '@temporalio/workflow';
import type { createActivities } from '../activities/index.js';
import { jobsTaskQueueOf } from '../contracts/pipeline.js';
import {
  SweepWorkflowInputSchema,
  objectivesOf,
  pbtMemberWorkflowId,
  type PbtMemberRoundInput,
  type PbtRoundResult,
  type SweepProgress,
  type SweepResult,
  type SweepWorkflowInput,
} from '../contracts/hpo.js';
import { bestIndex, exploitExplore, seededRandom, trialInputOf, type PbtMemberState, type PbtNext } from './hpo-rules.js';
import { sweepProgressQuery } from '../contracts/hpo-messages.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';

type Activities = ReturnType<typeof createActivities>;

const quick = proxyActivities<Activities>({ startToCloseTimeout: '2 minutes', retry: { maximumAttempts: 10, nonRetryableErrorTypes: [FailureType.BadInput, FailureType.NotFound] } });

export async function pbtWorkflow(rawInput: SweepWorkflowInput): Promise<SweepResult> {
  const parsed = SweepWorkflowInputSchema.safeParse(rawInput);
  if (!parsed.success) throw nonRetryable(FailureType.BadInput, `invalid sweep input: ${parsed.error.message}`);
  const input = parsed.data;
  const { config } = input;
  const pbt = config.pbt;
  if (config.strategy !== 'pbt' || !pbt) throw nonRetryable(FailureType.BadInput, 'pbtWorkflow runs strategy "pbt" with pbt settings');
  const sweepId = input.sweep_id;
  const direction = objectivesOf(config)[0]!.direction;
  const rounds = Math.ceil(config.base_config.max_steps / pbt.interval_steps);
  let members: PbtMemberState[] = [];
  let round = 0;
  let status: SweepProgress['status'] = 'running';
  let error: string | null = null;
  let stepsRun = 0;
  // Per member, over every round: the steps its last round reached and the GPU time all its rounds took.
  const memberSteps: number[] = [];
  const memberGpuSeconds: number[] = [];

  const progress = (): SweepProgress => {
    const i = bestIndex(direction, members.map((m) => m.value));
    return {
      sweep_id: sweepId,
      status,
      strategy: 'pbt',
      trials_started: members.length,
      trials_finished: status === 'running' ? 0 : members.length,
      counts: { round, rounds },
      running: status === 'running' ? members.map((m, n) => ({ n, params: m.params, last_step: null, last_value: m.value })) : [],
      best: i >= 0 ? { n: i, params: members[i]!.params, values: [members[i]!.value!] } : null,
      pareto_front: i >= 0 ? [i] : [],
      continued_as_new: 0,
      warm_start_trials: 0,
      trial_steps_run: stepsRun,
      trial_steps_saved: 0,
      error,
    };
  };
  setHandler(sweepProgressQuery, progress);

  const trialInput = (n: number, params: PbtMemberState['params']) => trialInputOf(input, n, params, workflowInfo().workflowId);

  try {
    await quick.recordSweep({ input });
    const initial = await quick.suggestTrials({ space: config.search_space, strategy: 'random', directions: [direction], seed: config.seed, history: [], numbers: Array.from({ length: pbt.population_size }, (_, i) => i) });
    members = initial.suggestions.map((s) => ({ params: s.params, value: null, checkpoint: null }));
    const runIds = await Promise.all(members.map((m, n) => quick.startTrial(trialInput(n, m.params)).then((r) => r.runId)));
    let next: PbtNext[] = members.map((m) => ({ params: m.params, exploit_from: null }));
    for (round = 0; round < rounds; round++) {
      const endStep = Math.min((round + 1) * pbt.interval_steps, config.base_config.max_steps);
      const results = await Promise.all(
        next.map((order, m) =>
          executeChild(pbtMemberRoundWorkflow, {
            workflowId: pbtMemberWorkflowId(sweepId, m, round),
            args: [{ sweep_id: sweepId, member: m, config, organization_id: input.organization_id, requested_by: input.requested_by, heartbeat_timeout: input.runtime.heartbeat_timeout, order: { round, end_step: endStep, ...order }, run_id: runIds[m]! }],
            parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
          }),
        ),
      );
      members = results.map((r, m) => ({ params: next[m]!.params, value: r.value, checkpoint: r.checkpoint }));
      stepsRun += results.reduce((n, r) => n + r.step - round * pbt.interval_steps, 0);
      results.forEach((r, m) => {
        memberSteps[m] = r.step;
        memberGpuSeconds[m] = (memberGpuSeconds[m] ?? 0) + r.gpu_seconds;
      });
      if (round + 1 < rounds) next = exploitExplore(members, direction, pbt, config.search_space, seededRandom(config.seed * 7919 + round + 1));
    }
    status = 'completed';
    const best = bestIndex(direction, members.map((m) => m.value));
    await Promise.all(
      members.map((m, n) =>
        quick.finishTrial({ sweepId, n, state: m.value === null ? 'failed' : 'completed', values: m.value === null ? null : [m.value], metrics: m.value === null ? {} : { [objectivesOf(config)[0]!.metric]: m.value }, intermediate: [], steps: memberSteps[n] ?? 0, gpuSeconds: memberGpuSeconds[n] ?? 0, reason: null }),
      ),
    );
    await quick.finishSweep({ sweepId, status: 'completed', bestTrial: best >= 0 ? best : null });
    return { status: 'completed', progress: progress() };
  } catch (err) {
    error = err instanceof Error ? err.message : String(err);
    status = isCancellation(err) ? 'cancelled' : 'failed';
    await CancellationScope.nonCancellable(() => quick.finishSweep({ sweepId, status: isCancellation(err) ? 'cancelled' : 'failed', bestTrial: null }));
    throw err;
  }
}

/** One round of one member: train to the round's end step, then record the round in the lineage. */
export async function pbtMemberRoundWorkflow(input: PbtMemberRoundInput & { run_id: string }): Promise<PbtRoundResult> {
  const acts = proxyActivities<Activities>({
    taskQueue: jobsTaskQueueOf(workflowInfo().taskQueue),
    startToCloseTimeout: '7 days',
    heartbeatTimeout: input.heartbeat_timeout,
    retry: { maximumAttempts: 10, initialInterval: '2 seconds', nonRetryableErrorTypes: [FailureType.BadInput, FailureType.NotFound] },
  });
  const result = await acts.trainPbtRound({ input, runId: input.run_id });
  await quick.recordPbtRound({ sweepId: input.sweep_id, member: input.member, order: input.order, result });
  return result;
}

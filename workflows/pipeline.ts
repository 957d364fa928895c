// fineTunePipelineWorkflow: preprocess -> train (checkpoint-watch beside it) -> eval -> validate/quantize ->
// register -> promote (waits for a human decision). Orchestration only: every side effect is an activity.
import {
  ActivityFailure,
  ActivityCancellationType,
  ApplicationFailure,
  CancellationScope,
  condition,
  executeChild,
  isCancellation,
  ParentClosePolicy,
  proxyActivities,
  setHandler,
  upsertSearchAttributes,
  uuid4,
  workflowInfo,
  log,
  patched,
} from '@temporalio/workflow';
import type { createActivities } from '../activities/index.js';
import type { RegisteredVersion } from '../activities/registry.js';
import {
  PipelineWorkflowInputSchema,
  PromotionDecisionSchema,
  checkpointWatchWorkflowId,
  jobsTaskQueueOf,
  pipelineIdFromWorkflowId,
  type PipelineProgress,
  type PipelineResult,
  type PipelineStage,
  type PipelineWorkflowInput,
  type PromotionDecision,
} from '../contracts/pipeline.js';
import { STAGE_KEY } from '../contracts/search-attributes.js';
import { pipelineProgressQuery, promotionDecisionUpdate, trainingProgressSignal } from '../contracts/pipeline-messages.js';
import { registrationActivities, registrationFailure } from './model-registration.js';
import { checkpointWatchWorkflow } from './checkpoint-watch.js';
import { notifyServing } from './reload.js';
import type { ReloadNotice } from '../activities/reload.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';

/** The register stage copies its files in an activity of their own (workflow patch; see registerVersion). */
const REGISTRATION_ACTIVITY_PATCH = 'register-copy-activity';
/** An inconclusive eval gate holds the version for a human even with auto_approve (see awaitPromotion). */
const GATE_INCONCLUSIVE_HOLD_PATCH = 'gate-inconclusive-hold';
/** The checkpoint watcher is a child workflow on timers, not a slot-holding activity (see trainWithCheckpointWatch). */
const CHECKPOINT_WATCH_WORKFLOW_PATCH = 'checkpoint-watch-workflow';

type Activities = ReturnType<typeof createActivities>;

const quick = proxyActivities<Activities>({
  startToCloseTimeout: '2 minutes',
  retry: { maximumAttempts: 10, nonRetryableErrorTypes: [FailureType.BadInput, FailureType.NotFound] },
});

/** Job activities run on the job task queue (its own slots, scheduler.max_concurrent_jobs); the watcher beside them does not. */
function longRunning(heartbeatTimeout: string, taskQueue?: string) {
  return proxyActivities<Activities>({
    ...(taskQueue ? { taskQueue } : {}),
    startToCloseTimeout: '7 days',
    heartbeatTimeout,
    // Without this the SDK sends TRY_CANCEL and forgets the job; we wait until the job is stopped.
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: { maximumAttempts: 10, initialInterval: '2 seconds', nonRetryableErrorTypes: [FailureType.BadInput, FailureType.BadJobSpec, FailureType.JobRestartLimit, FailureType.ValidationFailed] },
  });
}

export async function fineTunePipelineWorkflow(rawInput: PipelineWorkflowInput): Promise<PipelineResult> {
  const parsed = PipelineWorkflowInputSchema.safeParse(rawInput);
  if (!parsed.success) throw nonRetryable(FailureType.BadInput, `invalid pipeline input: ${parsed.error.message}`);
  const input = parsed.data;
  const pipelineId = pipelineIdFromWorkflowId(workflowInfo().workflowId);
  const jobs = longRunning(input.runtime.heartbeat_timeout, jobsTaskQueueOf(workflowInfo().taskQueue));
  const watcher = longRunning(input.runtime.heartbeat_timeout);
  const progress = initialProgress(pipelineId, input);
  let decision: PromotionDecision | null = null;

  setHandler(pipelineProgressQuery, () => progress);
  setHandler(trainingProgressSignal, (p) => {
    progress.step = Math.max(progress.step, p.step);
    progress.last_checkpoint = p.last_checkpoint;
    progress.latest_metrics = { ...progress.latest_metrics, ...p.metrics };
    if (p.recoveries && p.recoveries.length >= progress.recoveries.length) progress.recoveries = p.recoveries;
    if (p.waiting !== undefined) progress.waiting = p.waiting;
    if (p.queue !== undefined) progress.queue = p.queue;
    if (p.preemptions && p.preemptions.length >= progress.preemptions.length) progress.preemptions = p.preemptions;
  });
  setHandler(
    promotionDecisionUpdate,
    (d) => {
      decision = d;
      progress.decision = d;
      return progress;
    },
    {
      validator: (d: PromotionDecision) => {
        const checked = PromotionDecisionSchema.safeParse(d);
        if (!checked.success) throw new Error(`invalid decision: ${checked.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
        if (!progress.awaiting_approval) throw new Error(`pipeline ${pipelineId} is not waiting for approval (stage: ${progress.stage})`);
        if (decision) throw new Error(`pipeline ${pipelineId} already has a decision: ${decision.decision} by ${decision.approver}`);
      },
    },
  );

  const enter = async (stage: PipelineStage, outcome?: string): Promise<void> => {
    progress.stage = stage;
    upsertSearchAttributes([{ key: STAGE_KEY, value: stage }]);
    await quick.setPipelineStage({ pipelineId, stage, outcome });
  };

  try {
    await quick.recordPipeline({ pipelineId, input });
    await enter('preprocess');
    const dataset = await quick.prepareDataset({ pipelineId, input });
    progress.dataset = { id: dataset.id, name: dataset.name, version: dataset.version };

    const { runId } = await quick.createTrackingRun({ pipelineId, input, dataset });
    progress.run_id = runId;

    await enter('train');
    const train = await trainWithCheckpointWatch(jobs, watcher, { pipelineId, runId, input, dataset }, progress);
    progress.waiting = null;
    progress.queue = null;

    await enter('eval');
    const evalReport = await jobs.evaluateModels({ pipelineId, runId, input, dataset, adapterPath: train.adapter_path });
    progress.eval = { base: evalReport.base, tuned: evalReport.tuned, production: evalReport.production, gate: evalReport.gate };

    await enter('validate');
    const merged = await jobs.mergeAdapter({ pipelineId, input, dataset, adapterPath: train.adapter_path });
    const candle = await jobs.validateAndQuantize({ pipelineId, input, merge: merged });

    await enter('register');
    const registered = await registerVersion({ pipelineId, runId, input, dataset, train, evalReport, merge: merged, candle });
    progress.model_version = { name: input.model_name, version: registered.version, stage: registered.stage };
    await quick.finishRun({ runId, status: 'completed' });

    if (registered.stage !== 'staging') {
      await enter('completed', 'gate_failed');
      return { outcome: 'gate_failed', reason: registered.gateReason, progress, artifacts: registered.artifacts, warnings: [] };
    }

    await enter('promote');
    const outcome = await awaitPromotion(input, progress, () => decision);
    const warnings: string[] = [];
    if (outcome.decision?.decision === 'approve') {
      const promoted = await quick.promoteModelVersion({ organizationId: input.organization_id, modelName: input.model_name, version: registered.version, decision: outcome.decision });
      progress.model_version = { name: input.model_name, version: registered.version, stage: 'production' };
      // Only after the promotion (and the archive of the previous version) committed: serving reloads what is in production.
      if (promoted.reloadHook) {
        const notice: ReloadNotice = {
          organizationId: input.organization_id,
          pipelineId,
          actor: `pipeline:${pipelineId}`,
          rollback: false,
          modelName: input.model_name,
          version: registered.version,
          archived: promoted.archived,
          artifacts: registered.artifacts,
          promotedAt: promoted.promotedAt,
          eventId: uuid4(),
        };
        const failed = await notifyServing(notice, input.runtime.reload_deadline, (reload) => (progress.reload = reload));
        if (failed) warnings.push(failed);
      }
    }
    progress.awaiting_approval = false;
    await enter('completed', outcome.kind);
    return { outcome: outcome.kind, reason: outcome.reason, progress, artifacts: registered.artifacts, warnings };
  } catch (err) {
    progress.error = failureMessage(err);
    if (!isCancellation(err)) {
      await CancellationScope.nonCancellable(async () => {
        if (progress.run_id) await quick.finishRun({ runId: progress.run_id, status: 'failed' });
        await enter('failed', 'failed');
      });
    } else {
      await CancellationScope.nonCancellable(async () => {
        if (progress.run_id) await quick.finishRun({ runId: progress.run_id, status: 'cancelled' });
        await enter('failed', 'cancelled');
      });
    }
    throw err;
  }
}

type RegisterArgs = Parameters<Activities['prepareModelRegistration']>[0];

/**
 * The register stage: the pending version first (a quick activity), then the copy of its files as an activity of
 * its own with heartbeats and a deadline sized to their bytes. Pipelines that started before this ran both in one
 * quick activity, and replay that way.
 */
async function registerVersion(args: RegisterArgs): Promise<RegisteredVersion> {
  if (!patched(REGISTRATION_ACTIVITY_PATCH)) return quick.registerModelVersion(args);
  const prepared = await quick.prepareModelRegistration(args);
  const registered = { version: prepared.version, stage: prepared.stage, gateReason: prepared.gateReason };
  if (!prepared.registration) {
    if (prepared.status === 'failed_registration') throw nonRetryable(FailureType.BadArtifacts, prepared.message ?? `model version ${prepared.version} failed registration`);
    return { ...registered, artifacts: prepared.artifacts };
  }
  try {
    const done = await registrationActivities(prepared.registration.total_bytes).publishModelVersion(prepared.registration);
    if (done.status !== 'ready') throw nonRetryable(FailureType.BadArtifacts, done.message ?? `model version ${prepared.version} was not registered`);
    return { ...registered, artifacts: done.artifacts as RegisteredVersion['artifacts'] };
  } catch (err) {
    if (err instanceof ApplicationFailure) throw err;
    // Retries spent, or cancelled: the version says why it has no files, and nothing partial is kept.
    const message = isCancellation(err) ? 'the registration was cancelled' : registrationFailure(err);
    await CancellationScope.nonCancellable(() => quick.failModelRegistration({ input: prepared.registration!, message }));
    throw err;
  }
}

/** What failed, in the activity's own words: an ActivityFailure only says "Activity task failed". */
function failureMessage(err: unknown): string {
  let e = err;
  while (e instanceof ActivityFailure && e.cause) e = e.cause;
  return e instanceof Error ? e.message : String(e);
}

type TrainArgs = Parameters<Activities['trainModel']>[0];

/**
 * Train, with the checkpoint watcher running beside it until training ends; then one final sweep. The watcher is
 * a child workflow that waits on timers between short passes, so it holds no activity slot while training runs;
 * pipelines that started before it was one watch with a long activity on the control queue, and replay that way.
 */
async function trainWithCheckpointWatch(jobs: ReturnType<typeof longRunning>, watcher: ReturnType<typeof longRunning>, args: TrainArgs, progress: PipelineProgress) {
  const watchScope = new CancellationScope();
  const watch = { pipelineId: args.pipelineId, runId: args.runId, organizationId: args.input.organization_id };
  const watching = watchScope
    .run<unknown>(() =>
      patched(CHECKPOINT_WATCH_WORKFLOW_PATCH)
        ? executeChild(checkpointWatchWorkflow, { workflowId: checkpointWatchWorkflowId(args.runId), args: [watch], parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL })
        : watcher.watchCheckpoints({ ...watch, once: false }),
    )
    .catch((err: unknown) => {
      if (!isCancellation(err)) log.warn('checkpoint watcher failed; the final sweep records what it missed', { error: String(err) });
    });
  try {
    const result = await jobs.trainModel(args);
    progress.step = result.steps;
    progress.latest_metrics = { ...progress.latest_metrics, ...result.final_metrics };
    return result;
  } finally {
    watchScope.cancel();
    await watching;
    const swept = await watcher.watchCheckpoints({ pipelineId: args.pipelineId, runId: args.runId, organizationId: args.input.organization_id, once: true });
    progress.checkpoints = swept.checkpoints;
  }
}

async function awaitPromotion(
  input: PipelineWorkflowInput,
  progress: PipelineProgress,
  decided: () => PromotionDecision | null,
): Promise<{ kind: PipelineResult['outcome']; reason: string; decision: PromotionDecision | null }> {
  // An inconclusive gate holds the version for a human, whatever the pipeline asked.
  // (Patched: a pipeline that reached this point before inconclusive gates existed replays as it ran.)
  const held = progress.eval?.gate?.verdict === 'inconclusive' && patched(GATE_INCONCLUSIVE_HOLD_PATCH);
  if (input.promotion.auto_approve && !held) {
    const d: PromotionDecision = { decision: 'approve', approver: `auto:${input.requested_by}`, reason: 'auto_approve set on the pipeline' };
    progress.decision = d;
    return { kind: 'promoted', reason: d.reason, decision: d };
  }
  progress.awaiting_approval = true;
  const timeout = input.promotion.approval_timeout ?? input.runtime.approval_timeout;
  const gotDecision = await condition(() => decided() !== null, timeout);
  progress.awaiting_approval = false;
  const d = decided();
  if (!gotDecision || !d) return { kind: 'approval_timed_out', reason: `no decision within ${timeout}; the version stays in staging`, decision: null };
  if (d.decision === 'reject') return { kind: 'rejected', reason: `rejected by ${d.approver}: ${d.reason}`, decision: d };
  return { kind: 'promoted', reason: `approved by ${d.approver}: ${d.reason}`, decision: d };
}

function initialProgress(pipelineId: string, input: PipelineWorkflowInput): PipelineProgress {
  return {
    pipeline_id: pipelineId,
    stage: 'queued',
    dataset: null,
    run_id: null,
    step: 0,
    max_steps: input.hyperparameters.max_steps,
    last_checkpoint: null,
    latest_metrics: {},
    checkpoints: [],
    recoveries: [],
    waiting: null,
    queue: null,
    preemptions: [],
    eval: null,
    model_version: null,
    awaiting_approval: false,
    decision: null,
    error: null,
    reload: null,
  };
}

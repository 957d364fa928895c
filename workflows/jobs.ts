// submittedJobWorkflow: one submitted job (POST /v1/jobs): validating (what may have changed since submit), its
// tracking run, then the job through the executor on the job task queue, stopped when cancelled or when
// schedule.max_duration passes (SIGTERM: the trainer writes an emergency checkpoint first). A pause stops it the
// same way and the workflow waits, durably, for a resume: each resume runs a new segment, which continues from the
// newest checkpoint or the one the resume named. The catalogue row follows every step; a job that ended stays ended.
import {
  ActivityCancellationType,
  ActivityFailure,
  CancellationScope,
  condition,
  isCancellation,
  patched,
  proxyActivities,
  setHandler,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { createActivities } from '../activities/index.js';
import { jobsTaskQueueOf } from '../contracts/pipeline.js';
import { pauseJobSignal, resumeJobSignal, type CheckpointRef, type JobRunOutcome, type JobStatus, type JobWorkflowInput } from '../contracts/jobs.js';
import { STAGE_KEY } from '../contracts/search-attributes.js';
import { trainingProgressSignal } from '../contracts/pipeline-messages.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';

type Activities = ReturnType<typeof createActivities>;

const quick = proxyActivities<Activities>({
  startToCloseTimeout: '2 minutes',
  retry: { maximumAttempts: 10, nonRetryableErrorTypes: [FailureType.BadInput, FailureType.NotFound] },
});

/** Workflows started before validating, segments and pause existed go on as they began (no validating, one run). */
const LIFECYCLE_PATCH = 'job-lifecycle-segments';

/** Ends the job when max_duration passes: a failure of its own type, never retried. */
class MaxDurationExceeded extends Error {}

export async function submittedJobWorkflow(input: JobWorkflowInput): Promise<JobRunOutcome> {
  const jobs = proxyActivities<Activities>({
    taskQueue: jobsTaskQueueOf(workflowInfo().taskQueue),
    startToCloseTimeout: '7 days',
    heartbeatTimeout: input.runtime.heartbeat_timeout,
    // Wait until the job is stopped, not only asked to stop.
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: { maximumAttempts: 10, initialInterval: '2 seconds', nonRetryableErrorTypes: [FailureType.BadInput, FailureType.BadJobSpec, FailureType.JobRestartLimit, FailureType.ImagePullFailed, FailureType.JobFailed] },
  });
  // Recipe jobs signal their training progress; the last step is kept for the result.
  let step: number | null = null;
  setHandler(trainingProgressSignal, (p) => {
    step = Math.max(step ?? 0, p.step);
  });
  const status = async (s: JobStatus, message: string | null = null): Promise<void> => {
    upsertSearchAttributes([{ key: STAGE_KEY, value: s }]);
    await quick.setSubmittedJobStatus({ jobId: input.job_id, status: s, message });
  };

  // Pause and resume: a pause cancels the running segment's scope (the job checkpoints and stops); a resume is
  // taken only while paused.
  let pauseRequested = false;
  let paused = false;
  let resumeAsked: { from_checkpoint: CheckpointRef | null } | null = null;
  let segmentScope: CancellationScope | null = null;
  setHandler(pauseJobSignal, () => {
    if (paused) return;
    pauseRequested = true;
    segmentScope?.cancel();
  });
  setHandler(resumeJobSignal, (r) => {
    if (paused) resumeAsked = r;
  });
  /** Runs one segment; null when a pause stopped it (or came before it started). */
  const unlessPaused = async <T>(work: () => Promise<T>): Promise<T | null> => {
    if (pauseRequested) return null;
    const scope = new CancellationScope();
    segmentScope = scope;
    try {
      return await scope.run(work);
    } catch (err) {
      // A cancellation of the workflow itself (its root scope) is a cancel, not a pause.
      if (pauseRequested && isCancellation(err) && !CancellationScope.current().consideredCancelled) return null;
      throw err;
    } finally {
      segmentScope = null;
    }
  };
  // schedule.max_duration bounds the running time over all segments, not the time spent paused.
  let runLeftMs = input.spec.schedule.max_duration ? durationToMs(input.spec.schedule.max_duration) : null;

  let runId: string | null = null;
  const succeed = async (outcome: JobRunOutcome): Promise<JobRunOutcome> => {
    await quick.finishJobRun({ runId: runId!, status: 'completed' });
    await status('succeeded', outcome.output_uri ? `output: ${outcome.output_uri}` : null);
    return { ...outcome, step: outcome.step ?? step };
  };
  try {
    if (!patched(LIFECYCLE_PATCH)) {
      ({ runId } = await quick.createJobRun({ input }));
      return await succeed(await withDeadline(input.spec.schedule.max_duration ?? null, runLeftMs, () => jobs.runSubmittedJob({ input, runId: runId! })));
    }
    await status('validating');
    await quick.validateSubmittedJob({ input });
    ({ runId } = await quick.createJobRun({ input }));
    let from: CheckpointRef | null = null;
    for (let segment = 1; ; ) {
      if (!pauseRequested) {
        const started = Date.now();
        const seg = await quick.startJobSegment({ input, runId, segment, from });
        if (segment > 1) await status('queued', from ? `resuming from checkpoint step ${from.step}` : 'resuming from its newest checkpoint');
        const outcome = await unlessPaused(() => withDeadline(input.spec.schedule.max_duration ?? null, runLeftMs, () => jobs.runSubmittedJob({ input, runId: runId!, segment: seg })));
        if (outcome !== null) return await succeed(outcome);
        if (runLeftMs !== null) runLeftMs = Math.max(0, runLeftMs - (Date.now() - started));
        segment++;
      }
      paused = true;
      resumeAsked = null;
      await status('paused', step === null ? 'paused on request' : `paused on request at step ${step}`);
      await condition(() => resumeAsked !== null);
      from = resumeAsked!.from_checkpoint;
      paused = false;
      pauseRequested = false;
    }
  } catch (err) {
    const cancelled = isCancellation(err) && !(err instanceof MaxDurationExceeded);
    await CancellationScope.nonCancellable(async () => {
      if (runId) await quick.finishJobRun({ runId, status: cancelled ? 'cancelled' : 'failed' });
      await status(cancelled ? 'cancelled' : 'failed', cancelled ? 'cancelled on request' : failureMessage(err));
    });
    if (err instanceof MaxDurationExceeded) throw nonRetryable(FailureType.MaxDurationExceeded, err.message);
    throw err;
  }
}

const UNIT_MS = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
/** A schedule duration ("90s", "30m", "48h", "2d": the contract's format) in milliseconds. */
function durationToMs(d: string): number {
  const m = /^(\d+)(s|m|h|d)$/.exec(d)!;
  return Number(m[1]) * UNIT_MS[m[2] as keyof typeof UNIT_MS];
}

/**
 * Runs `work` in a scope that is cancelled when `maxDuration` passes: the activity stops the job as on a cancel
 * (SIGTERM, an emergency checkpoint, then SIGKILL after the grace period), and the job fails saying so.
 */
async function withDeadline<T>(maxDuration: string | null, leftMs: number | null, work: () => Promise<T>): Promise<T> {
  if (maxDuration === null || leftMs === null) return work();
  const scope = new CancellationScope();
  let expired = false;
  const timer = CancellationScope.nonCancellable(() => sleep(leftMs)).then(() => {
    expired = true;
    scope.cancel();
  });
  void timer;
  try {
    return await scope.run(work);
  } catch (err) {
    if (expired && isCancellation(err)) throw new MaxDurationExceeded(`the job ran longer than schedule.max_duration (${maxDuration}) and was stopped`);
    throw err;
  }
}

/** What failed, in the activity's own words: an ActivityFailure only says "Activity task failed". */
function failureMessage(err: unknown): string {
  let e = err;
  while (e instanceof ActivityFailure && e.cause) e = e.cause;
  return e instanceof Error ? e.message : String(e);
}

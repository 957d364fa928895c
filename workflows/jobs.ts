// submittedJobWorkflow: one submitted job (POST /v1/jobs): its tracking run, then the job through the executor on
// the job task queue, stopped when cancelled or when schedule.max_duration passes (SIGTERM: the trainer writes an
// emergency checkpoint first). The catalogue row follows every step; a job that ended stays ended.
import {
  ActivityCancellationType,
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  isCancellation,
  proxyActivities,
  setHandler,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { createActivities } from '../activities/index.js';
import { jobsTaskQueueOf } from '../contracts/pipeline.js';
import type { JobRunOutcome, JobStatus, JobWorkflowInput } from '../contracts/jobs.js';
import { STAGE_KEY } from '../contracts/search-attributes.js';
import { trainingProgressSignal } from '../contracts/pipeline-messages.js';

type Activities = ReturnType<typeof createActivities>;

const quick = proxyActivities<Activities>({
  startToCloseTimeout: '2 minutes',
  retry: { maximumAttempts: 10, nonRetryableErrorTypes: ['BadInput', 'NotFound'] },
});

/** Ends the job when max_duration passes: a failure of its own type, never retried. */
class MaxDurationExceeded extends Error {}

export async function submittedJobWorkflow(input: JobWorkflowInput): Promise<JobRunOutcome> {
  const jobs = proxyActivities<Activities>({
    taskQueue: jobsTaskQueueOf(workflowInfo().taskQueue),
    startToCloseTimeout: '7 days',
    heartbeatTimeout: input.runtime.heartbeat_timeout,
    // Wait until the job is stopped, not only asked to stop.
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: { maximumAttempts: 10, initialInterval: '2 seconds', nonRetryableErrorTypes: ['BadInput', 'BadJobSpec', 'JobRestartLimit', 'ImagePullFailed', 'JobFailed'] },
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

  let runId: string | null = null;
  try {
    ({ runId } = await quick.createJobRun({ input }));
    const outcome = await withDeadline(input.spec.schedule.max_duration ?? null, () => jobs.runSubmittedJob({ input, runId: runId! }));
    await quick.finishJobRun({ runId, status: 'completed' });
    await status('succeeded', outcome.output_uri ? `output: ${outcome.output_uri}` : null);
    return { ...outcome, step: outcome.step ?? step };
  } catch (err) {
    const cancelled = isCancellation(err) && !(err instanceof MaxDurationExceeded);
    await CancellationScope.nonCancellable(async () => {
      if (runId) await quick.finishJobRun({ runId, status: cancelled ? 'cancelled' : 'failed' });
      await status(cancelled ? 'cancelled' : 'failed', cancelled ? 'cancelled on request' : failureMessage(err));
    });
    if (err instanceof MaxDurationExceeded) throw ApplicationFailure.nonRetryable(err.message, 'MaxDurationExceeded');
    throw err;
  }
}

/**
 * Runs `work` in a scope that is cancelled when `maxDuration` passes: the activity stops the job as on a cancel
 * (SIGTERM, an emergency checkpoint, then SIGKILL after the grace period), and the job fails saying so.
 */
async function withDeadline<T>(maxDuration: string | null, work: () => Promise<T>): Promise<T> {
  if (maxDuration === null) return work();
  const scope = new CancellationScope();
  let expired = false;
  const timer = CancellationScope.nonCancellable(() => sleep(maxDuration)).then(() => {
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

// datasetPreparationWorkflow: one per derived dataset version (POST /v1/datasets/{id}/derive, workflow id
// `dataset-preparation:<new version id>`). Its one job activity runs prepare-dataset and records the version; when
// it fails for good (bad input: the issues; retries spent; cancelled) the preparation job says why.
import { ActivityCancellationType, ActivityFailure, CancellationScope, isCancellation, proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { createActivities } from '../activities/index.js';
import type { DatasetPreparationInput, DatasetPreparationResult } from '../contracts/data-prep.js';
import { jobsTaskQueueOf } from '../contracts/pipeline.js';
import { FailureType } from '../contracts/failures.js';

type Activities = ReturnType<typeof createActivities>;

const quick = proxyActivities<Activities>({ startToCloseTimeout: '2 minutes', retry: { maximumAttempts: 10 } });

/** Its own words: an ActivityFailure only says "Activity task failed". */
function failureMessage(err: unknown): string {
  let e = err;
  while (e instanceof ActivityFailure && e.cause) e = e.cause;
  return e instanceof Error ? e.message : String(e);
}

export async function datasetPreparationWorkflow(input: DatasetPreparationInput): Promise<DatasetPreparationResult> {
  const job = proxyActivities<Activities>({
    taskQueue: jobsTaskQueueOf(workflowInfo().taskQueue),
    startToCloseTimeout: '1 day',
    // Also how soon a cancel reaches the activity: Temporal delivers it with a heartbeat, sent at most every 80% of this.
    heartbeatTimeout: input.heartbeat_timeout ?? '2 minutes',
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: { maximumAttempts: 5, initialInterval: '2 seconds', nonRetryableErrorTypes: [FailureType.BadInput, FailureType.BadJobSpec, FailureType.NotFound, FailureType.NotConfigured, FailureType.JobRestartLimit, FailureType.ImagePullFailed] },
  });
  try {
    return await (input.upload ? job.prepareUploadedDataset(input) : job.prepareDerivedDataset(input));
  } catch (err) {
    const message = isCancellation(err) ? 'the preparation was cancelled' : failureMessage(err);
    await CancellationScope.nonCancellable(() => quick.failDatasetPreparation({ input, message, cancelled: isCancellation(err) }));
    // The activity's failure (its type and message) is the workflow's: the preparation job above says it too.
    throw err;
  }
}

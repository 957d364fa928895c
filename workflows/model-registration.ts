// modelRegistrationWorkflow: one per registered version whose files are copied (started by the API, workflow id
// `model-registration:<version id>`). It runs the copy as one activity with heartbeats and a deadline sized to the
// files' bytes; when the copy cannot finish (bad sources, retries spent, cancelled) the version ends
// failed_registration with the reason and nothing partial is kept.
import { ActivityFailure, CancellationScope, isCancellation, proxyActivities } from '@temporalio/workflow';
import type { createActivities } from '../activities/index.js';
import {
  REGISTRATION_HEARTBEAT_TIMEOUT,
  registrationTimeoutSeconds,
  type ModelRegistrationInput,
  type ModelRegistrationResult,
} from '../contracts/model-registration.js';
import { FailureType } from '../contracts/failures.js';

type Activities = ReturnType<typeof createActivities>;

const quick = proxyActivities<Activities>({ startToCloseTimeout: '2 minutes', retry: { maximumAttempts: 10 } });

/** The copy activity, its deadline sized to the bytes it copies. */
export function registrationActivities(totalBytes: number) {
  return proxyActivities<Activities>({
    startToCloseTimeout: registrationTimeoutSeconds(totalBytes) * 1000,
    heartbeatTimeout: REGISTRATION_HEARTBEAT_TIMEOUT,
    retry: { maximumAttempts: 5, initialInterval: '2 seconds', nonRetryableErrorTypes: [FailureType.BadArtifacts] },
  });
}

/** What failed, in the activity's own words: an ActivityFailure only says "Activity task failed". */
export function registrationFailure(err: unknown): string {
  let e = err;
  while (e instanceof ActivityFailure && e.cause) e = e.cause;
  return e instanceof Error ? e.message : String(e);
}

export async function modelRegistrationWorkflow(input: ModelRegistrationInput): Promise<ModelRegistrationResult> {
  try {
    return await registrationActivities(input.total_bytes).publishModelVersion(input);
  } catch (err) {
    const message = isCancellation(err) ? 'the registration was cancelled' : registrationFailure(err);
    const failed = await CancellationScope.nonCancellable(() => quick.failModelRegistration({ input, message }));
    if (isCancellation(err)) throw err;
    // The failure is the version's state (failed_registration with its message), not this workflow's.
    return failed;
  }
}

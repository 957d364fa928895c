// Stopping a job: on a real cancellation of the activity driving it, or from outside (a pruned trial), and
// ending its secrets once it has ended.
import { CancelledFailure } from '@temporalio/common';
import { durationMs } from '../lib/config.js';
import type { JobActivity } from './activity.js';
import { currentAttempt } from './attempts.js';
import type { JobDeps } from './deps.js';
import type { JobDefinition } from './definition.js';
import type { JobRequest } from './executor/types.js';

/** A worker shutdown or heartbeat timeout leaves the job running for the next attempt of the activity. */
export function leftRunning(activity: JobActivity, err: unknown): boolean {
  return err instanceof CancelledFailure && !activity.cancelRequested();
}

/** A cancelled workflow stops its job; a worker shutdown or timeout leaves it running for the next attempt. */
export async function stopOnRealCancel(deps: JobDeps, activity: JobActivity, request: JobRequest, err: unknown): Promise<void> {
  if (!(err instanceof CancelledFailure)) return;
  if (!activity.cancelRequested()) return;
  deps.log.warn('cancelled: stopping job', { job: request.name });
  await stopJobKeepingHeartbeat(deps, request, activity.heartbeat);
}

/** Stops a job within the configured grace period, heartbeating while it waits (a long grace outlasts a heartbeat timeout). */
export async function stopJobKeepingHeartbeat(deps: JobDeps, request: JobRequest, heartbeat: JobActivity['heartbeat']): Promise<void> {
  const beat = setInterval(() => {
    try {
      heartbeat({ job: request.name, phase: 'stopping' });
    } catch {
      // not inside an activity (a test) or already completed
    }
  }, 5000);
  try {
    await deps.executor.stop(request, durationMs(deps.config.scheduler.preemption.grace_period) / 1000);
  } finally {
    clearInterval(beat);
  }
}

/** Revokes an ended job's secrets; a failure to do so leaves them to their lease rather than fail the activity. */
export async function endJobSecrets(deps: JobDeps, job: JobDefinition): Promise<void> {
  await deps.jobSecrets.revoke?.(job).catch((err: unknown) => deps.log.warn('job secrets not revoked: they expire with their lease', { job: job.name, err: String(err) }));
}

/** Stops a job from outside the run loop (a pruned trial) and revokes its secrets: it has ended. */
export async function stopJob(deps: JobDeps, def: JobDefinition, heartbeat: JobActivity['heartbeat']): Promise<void> {
  await stopJobKeepingHeartbeat(deps, await currentAttempt(deps, def), heartbeat);
  await endJobSecrets(deps, def);
}

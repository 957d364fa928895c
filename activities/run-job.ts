// The run loop (jobs/run-loop.ts) driven from a Temporal activity: its heartbeats, its cancellable sleep and its
// cancellation details are the activity's own.
import { Context } from '@temporalio/activity';
import type { JobActivity, JobHeartbeat } from '../jobs/activity.js';
import type { JobOutcome } from '../jobs/attempts.js';
import type { JobDefinition } from '../jobs/definition.js';
import type { JobDeps } from '../jobs/deps.js';
import { runJob, type RunJobOptions } from '../jobs/run-loop.js';
import { stopJob as stopJobFromOutside } from '../jobs/stop.js';

/** The current activity as the run loop sees it. */
export function temporalJobActivity(): JobActivity {
  const ctx = Context.current();
  return {
    prior: ctx.info.heartbeatDetails as JobHeartbeat | undefined,
    attempt: ctx.info.attempt,
    heartbeat: (details) => ctx.heartbeat(details),
    sleep: (ms) => ctx.sleep(ms),
    cancelRequested: () => ctx.cancellationDetails?.cancelRequested ?? false,
  };
}

/**
 * Drives a job until it exits 0, then parses its result.json with the given schema, heartbeating the activity
 * this runs in (a retried activity re-attaches to the job its last heartbeat names).
 */
export async function runJobToCompletion<T>(deps: JobDeps, p: RunJobOptions<T>): Promise<JobOutcome<T>> {
  return runJob(deps, temporalJobActivity(), p);
}

/** Stops a job from outside its run loop (a pruned trial), heartbeating the activity if this runs in one. */
export async function stopJob(deps: JobDeps, def: JobDefinition): Promise<void> {
  await stopJobFromOutside(deps, def, (details) => Context.current().heartbeat(details));
}

// The reload hook whenever the production version changes (promotion.webhook_url). A pipeline's promotion calls
// notifyServing from its own workflow; a manual change (a stage change, the `production` alias, a rollback) starts
// productionReloadWorkflow from the API once the change committed. Either way Temporal holds the retry schedule.
import { ActivityFailure, isCancellation, proxyActivities, TimeoutFailure } from '@temporalio/workflow';
import type { createActivities } from '../activities/index.js';
import type { ReloadNotice } from '../activities/reload.js';
import type { ReloadStatus } from '../contracts/pipeline.js';
import { FailureType } from '../contracts/failures.js';

type Activities = ReturnType<typeof createActivities>;

const quick = proxyActivities<Activities>({
  startToCloseTimeout: '2 minutes',
  retry: { maximumAttempts: 10, nonRetryableErrorTypes: [FailureType.BadInput, FailureType.NotFound] },
});

/** A manual change of the production version: the hook, retried until delivered or the deadline passes. */
export async function productionReloadWorkflow(input: { notice: ReloadNotice; deadline: string }): Promise<ReloadStatus> {
  let status: ReloadStatus | null = null;
  await notifyServing(input.notice, input.deadline, (s) => (status = s));
  return status!;
}

/**
 * Calls the reload hook until it answers 2xx or the deadline passes. Temporal holds the retry schedule (a worker
 * restart between attempts loses nothing). A hook that never answers does not undo the promotion: the pipeline
 * still completes "promoted", with its reload status failed, a warning on the result and a model.reload_failed event.
 * `onStatus` receives the status object once; it is updated in place as the hook is delivered or fails. Returns the
 * warning, or null once delivered.
 */
export async function notifyServing(notice: ReloadNotice, deadline: string, onStatus: (s: ReloadStatus) => void = () => undefined): Promise<string | null> {
  const reload: ReloadStatus = { status: 'pending', event_id: notice.eventId, deadline, attempts: null, http_status: null, error: null, at: null };
  onStatus(reload);
  // Backoff from 1s, doubling, capped at a tenth of the deadline (1s..5m) so a receiver back up is found soon.
  const cap = Math.min(300_000, Math.max(1000, Math.floor(durationMs(deadline) / 10)));
  const hook = proxyActivities<Activities>({
    scheduleToCloseTimeout: deadline,
    startToCloseTimeout: '1 minute',
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: cap, nonRetryableErrorTypes: [FailureType.NotConfigured] },
  });
  const outcome = { organizationId: notice.organizationId, pipelineId: notice.pipelineId, actor: notice.actor, modelName: notice.modelName, version: notice.version, hookEventId: notice.eventId };
  try {
    const r = await hook.notifyReload(notice);
    Object.assign(reload, { status: 'delivered', attempts: r.attempts, http_status: r.http_status, at: new Date().toISOString() });
    await quick.recordReloadOutcome({ ...outcome, status: 'delivered', attempts: r.attempts, error: null });
    return null;
  } catch (err) {
    if (isCancellation(err)) throw err;
    const error = reloadFailure(err, deadline);
    Object.assign(reload, { status: 'failed', error, at: new Date().toISOString() });
    await quick.recordReloadOutcome({ ...outcome, status: 'failed', attempts: null, error });
    return `reload hook failed: version ${notice.version} of ${notice.modelName} is in production but serving was not told: ${error}`;
  }
}

/**
 * The last attempt's own error, and that the deadline passed: when the next backoff would cross the deadline the
 * server ends the retries with the last failure and retry state TIMEOUT; when an attempt runs into it, the cause
 * is a TimeoutFailure carrying the last failure.
 */
function reloadFailure(err: unknown, deadline: string): string {
  let timedOut = err instanceof ActivityFailure && err.retryState === 'TIMEOUT';
  let e: unknown = err;
  while ((e instanceof ActivityFailure || e instanceof TimeoutFailure) && e.cause) {
    if (e instanceof TimeoutFailure) timedOut = true;
    e = e.cause;
  }
  if (e instanceof TimeoutFailure) timedOut = true;
  const last = e instanceof Error ? e.message : String(e);
  return timedOut ? `no 2xx within promotion.webhook_deadline ${deadline}; last: ${last}` : last;
}

/** "90s" | "10m" | "1h" | "500ms" -> milliseconds (the config's duration format). */
function durationMs(text: string): number {
  const m = /^(\d+)(ms|s|m|h|d)$/.exec(text);
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[(m?.[2] ?? 'ms') as 'ms'];
  return Number(m?.[1] ?? 0) * unit;
}

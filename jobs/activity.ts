// What the run loop needs of whatever drives it (a Temporal activity: activities/run-job.ts adapts its Context),
// so the loop itself knows nothing of Temporal's activity API: heartbeats, a cancellable sleep, and whether a
// cancellation was asked for.
import type { JobRecovery } from '../contracts/pipeline.js';

export interface JobHeartbeat {
  job: string;
  phase: 'pending' | 'running' | 'restarting' | 'finished';
  restarts: number;
  /** why a pending job is not running yet (no node fits, pulling its image, ...) */
  waiting?: string | null;
  /** every restart after a fault so far, oldest first */
  recoveries?: JobRecovery[];
  [key: string]: unknown;
}

export interface JobActivity {
  /** the heartbeat an earlier attempt of the activity left: a retried activity re-attaches to its job */
  prior: JobHeartbeat | undefined;
  /** the activity's attempt number, for the log */
  attempt: number;
  heartbeat(details: Record<string, unknown>): void;
  /** waits, and throws a CancelledFailure once the activity is cancelled (or its worker shuts down) */
  sleep(ms: number): Promise<void>;
  /** whether a cancellation was asked for (a cancelled workflow), not a worker shutdown or a heartbeat timeout */
  cancelRequested(): boolean;
}

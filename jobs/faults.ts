// What a job's exit means: the trainer's exit codes, and the restart with an adjusted spec after out-of-memory or
// divergence (recovery.ts chooses the adjustment).
import type { TrainJobSpec } from '../contracts/trainer-job.js';
import type { JobFiles } from '../lib/job-files.js';
import type { Logger } from '../lib/log.js';
import type { JobDefinition, JobRecoveryOptions } from './definition.js';
import { adjustSpecAfterFault, readFailure, writeRecoveries, type FaultKind, type RecoveryLog } from './recovery.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';

/** The trainer's exit codes (trainer/hanzo_ml/cli.py). */
export const TRAINER_EXIT = { badSpec: 2, outOfMemory: 3, diverged: 4, preempted: 143 } as const;

export function faultOfExit(code: number): FaultKind | null {
  if (code === TRAINER_EXIT.outOfMemory) return 'out_of_memory';
  if (code === TRAINER_EXIT.diverged) return 'diverged';
  return null;
}

export function isPullFailure(reason: string | null): boolean {
  return reason === 'ErrImagePull' || reason === 'ImagePullBackOff' || reason === 'InvalidImageName' || reason === 'ErrImageNeverPull';
}

/**
 * Records the adjusted spec for the next attempt after out-of-memory or divergence, or fails the activity for
 * good when the policy allows no more. Idempotent per failure: the record carries the failure's time and the
 * spec it chose, so an activity retried between writing the record and restarting re-applies that spec.
 */
export async function recoverFromFault(
  p: { job: JobDefinition; files: JobFiles; logical: JobFiles; recovery?: JobRecoveryOptions },
  kind: FaultKind,
  recoveries: RecoveryLog['recoveries'],
  log: Logger,
): Promise<void> {
  const failure = await readFailure(p.files);
  const last = recoveries.at(-1);
  if (failure && last?.failure_at === failure.at && last.spec_after) return;
  const failureType = kind === 'out_of_memory' ? FailureType.OutOfMemory : FailureType.TrainingDiverged;
  const what = failure?.message ?? (await p.files.logTail(5));
  const record = { kind, step: failure?.step ?? null, restart: recoveries.length + 1, at: new Date().toISOString() };
  if (!p.recovery) throw nonRetryable(failureType, `${p.job.name}: ${kind.replace(/_/g, ' ')}: ${what}`);
  const spec = ((await p.files.readEnvelope())?.spec ?? p.job.envelope.spec) as TrainJobSpec;
  const adjusted = adjustSpecAfterFault(spec, kind, p.recovery.policy, recoveries, failure?.micro_batch);
  if (!adjusted.ok) {
    log.error('job fault: giving up', { kind, reason: adjusted.reason });
    await p.recovery.onFault?.({ ...record, change: `none: ${adjusted.reason}` }, false, failure, p.files);
    throw nonRetryable(failureType, `${p.job.name}: ${adjusted.reason}: ${what}`);
  }
  log.warn('job fault: restarting with an adjusted spec', { kind, change: adjusted.change });
  const recovery = { ...record, change: adjusted.change };
  recoveries.push({ ...recovery, failure_at: failure?.at, spec_after: adjusted.spec });
  await writeRecoveries(p.logical, recoveries);
  await p.recovery.onFault?.(recovery, true, failure, p.files);
}

// Restart rules for a training job that stopped on a fault it can recover from (trainer/hanzo_ml/recovery.py):
// out of memory -> half the micro-batch, the same effective batch; divergence -> the learning rate times a
// factor. Each restart is a JobRecovery, kept in the object store beside the job (recoveries.json) so that a retried
// activity neither loses the count nor adjusts the spec twice for the same failure.
import { z } from 'zod';
import { JOB_FILES } from '../contracts/job-io.js';
import type { JobFiles } from '../lib/job-files.js';
import type { JobRecovery } from '../contracts/pipeline.js';
import type { RecoveryPolicy, TrainJobSpec } from '../contracts/trainer-job.js';

export type FaultKind = 'out_of_memory' | 'diverged';

/** failure.json: what the trainer wrote before exiting 3, 4 or 143. */
export interface TrainerFailure {
  kind: FaultKind | 'preempted';
  step: number;
  message: string;
  at: string;
  /** out of memory: the micro-batch that ran out (the trainer may size it above batch_size: hardware.micro_batch auto) */
  micro_batch?: number;
}

export interface RecoveryLog {
  /** failure_at and spec_after make a retried activity re-apply, not repeat, the adjustment for a failure */
  recoveries: (JobRecovery & { failure_at?: string; spec_after?: TrainJobSpec })[];
}

export type Adjustment = { ok: true; spec: TrainJobSpec; change: string } | { ok: false; reason: string };

/**
 * The spec for the next attempt, or why there is none. The micro-batch is halved (for an odd size, the largest
 * divisor below it) and the accumulation raised by the same factor, so every optimizer step still sees the
 * same examples in the same order and the run stays comparable. usedMicroBatch: the micro-batch that ran out of
 * memory, when the trainer chose it (hardware.micro_batch auto): the halving starts from it, not from batch_size.
 */
export function adjustSpecAfterFault(spec: TrainJobSpec, kind: FaultKind, policy: RecoveryPolicy, earlier: JobRecovery[], usedMicroBatch?: number): Adjustment {
  const done = earlier.filter((r) => r.kind === kind).length;
  const hp = spec.hyperparameters;
  if (kind === 'out_of_memory') {
    if (done >= policy.max_oom_retries) return { ok: false, reason: `out of memory after ${done} restarts with smaller micro-batches (recovery.max_oom_retries)` };
    const step = hp.batch_size * hp.gradient_accumulation_steps;
    const chosen = spec.hardware?.micro_batch !== 'recipe' && usedMicroBatch !== undefined && usedMicroBatch !== hp.batch_size && step % usedMicroBatch === 0;
    const batch = chosen ? largestDivisorBelow(usedMicroBatch, step) : largestDivisorBelow(hp.batch_size);
    if (batch === null) return { ok: false, reason: 'out of memory with a micro-batch of 1 example: nothing left to halve' };
    const accumulation = step / batch;
    return {
      ok: true,
      // micro_batch recipe: the halved batch_size is the micro-batch from now on (auto would size it again from
      // the same estimate that ran out of memory)
      spec: { ...spec, hyperparameters: { ...hp, batch_size: batch, gradient_accumulation_steps: accumulation }, hardware: { ...spec.hardware, micro_batch: 'recipe' } },
      change: `${chosen ? `micro-batch ${usedMicroBatch} (sized to the GPU) -> ${batch}, batch_size ${hp.batch_size}` : `batch_size ${hp.batch_size}`} -> ${batch}, gradient_accumulation_steps ${hp.gradient_accumulation_steps} -> ${accumulation}`,
    };
  }
  if (done >= policy.max_divergence_retries)
    return { ok: false, reason: policy.max_divergence_retries === 0 ? 'training diverged (recovery.max_divergence_retries is 0: stop and alert)' : `training diverged again after ${done} restarts at a lower learning rate` };
  const lr = hp.learning_rate * policy.divergence_lr_factor;
  return {
    ok: true,
    spec: { ...spec, hyperparameters: { ...hp, learning_rate: lr } },
    change: `learning_rate ${hp.learning_rate} -> ${lr}, from the last checkpoint before the divergence`,
  };
}

/** The largest d <= n/2 dividing n (and `of`, the step's items, when the micro-batch was the trainer's choice). */
function largestDivisorBelow(n: number, of: number = n): number | null {
  for (let d = Math.floor(n / 2); d >= 1; d--) if (n % d === 0 && of % d === 0) return d;
  return null;
}

export async function readFailure(files: JobFiles): Promise<TrainerFailure | null> {
  const f = await files.readJson(JOB_FILES.failure, z.custom<TrainerFailure>((v) => typeof v === 'object' && v !== null));
  return f && (f.kind === 'out_of_memory' || f.kind === 'diverged' || f.kind === 'preempted') ? f : null;
}

/** Kept under the logical job (not an attempt), so every attempt and every retried activity sees one count. */
export async function readRecoveries(files: JobFiles): Promise<RecoveryLog['recoveries']> {
  return (await files.readJson(JOB_FILES.recoveries, z.custom<RecoveryLog>((v) => typeof v === 'object' && v !== null && Array.isArray((v as RecoveryLog).recoveries))))?.recoveries ?? [];
}

export async function writeRecoveries(files: JobFiles, recoveries: RecoveryLog['recoveries']): Promise<void> {
  await files.writeJson(JOB_FILES.recoveries, { recoveries } satisfies RecoveryLog);
}

/** What the pipeline shows of the recoveries (without the bookkeeping fields). */
export function visibleRecoveries(recoveries: RecoveryLog['recoveries']): JobRecovery[] {
  return recoveries.map(({ failure_at: _f, spec_after: _s, ...r }) => r);
}

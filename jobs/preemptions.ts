// Preemption as the queue does it: Kueue evicts a running job to give its GPUs back to their owner or to a higher
// priority, the pods get SIGTERM (the trainer writes its emergency checkpoint), the Job goes back to its queue, and
// on re-admission the trainer resumes from the newest checkpoint in the object store. Not a failure and not a
// new attempt: the same Job, recorded here once per eviction (keyed by its time) in preemptions.json beside the
// logical job, so a retried activity neither loses nor repeats one.
import { z } from 'zod';
import type { JobDeps } from './deps.js';
import type { Eviction } from './executor/types.js';
import { JOB_FILES } from '../contracts/job-io.js';
import { JobPreemptionSchema, type JobPreemption } from '../contracts/pipeline.js';
import { TrainProgressSchema } from '../contracts/trainer-job.js';
import type { JobFiles } from '../lib/job-files.js';
import { emitEvent } from '../db/repo/outbox.js';

const PreemptionLogSchema = z.object({ preemptions: z.array(JobPreemptionSchema) });

export async function readPreemptions(logical: JobFiles): Promise<JobPreemption[]> {
  return (await logical.readJson(JOB_FILES.preemptions, PreemptionLogSchema))?.preemptions ?? [];
}

async function writePreemptions(logical: JobFiles, preemptions: JobPreemption[]): Promise<void> {
  await logical.writeJson(JOB_FILES.preemptions, { preemptions });
}

interface Ctx {
  deps: JobDeps;
  logical: JobFiles;
  attempt: JobFiles;
  job: { name: string; organizationId: string; runId?: string | null | undefined };
  /** seconds between checkpoints the job was asked for; an older newest checkpoint at eviction is stale */
  checkpointIntervalSeconds: number | null;
}

/** The newest complete checkpoint the job reported, and when its manifest says it was written. */
async function newestCheckpoint(attempt: JobFiles): Promise<{ name: string | null; step: number | null }> {
  const progress = await attempt.readJson(JOB_FILES.progress, TrainProgressSchema.partial());
  return { name: progress?.last_checkpoint ?? null, step: progress?.step ?? null };
}

/** Records an eviction the first time it is seen; returns the updated list. */
export async function recordEviction(c: Ctx, preemptions: JobPreemption[], eviction: Eviction, lastCheckpointAt: number | null): Promise<JobPreemption[]> {
  if (preemptions.some((p) => p.at === eviction.at)) return preemptions;
  const { step } = await newestCheckpoint(c.attempt);
  const stale = c.checkpointIntervalSeconds !== null && (lastCheckpointAt === null ? true : Date.parse(eviction.at) - lastCheckpointAt > c.checkpointIntervalSeconds * 1000);
  const record: JobPreemption = {
    job: c.job.name,
    at: eviction.at,
    reason: [eviction.reason, eviction.message].filter(Boolean).join(': '),
    step,
    resumed_at: null,
    checkpoint: null,
    lost_seconds: null,
    stale_checkpoint: stale,
  };
  const next = [...preemptions, record];
  await writePreemptions(c.logical, next);
  c.deps.log.warn('job preempted by its queue: it resumes from its newest checkpoint when re-admitted', { job: c.job.name, reason: record.reason, stale });
  await emitEvent(c.deps.db, c.job.organizationId, 'jobs', c.job.name, { event: 'job.preempted', run_id: c.job.runId ?? null, ...record });
  if (stale)
    await emitEvent(c.deps.db, c.job.organizationId, 'jobs', c.job.name, { event: 'checkpoint.stale', job: c.job.name, run_id: c.job.runId ?? null, reason: 'preempted with a checkpoint older than its interval' });
  return next;
}

/** The first poll that finds a preempted job running again: when, from which checkpoint, how long it was out. */
export async function recordResumed(c: Ctx, preemptions: JobPreemption[]): Promise<JobPreemption[]> {
  const last = preemptions.at(-1);
  if (!last || last.resumed_at !== null) return preemptions;
  const now = new Date();
  const { name } = await newestCheckpoint(c.attempt);
  const resumed: JobPreemption = { ...last, resumed_at: now.toISOString(), checkpoint: name, lost_seconds: Math.max(0, (now.getTime() - Date.parse(last.at)) / 1000) };
  const next = [...preemptions.slice(0, -1), resumed];
  await writePreemptions(c.logical, next);
  await emitEvent(c.deps.db, c.job.organizationId, 'jobs', c.job.name, { event: 'job.resumed', run_id: c.job.runId ?? null, ...resumed });
  return next;
}

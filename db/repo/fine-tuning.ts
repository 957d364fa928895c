// What a job created through /v1/fine_tuning/jobs was asked with, in OpenAI's terms; the job is a `jobs` row.
import { and, desc, eq, lt } from 'drizzle-orm';
import type { Db } from '../client.js';
import { fineTuningJobs, jobs } from '../schema/index.js';
import type { Tx } from './outbox.js';
import type { JobRow } from './jobs.js';

export type FineTuningRow = typeof fineTuningJobs.$inferSelect;

export async function insertFineTuningJob(tx: Tx, row: FineTuningRow): Promise<void> {
  await tx.insert(fineTuningJobs).values(row);
}

export interface FineTuningJobRows {
  job: JobRow;
  fineTuning: FineTuningRow | null;
}

/** One recipe job of the organization, with its fine-tuning fields when it was created through that API. */
export async function getFineTuningJob(db: Db, organizationId: string, id: string): Promise<FineTuningJobRows | null> {
  const [row] = await db
    .select()
    .from(jobs)
    .leftJoin(fineTuningJobs, eq(fineTuningJobs.jobId, jobs.id))
    .where(and(eq(jobs.organizationId, organizationId), eq(jobs.id, id), eq(jobs.kind, 'recipe')));
  return row ? { job: row.jobs, fineTuning: row.fine_tuning_jobs } : null;
}

/** The organization's recipe jobs, newest first, before the job `before` (a job id, OpenAI's `after` cursor). */
export async function listFineTuningJobs(db: Db, organizationId: string, f: { limit: number; beforeSeq?: number }): Promise<FineTuningJobRows[]> {
  const where = [eq(jobs.organizationId, organizationId), eq(jobs.kind, 'recipe')];
  if (f.beforeSeq !== undefined) where.push(lt(jobs.seq, f.beforeSeq));
  const rows = await db
    .select()
    .from(jobs)
    .leftJoin(fineTuningJobs, eq(fineTuningJobs.jobId, jobs.id))
    .where(and(...where))
    .orderBy(desc(jobs.seq))
    .limit(f.limit);
  return rows.map((r) => ({ job: r.jobs, fineTuning: r.fine_tuning_jobs }));
}

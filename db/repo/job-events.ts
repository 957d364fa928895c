// A submitted job's event log (db/schema/job-events.ts): appended by the job's workflow activities (status changes,
// training metrics, checkpoints) and read in seq order by GET /v1/jobs/{id}/events and its SSE stream.
import { and, asc, eq, gt, sql } from 'drizzle-orm';
import type { Db } from '../client.js';
import { jobEvents } from '../schema/index.js';
import type { Tx } from './outbox.js';

export type JobEventRow = typeof jobEvents.$inferSelect;
export type NewJobEvent = Omit<typeof jobEvents.$inferInsert, 'seq' | 'createdAt'>;

/**
 * Appends events, in the caller's transaction when given one. Appends to one job are serialized by a transaction
 * advisory lock on the job: a `seq` is drawn only after the previous append to that job committed, so a reader
 * never sees seq n+1 of a job while its seq n is still invisible, and resuming "after n" cannot skip anything.
 */
export async function appendJobEvents(db: Db | Tx, rows: NewJobEvent[]): Promise<void> {
  if (rows.length === 0) return;
  const jobIds = [...new Set(rows.map((r) => r.jobId))].sort();
  await db.transaction(async (tx) => {
    for (const id of jobIds) await tx.execute(sql`select pg_advisory_xact_lock(hashtext(${`job_events:${id}`}))`);
    await tx.insert(jobEvents).values(rows);
  });
}

/** A job's events after a cursor (a seq), ascending, at most `limit`. */
export async function listJobEvents(db: Db, organizationId: string, jobId: string, q: { after?: number | undefined; limit: number }): Promise<JobEventRow[]> {
  const where = [eq(jobEvents.organizationId, organizationId), eq(jobEvents.jobId, jobId)];
  if (q.after !== undefined) where.push(gt(jobEvents.seq, q.after));
  return db.select().from(jobEvents).where(and(...where)).orderBy(asc(jobEvents.seq)).limit(q.limit);
}

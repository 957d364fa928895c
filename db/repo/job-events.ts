// A submitted job's event log (db/schema/job-events.ts): appended by the job's workflow activities (status changes,
// training metrics, checkpoints) and read in seq order by GET /v1/jobs/{id}/events and its SSE stream.
import { and, asc, desc, eq, gt, sql } from 'drizzle-orm';
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

/** The newest seq of a job's events (0 when it has none): what a follower compares its cursor with. */
export async function lastJobEventSeq(db: Db, jobId: string): Promise<number> {
  const [row] = await db.select({ max: sql<string | null>`max(${jobEvents.seq})` }).from(jobEvents).where(eq(jobEvents.jobId, jobId));
  return Number(row?.max ?? 0);
}

/** A job's newest event of a type, or null: where a restarted recorder of progress picks up. */
export async function lastJobEventOfType(db: Db, jobId: string, type: JobEventRow['type']): Promise<JobEventRow | null> {
  const [row] = await db.select().from(jobEvents).where(and(eq(jobEvents.jobId, jobId), eq(jobEvents.type, type))).orderBy(desc(jobEvents.seq)).limit(1);
  return row ?? null;
}

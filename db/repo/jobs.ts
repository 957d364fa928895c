// The catalogue rows of submitted jobs (db/schema/jobs.ts): written by the API at submit and by the job's
// workflow as it moves through its lifecycle; each change of status emits its job.* event in the same transaction.
import { and, desc, eq, lt, sql } from 'drizzle-orm';
import type { Db } from '../client.js';
import { jobs } from '../schema/index.js';
import { emitEvent } from './outbox.js';

export type JobRow = typeof jobs.$inferSelect;
export type NewJob = Omit<typeof jobs.$inferInsert, 'seq' | 'createdAt' | 'updatedAt' | 'startedAt' | 'endedAt'>;

export async function insertJob(db: Db, row: NewJob): Promise<JobRow> {
  return db.transaction(async (tx) => {
    const [inserted] = await tx.insert(jobs).values(row).returning();
    await emitEvent(tx, row.organizationId, 'jobs', row.id, { event: 'job.submitted', job_id: row.id, user_id: row.submittedBy, type: row.type });
    return inserted!;
  });
}

/**
 * The job an Idempotency-Key submitted within the window, or null. A key older than the window is released
 * (set to null on its old job) so that the new submission can take it.
 */
export async function jobOfIdempotencyKey(db: Db, organizationId: string, key: string, windowMs: number): Promise<JobRow | null> {
  const [row] = await db.select().from(jobs).where(and(eq(jobs.organizationId, organizationId), eq(jobs.idempotencyKey, key)));
  if (!row) return null;
  if (Date.now() - row.createdAt.getTime() <= windowMs) return row;
  await db.update(jobs).set({ idempotencyKey: null }).where(eq(jobs.id, row.id));
  return null;
}

export async function getJob(db: Db, organizationId: string, id: string): Promise<JobRow | null> {
  const [row] = await db.select().from(jobs).where(and(eq(jobs.organizationId, organizationId), eq(jobs.id, id)));
  return row ?? null;
}

export async function listJobs(
  db: Db,
  organizationId: string,
  f: { status?: string | undefined; type?: string | undefined; parent?: string | undefined; limit: number; before?: number | undefined },
): Promise<JobRow[]> {
  const where = [eq(jobs.organizationId, organizationId)];
  if (f.status) where.push(eq(jobs.status, f.status));
  if (f.type) where.push(eq(jobs.type, f.type));
  if (f.parent) where.push(eq(jobs.parent, f.parent));
  if (f.before !== undefined) where.push(lt(jobs.seq, f.before));
  return db.select().from(jobs).where(and(...where)).orderBy(desc(jobs.seq)).limit(f.limit);
}

const TERMINAL = ['succeeded', 'failed', 'cancelled'];

/**
 * Moves a job to a status. A job that has ended stays ended (a late "running" from a retried activity does not
 * revive it). Emits job.started on the first running, job.completed / job.failed / job.cancelled at the end.
 */
export async function setJobStatus(db: Db, id: string, status: string, fields: { message?: string | null; runId?: string } = {}): Promise<JobRow | null> {
  return db.transaction(async (tx) => {
    const now = new Date();
    const [row] = await tx
      .update(jobs)
      .set({
        status,
        ...(fields.message !== undefined ? { message: fields.message } : {}),
        ...(fields.runId ? { runId: fields.runId } : {}),
        updatedAt: now,
        ...(status === 'running' ? { startedAt: sql`coalesce(${jobs.startedAt}, ${now.toISOString()}::timestamptz)` } : {}),
        ...(TERMINAL.includes(status) ? { endedAt: now } : {}),
      })
      .where(and(eq(jobs.id, id), sql`${jobs.status} not in ('succeeded', 'failed', 'cancelled')`))
      .returning();
    if (!row) return null;
    const job = { job_id: id, type: row.type };
    if (status === 'running' && row.startedAt?.getTime() === now.getTime()) await emitEvent(tx, row.organizationId, 'jobs', id, { event: 'job.started', ...job });
    if (status === 'succeeded')
      await emitEvent(tx, row.organizationId, 'jobs', id, { event: 'job.completed', ...job, duration_seconds: (now.getTime() - (row.startedAt ?? row.createdAt).getTime()) / 1000 });
    if (status === 'failed') await emitEvent(tx, row.organizationId, 'jobs', id, { event: 'job.failed', ...job, error: fields.message ?? null });
    if (status === 'cancelled') await emitEvent(tx, row.organizationId, 'jobs', id, { event: 'job.cancelled', ...job });
    return row;
  });
}

export async function getJobById(db: Db, id: string): Promise<JobRow | null> {
  const [row] = await db.select().from(jobs).where(eq(jobs.id, id));
  return row ?? null;
}


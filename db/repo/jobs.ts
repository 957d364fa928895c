// The catalogue rows of submitted jobs (db/schema/jobs.ts): written by the API at submit and by the job's
// workflow as it moves through its lifecycle; each change of status emits its job.* event in the same transaction.
import { and, desc, eq, lt, sql } from 'drizzle-orm';
import type { Db } from '../client.js';
import { jobs } from '../schema/index.js';
import { emitEvent, type Tx } from './outbox.js';
import { appendJobEvents } from './job-events.js';
import { enqueueWebhookDeliveries } from './webhooks.js';
import { webhookEventOf } from '../../contracts/openai.js';
import { JobQueuePlaceSchema, type JobQueuePlace } from '../../contracts/jobs.js';
import { z } from 'zod';

export type JobRow = typeof jobs.$inferSelect;
export type NewJob = Omit<typeof jobs.$inferInsert, 'seq' | 'createdAt' | 'updatedAt' | 'startedAt' | 'endedAt'>;

export async function insertJob(db: Db, row: NewJob): Promise<JobRow> {
  return db.transaction(async (tx) => {
    const [inserted] = await tx.insert(jobs).values(row).returning();
    await emitEvent(tx, row.organizationId, 'jobs', row.id, { event: 'job.submitted', job_id: row.id, user_id: row.submittedBy, type: row.type });
    await appendStatusEvent(tx, inserted!, null);
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
    // The row as it was, locked: a status event is appended only when the status or its message changes (a queued
    // job is re-reported on every poll with the same reason).
    const [before] = await tx.select({ status: jobs.status, message: jobs.message }).from(jobs).where(eq(jobs.id, id)).for('update');
    const [row] = await tx
      .update(jobs)
      .set({
        status,
        ...(fields.message !== undefined ? { message: fields.message } : {}),
        ...(fields.runId ? { runId: fields.runId } : {}),
        // A job that leaves its queue forgets its place: waiting again later is told afresh.
        ...(status !== 'queued' ? { queue: null } : {}),
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
    // Pause and resume on request (a preemption's pair, job.preempted / job.resumed, comes from its queue).
    if (status === 'paused' && before?.status !== 'paused') await emitEvent(tx, row.organizationId, 'jobs', id, { event: 'job.paused', ...job });
    if (before?.status === 'paused' && status !== 'paused' && !TERMINAL.includes(status))
      await emitEvent(tx, row.organizationId, 'jobs', id, { event: 'job.resumed', ...job, reason: 'resumed on request' });
    await appendStatusEvent(tx, row, before ?? null);
    // The organization's webhooks hear of the end in this transaction: an ended job never loses its deliveries.
    if (TERMINAL.includes(status)) await enqueueWebhookDeliveries(tx, row.organizationId, webhookEventOf(row.kind, status), { id, status, type: row.type, message: row.message });
    return row;
  });
}

export async function getJobById(db: Db, id: string): Promise<JobRow | null> {
  const [row] = await db.select().from(jobs).where(eq(jobs.id, id));
  return row ?? null;
}


/**
 * The job's `status` event (job_events) for its new status, with the queue's reason or the outcome's message; none
 * when neither changed since `before`.
 */
async function appendStatusEvent(tx: Tx, row: JobRow, before: { status: string; message: string | null } | null): Promise<void> {
  if (before && before.status === row.status && before.message === row.message) return;
  const level = row.status === 'failed' ? 'error' : row.status === 'cancelled' ? 'warn' : 'info';
  await appendJobEvents(tx, [
    {
      organizationId: row.organizationId,
      jobId: row.id,
      level,
      type: 'status',
      message: row.message ? `${row.status}: ${row.message}` : row.status,
      data: { status: row.status, message: row.message },
    },
  ]);
}

/** The least time between two `queue` events of one job: a busy queue may move its waiting jobs on every poll. */
export const QUEUE_EVENT_MIN_MS = 2000;

/** The place a job's row holds: the one last told by a `queue` event, and when it was told. */
const ToldPlaceSchema = JobQueuePlaceSchema.extend({ told_at: z.iso.datetime() });

/**
 * The job's place in its queue while it waits (read only while its status is queued), told by a `queue` event
 * (job_events, so GET /v1/stream carries it) when the queue, the position or the reason changed. The executors
 * report a waiting job on every poll: an unchanged place writes nothing, and a change within QUEUE_EVENT_MIN_MS of
 * the last one told is held back until a later poll (a waiting job keeps being polled, so the newest place is
 * told then; a job admitted before that is told by its status event). The row keeps the place last told, so the
 * job's detail and its stream agree.
 */
export async function setJobQueue(db: Db, id: string, place: JobQueuePlace | null, now = new Date()): Promise<void> {
  await db.transaction(async (tx) => {
    const [row] = await tx.select({ organizationId: jobs.organizationId, status: jobs.status, queue: jobs.queue }).from(jobs).where(eq(jobs.id, id)).for('update');
    if (!row) return;
    if (!place || row.status !== 'queued') {
      await tx.update(jobs).set({ queue: place, updatedAt: now }).where(eq(jobs.id, id));
      return;
    }
    const told = ToldPlaceSchema.safeParse(row.queue).data;
    if (told && told.queue === place.queue && told.position === place.position && told.reason === place.reason) return;
    if (told && now.getTime() - Date.parse(told.told_at) < QUEUE_EVENT_MIN_MS) return;
    const view: JobQueuePlace = { queue: place.queue, position: place.position, reason: place.reason };
    await tx.update(jobs).set({ queue: { ...view, told_at: now.toISOString() }, updatedAt: now }).where(eq(jobs.id, id));
    const where = `${place.position !== null ? `#${place.position} in ` : 'in '}${place.queue}`;
    await appendJobEvents(tx, [{ organizationId: row.organizationId, jobId: id, level: 'info', type: 'queue', message: `queued ${where}${place.reason ? `: ${place.reason}` : ''}`, data: view }]);
  });
}

/** Adds a segment (a start or a resume) once: a retried activity that adds the same segment again changes nothing. */
export async function addJobSegment(db: Db, id: string, segment: { segment: number } & Record<string, unknown>): Promise<void> {
  await db
    .update(jobs)
    .set({ segments: sql`${jobs.segments} || ${JSON.stringify([segment])}::jsonb`, updatedAt: new Date() })
    .where(and(eq(jobs.id, id), sql`not exists (select 1 from jsonb_array_elements(${jobs.segments}) s where (s->>'segment')::int = ${segment.segment})`));
}

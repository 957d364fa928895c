// Jobs a parent starts on its own (a pipeline's stages, a sweep's trials; a dataset's preparation later): rows of
// the jobs table with `parent` set, written by the parent's activities as the job moves, so that they are listed
// and read like submitted jobs (`GET /v1/jobs?parent=pipeline:<id>`). They emit no job.* events: the parent's own
// events (pipeline.stage, the sweep's) already say what happened.
import { and, eq, notInArray, sql } from 'drizzle-orm';
import type { Db } from '../client.js';
import { jobs, pipelines } from '../schema/index.js';

const TERMINAL = ['succeeded', 'failed', 'cancelled'];

export interface ChildJob {
  id: string;
  organizationId: string;
  parent: string;
  name: string;
  submittedBy: string;
  type: string;
  workflowId: string;
  runId: string | null;
  spec: Record<string, unknown>;
}

/**
 * Creates the child job or moves it to `status`; an ended job stays ended, so a retried activity changes nothing.
 * started_at is set at the first running, ended_at at the end.
 */
export async function recordChildJob(db: Db, job: ChildJob, status: string, message: string | null = null): Promise<void> {
  const now = new Date();
  const ended = TERMINAL.includes(status);
  await db
    .insert(jobs)
    .values({ ...job, kind: 'stage', status, message, startedAt: status === 'running' || ended ? now : null, endedAt: ended ? now : null })
    .onConflictDoUpdate({
      target: jobs.id,
      set: {
        status,
        message,
        ...(job.runId ? { runId: job.runId } : {}),
        updatedAt: now,
        startedAt: sql`coalesce(${jobs.startedAt}, ${status === 'running' || ended ? now.toISOString() : null}::timestamptz)`,
        ...(ended ? { endedAt: now } : {}),
      },
      setWhere: sql`${jobs.status} not in ('succeeded', 'failed', 'cancelled')`,
    });
}

/** Ends every child of `parent` that has not ended (the parent moved on, finished or stopped): returns their ids. */
export async function endChildJobs(db: Db, organizationId: string, parent: string, status: 'succeeded' | 'failed' | 'cancelled', message: string | null = null, exceptIds: string[] = []): Promise<string[]> {
  const now = new Date();
  const rows = await db
    .update(jobs)
    .set({ status, message, updatedAt: now, endedAt: now })
    .where(and(eq(jobs.organizationId, organizationId), eq(jobs.parent, parent), sql`${jobs.status} not in ('succeeded', 'failed', 'cancelled')`, ...(exceptIds.length ? [notInArray(jobs.id, exceptIds)] : [])))
    .returning({ id: jobs.id });
  return rows.map((r) => r.id);
}

/** Moves a child job that exists to `status` (an ended one stays ended); false when there is none. */
export async function setChildJobStatus(db: Db, id: string, status: string, message: string | null = null): Promise<boolean> {
  const now = new Date();
  const ended = TERMINAL.includes(status);
  const rows = await db
    .update(jobs)
    .set({ status, message, updatedAt: now, ...(ended ? { endedAt: now } : {}) })
    .where(and(eq(jobs.id, id), sql`${jobs.status} not in ('succeeded', 'failed', 'cancelled')`))
    .returning({ id: jobs.id });
  return rows.length > 0;
}

/** Who a pipeline's stage jobs belong to: its organization and who started it; null when there is no such pipeline. */
export async function pipelineOwner(db: Db, pipelineId: string): Promise<{ organizationId: string; createdBy: string } | null> {
  const [row] = await db.select({ organizationId: pipelines.organizationId, createdBy: pipelines.createdBy }).from(pipelines).where(eq(pipelines.id, pipelineId));
  return row ?? null;
}

import { and, desc, eq } from 'drizzle-orm';
import type { Db } from '../client.js';
import { pipelines, schedules } from '../schema/index.js';
import { emitEvent } from './outbox.js';

export type PipelineRow = typeof pipelines.$inferSelect;

export async function upsertPipeline(db: Db, row: Omit<typeof pipelines.$inferInsert, 'createdAt' | 'updatedAt'>): Promise<void> {
  await db.transaction(async (tx) => {
    const inserted = await tx.insert(pipelines).values(row).onConflictDoNothing().returning({ id: pipelines.id });
    if (inserted.length)
      await emitEvent(tx, row.organizationId, 'jobs', row.id, { event: 'job.submitted', job_id: row.id, user_id: row.createdBy, type: 'pipeline' });
  });
}

export async function setPipelineStage(db: Db, id: string, stage: string, outcome?: string): Promise<void> {
  await db.transaction(async (tx) => {
    const [row] = await tx
      .update(pipelines)
      .set({ stage, outcome: outcome ?? null, updatedAt: new Date() })
      .where(eq(pipelines.id, id))
      .returning();
    if (!row) return;
    await emitEvent(tx, row.organizationId, 'pipelines', id, { event: 'pipeline.stage', pipeline_id: id, stage, outcome: outcome ?? null });
    // The job lifecycle of spec 000's hanzo.ml.jobs topic, keyed by the pipeline like its job.submitted.
    const job = { job_id: id, type: 'pipeline' };
    if (stage === 'preprocess') await emitEvent(tx, row.organizationId, 'jobs', id, { event: 'job.started', ...job });
    else if (stage === 'failed') await emitEvent(tx, row.organizationId, 'jobs', id, { event: 'job.failed', ...job, error: outcome ?? null });
    else if (stage === 'completed')
      await emitEvent(tx, row.organizationId, 'jobs', id, { event: 'job.completed', ...job, outcome: outcome ?? null, duration_seconds: (row.updatedAt.getTime() - row.createdAt.getTime()) / 1000 });
  });
}

export async function getPipelineRow(db: Db, organizationId: string, id: string): Promise<PipelineRow | null> {
  const [row] = await db.select().from(pipelines).where(and(eq(pipelines.organizationId, organizationId), eq(pipelines.id, id)));
  return row ?? null;
}

export async function listPipelines(db: Db, organizationId: string, limit: number): Promise<PipelineRow[]> {
  return db.select().from(pipelines).where(eq(pipelines.organizationId, organizationId)).orderBy(desc(pipelines.createdAt)).limit(limit);
}

export type ScheduleRow = typeof schedules.$inferSelect;

export async function insertSchedule(db: Db, row: Omit<typeof schedules.$inferInsert, 'createdAt'>): Promise<ScheduleRow> {
  const [inserted] = await db.insert(schedules).values(row).returning();
  return inserted!;
}

export async function listSchedules(db: Db, organizationId: string): Promise<ScheduleRow[]> {
  return db.select().from(schedules).where(eq(schedules.organizationId, organizationId)).orderBy(desc(schedules.createdAt));
}

export async function findSchedule(db: Db, organizationId: string, idOrName: string): Promise<ScheduleRow | null> {
  const rows = await db.select().from(schedules).where(eq(schedules.organizationId, organizationId));
  return rows.find((r) => r.id === idOrName || r.name === idOrName) ?? null;
}

export async function deleteSchedule(db: Db, id: string): Promise<void> {
  await db.delete(schedules).where(eq(schedules.id, id));
}

import { and, asc, desc, eq, inArray, ne, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../client.js';
import { hpoSweeps, hpoTrials, pbtLineage } from '../schema/index.js';
import { emitEvent } from './outbox.js';
import { getOrCreateExperiment } from './experiments.js';
import { objectivesOf, type SweepWorkflowInput } from '../../contracts/hpo.js';
import { sha256Text } from '../../lib/hash.js';

export type SweepRow = typeof hpoSweeps.$inferSelect;
export type TrialRow = typeof hpoTrials.$inferSelect;
export type LineageRow = typeof pbtLineage.$inferSelect;

/** What makes earlier trials comparable: the same trial kind and model, search space and objectives. */
export function spaceKey(config: SweepWorkflowInput['config']): string {
  const base = config.base_config;
  const subject = base.method === 'lora' ? { method: 'lora', model: base.model, dataset: base.dataset } : { method: 'synthetic', function: base.function };
  const canonical = (v: unknown): unknown =>
    v && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, canonical((v as Record<string, unknown>)[k])])) : v;
  return sha256Text(JSON.stringify(canonical({ subject, space: config.search_space, objectives: objectivesOf(config) })));
}

/** The sweep's experiment and row, made once (the API before starting the workflow; the workflow again, harmlessly). */
export async function createSweep(db: Db, input: SweepWorkflowInput, artifactRoot: string): Promise<{ experimentId: string; spaceKey: string }> {
  const experimentId = await getOrCreateExperiment(db, input.organization_id, input.config.experiment, artifactRoot);
  const key = spaceKey(input.config);
  await insertSweep(db, { id: input.sweep_id, organizationId: input.organization_id, experimentId, strategy: input.config.strategy, config: input.config, spaceKey: key, createdBy: input.requested_by });
  return { experimentId, spaceKey: key };
}

/** Inserts the sweep once (a retried activity finds the row it made). */
export async function insertSweep(db: Db, row: Omit<typeof hpoSweeps.$inferInsert, 'createdAt' | 'updatedAt' | 'status'>): Promise<void> {
  await db.transaction(async (tx) => {
    const inserted = await tx
      .insert(hpoSweeps)
      .values({ ...row, status: 'running' })
      .onConflictDoNothing()
      .returning({ id: hpoSweeps.id });
    if (inserted.length) await emitEvent(tx, row.organizationId, 'jobs', row.id, { event: 'job.submitted', job_id: row.id, user_id: row.createdBy, type: 'hpo' });
  });
}

export async function finishSweep(db: Db, id: string, status: SweepRow['status'], bestTrial: number | null): Promise<void> {
  await db.transaction(async (tx) => {
    const [row] = await tx.update(hpoSweeps).set({ status, bestTrial, updatedAt: new Date() }).where(eq(hpoSweeps.id, id)).returning();
    if (row) await emitEvent(tx, row.organizationId, 'jobs', id, { event: `job.${status}`, job_id: id, type: 'hpo', best_trial: bestTrial });
  });
}

export async function getSweep(db: Db, organizationId: string, id: string): Promise<SweepRow | null> {
  const [row] = await db.select().from(hpoSweeps).where(and(eq(hpoSweeps.organizationId, organizationId), eq(hpoSweeps.id, id)));
  return row ?? null;
}

export async function listSweeps(db: Db, organizationId: string, limit: number): Promise<SweepRow[]> {
  return db.select().from(hpoSweeps).where(eq(hpoSweeps.organizationId, organizationId)).orderBy(desc(hpoSweeps.createdAt)).limit(limit);
}

export async function insertTrial(db: Db, row: { sweepId: string; number: number; runId: string; params: unknown }): Promise<void> {
  await db
    .insert(hpoTrials)
    .values({ ...row, status: 'running' })
    .onConflictDoNothing();
}

/** Work done so far (steps, GPU seconds) only grows: a late, smaller report never undoes a larger one. */
export async function accountTrial(db: Db, sweepId: string, n: number, p: { steps: number; gpuSeconds: number; intermediate?: [number, number][] }): Promise<void> {
  await db
    .update(hpoTrials)
    .set({
      steps: sql`greatest(${hpoTrials.steps}, ${p.steps})`,
      gpuSeconds: sql`greatest(${hpoTrials.gpuSeconds}, ${p.gpuSeconds})`,
      ...(p.intermediate ? { intermediate: p.intermediate } : {}),
    })
    .where(and(eq(hpoTrials.sweepId, sweepId), eq(hpoTrials.number, n)));
}

export async function finishTrial(
  db: Db,
  sweepId: string,
  n: number,
  p: { status: TrialRow['status']; objectiveValues: number[] | null; metrics: Record<string, number>; intermediate: [number, number][]; steps: number; gpuSeconds: number; reason: string | null },
): Promise<void> {
  await db
    .update(hpoTrials)
    .set({
      status: p.status,
      objectiveValues: p.objectiveValues,
      metrics: p.metrics,
      intermediate: p.intermediate,
      steps: sql`greatest(${hpoTrials.steps}, ${p.steps})`,
      gpuSeconds: sql`greatest(${hpoTrials.gpuSeconds}, ${p.gpuSeconds})`,
      reason: p.reason,
      endedAt: new Date(),
    })
    .where(and(eq(hpoTrials.sweepId, sweepId), eq(hpoTrials.number, n)));
}

export async function getTrial(db: Db, sweepId: string, n: number): Promise<TrialRow | null> {
  const [row] = await db.select().from(hpoTrials).where(and(eq(hpoTrials.sweepId, sweepId), eq(hpoTrials.number, n)));
  return row ?? null;
}

export async function trialsOf(db: Db, sweepId: string, state?: TrialRow['status']): Promise<TrialRow[]> {
  const where = state ? and(eq(hpoTrials.sweepId, sweepId), eq(hpoTrials.status, state)) : eq(hpoTrials.sweepId, sweepId);
  return db.select().from(hpoTrials).where(where).orderBy(asc(hpoTrials.number));
}

/** How a sweep's trials are listed: best first on the first objective (as the API ranks them), or by number. */
export type TrialOrder = 'best' | 'number';

/**
 * A completed trial with a first objective value ranks by that value (ties by number); every other trial comes
 * after, by number: the order of api/routes/hpo.ts rankTrials, in SQL so a page is read without the rest.
 */
function trialOrderBy(order: TrialOrder, direction: 'minimize' | 'maximize'): SQL[] {
  if (order === 'number') return [asc(hpoTrials.number)];
  const valued = sql`(${hpoTrials.status} = 'completed' and jsonb_typeof(${hpoTrials.objectiveValues} -> 0) = 'number')`;
  const value = sql`(case when ${valued} then (${hpoTrials.objectiveValues} ->> 0)::float8 end)`;
  return [sql`(case when ${valued} then 0 else 1 end)`, direction === 'minimize' ? asc(value) : desc(value), asc(hpoTrials.number)];
}

/**
 * One page of a sweep's trials in `order`, and how many the listing has in all. `completedOnly` lists the
 * completed ones (the API's `top`); `state` one status. Without `limit`, every trial from `offset` on.
 */
export async function trialsPage(
  db: Db,
  sweepId: string,
  q: { order: TrialOrder; direction: 'minimize' | 'maximize'; state?: TrialRow['status']; limit?: number; offset: number },
): Promise<{ rows: TrialRow[]; total: number }> {
  const where = and(eq(hpoTrials.sweepId, sweepId), q.state ? eq(hpoTrials.status, q.state) : undefined);
  const query = db.select().from(hpoTrials).where(where).orderBy(...trialOrderBy(q.order, q.direction)).offset(q.offset).$dynamic();
  const [rows, [count]] = await Promise.all([q.limit === undefined ? query : query.limit(q.limit), db.select({ n: sql<number>`count(*)::int` }).from(hpoTrials).where(where)]);
  return { rows, total: count!.n };
}

/** What a sweep's charts draw of every trial (best so far, parallel coordinates, Pareto front): no metrics or curves. */
export type TrialPoint = Pick<TrialRow, 'number' | 'status' | 'params' | 'objectiveValues' | 'endedAt'>;

export async function trialPoints(db: Db, sweepId: string): Promise<TrialPoint[]> {
  return db
    .select({ number: hpoTrials.number, status: hpoTrials.status, params: hpoTrials.params, objectiveValues: hpoTrials.objectiveValues, endedAt: hpoTrials.endedAt })
    .from(hpoTrials)
    .where(eq(hpoTrials.sweepId, sweepId))
    .orderBy(asc(hpoTrials.number));
}

/** A sweep's trials by status, counted in the catalogue. */
export async function trialCounts(db: Db, sweepId: string): Promise<Record<TrialRow['status'], number>> {
  const rows = await db.select({ status: hpoTrials.status, n: sql<number>`count(*)::int` }).from(hpoTrials).where(eq(hpoTrials.sweepId, sweepId)).groupBy(hpoTrials.status);
  const out = { running: 0, completed: 0, pruned: 0, failed: 0, cancelled: 0 };
  for (const r of rows) out[r.status] = r.n;
  return out;
}

export async function sweepTotals(db: Db, sweepId: string): Promise<{ trials: number; steps: number; gpuSeconds: number }> {
  const [row] = await db
    .select({ trials: sql<number>`count(*)::int`, steps: sql<number>`coalesce(sum(${hpoTrials.steps}), 0)::int`, gpuSeconds: sql<number>`coalesce(sum(${hpoTrials.gpuSeconds}), 0)::float8` })
    .from(hpoTrials)
    .where(eq(hpoTrials.sweepId, sweepId));
  return row!;
}

/** Finished trials of earlier sweeps on the same base model and search space, oldest sweep first. */
export async function warmStartTrials(db: Db, organizationId: string, spaceKey: string, excludeSweepId: string, limit: number): Promise<TrialRow[]> {
  const sweeps = await db
    .select({ id: hpoSweeps.id })
    .from(hpoSweeps)
    .where(and(eq(hpoSweeps.organizationId, organizationId), eq(hpoSweeps.spaceKey, spaceKey), ne(hpoSweeps.id, excludeSweepId)))
    .orderBy(asc(hpoSweeps.createdAt));
  if (!sweeps.length) return [];
  const rows = await db
    .select()
    .from(hpoTrials)
    .where(and(inArray(hpoTrials.sweepId, sweeps.map((s) => s.id)), inArray(hpoTrials.status, ['completed', 'pruned'])))
    .orderBy(asc(hpoTrials.startedAt), asc(hpoTrials.number));
  return rows.slice(-limit);
}

export async function recordLineage(db: Db, row: Omit<typeof pbtLineage.$inferInsert, 'createdAt'>): Promise<void> {
  await db
    .insert(pbtLineage)
    .values(row)
    .onConflictDoUpdate({
      target: [pbtLineage.sweepId, pbtLineage.member, pbtLineage.round],
      set: { step: row.step, value: row.value ?? null, checkpoint: row.checkpoint ?? null, gpuSeconds: row.gpuSeconds ?? 0 },
    });
}

export async function lineageOf(db: Db, sweepId: string): Promise<LineageRow[]> {
  return db.select().from(pbtLineage).where(eq(pbtLineage.sweepId, sweepId)).orderBy(asc(pbtLineage.round), asc(pbtLineage.member));
}

// Storage for the MLflow-compatible tracking API: experiments with tags, runs with tags and a soft-delete
// lifecycle, checked parameter writes, and the run/experiment searches compiled from the filter grammar.
// Every function takes the caller's organization and never returns another organization's rows.
import { and, asc, eq, inArray, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../client.js';
import { experimentTags, experiments, latestMetrics, metrics, runParams, runTags, runs } from '../schema/index.js';
import type { Comparison, OrderClause } from '../../api/routes/mlflow/search-filter.js';
import type { RunRow } from './tracking.js';

export type ExperimentRow = typeof experiments.$inferSelect;
export type ViewType = 'ACTIVE_ONLY' | 'DELETED_ONLY' | 'ALL';
export interface KeyValue {
  key: string;
  value: string;
}

/** The organization's "Default" experiment, which MLflow clients address as experiment "0". */
export const defaultExperimentId = (organizationId: string): string => `default-${organizationId}`;

export async function ensureDefaultExperiment(db: Db, organizationId: string, artifactRoot: string): Promise<void> {
  const id = defaultExperimentId(organizationId);
  await db
    .insert(experiments)
    .values({ id, organizationId, name: 'Default', artifactLocation: `${artifactRoot}/experiments/0`, lastUpdateTime: Date.now() })
    .onConflictDoNothing();
}

/** Creates an experiment; null when the name is taken in this organization. */
export async function createExperiment(
  db: Db,
  p: { id: string; organizationId: string; name: string; artifactLocation: string; tags: KeyValue[] },
): Promise<string | null> {
  return db.transaction(async (tx) => {
    const now = Date.now();
    const inserted = await tx
      .insert(experiments)
      .values({ id: p.id, organizationId: p.organizationId, name: p.name, artifactLocation: p.artifactLocation, createdAt: new Date(now), lastUpdateTime: now })
      .onConflictDoNothing()
      .returning({ id: experiments.id });
    if (inserted.length === 0) return null;
    if (p.tags.length) await tx.insert(experimentTags).values(dedupe(p.tags).map((t) => ({ experimentId: p.id, ...t })));
    return p.id;
  });
}

export async function getExperiment(db: Db, organizationId: string, id: string): Promise<ExperimentRow | null> {
  const [row] = await db.select().from(experiments).where(and(eq(experiments.organizationId, organizationId), eq(experiments.id, id)));
  return row ?? null;
}

export async function getExperimentByName(db: Db, organizationId: string, name: string): Promise<ExperimentRow | null> {
  const [row] = await db.select().from(experiments).where(and(eq(experiments.organizationId, organizationId), eq(experiments.name, name)));
  return row ?? null;
}

export async function updateExperiment(db: Db, id: string, set: { name?: string; lifecycleStage?: 'active' | 'deleted' }): Promise<boolean> {
  try {
    await db
      .update(experiments)
      .set({ ...set, lastUpdateTime: Date.now() })
      .where(eq(experiments.id, id));
    return true;
  } catch (err) {
    if (isUniqueViolation(err)) return false;
    throw err;
  }
}

export async function setExperimentTag(db: Db, experimentId: string, tag: KeyValue): Promise<void> {
  await db
    .insert(experimentTags)
    .values({ experimentId, ...tag })
    .onConflictDoUpdate({ target: [experimentTags.experimentId, experimentTags.key], set: { value: tag.value } });
}

export async function experimentTagsOf(db: Db, ids: string[]): Promise<Map<string, KeyValue[]>> {
  const out = new Map<string, KeyValue[]>(ids.map((id) => [id, []]));
  if (ids.length === 0) return out;
  const rows = await db.select().from(experimentTags).where(inArray(experimentTags.experimentId, ids)).orderBy(asc(experimentTags.key));
  for (const r of rows) out.get(r.experimentId)!.push({ key: r.key, value: r.value });
  return out;
}

const epochMs = (col: SQL | typeof runs.startTime): SQL => sql`(extract(epoch from ${col}) * 1000)::bigint`;

function stageFilter(col: typeof experiments.lifecycleStage | typeof runs.lifecycleStage, view: ViewType): SQL | undefined {
  return view === 'ALL' ? undefined : eq(col, view === 'ACTIVE_ONLY' ? 'active' : 'deleted');
}

function compare(left: SQL, c: Comparison): SQL {
  if (c.op === 'IN' || c.op === 'NOT IN') {
    const list = sql.join((c.value as string[]).map((v) => sql`${v}`), sql`, `);
    return sql`${left} ${sql.raw(c.op)} (${list})`;
  }
  return sql`${left} ${sql.raw(c.op)} ${c.value}`;
}

const EXPERIMENT_ATTRIBUTES: Record<string, SQL> = {
  name: sql`${experiments.name}`,
  experiment_id: sql`${experiments.id}`,
  creation_time: epochMs(sql`${experiments.createdAt}`),
  last_update_time: sql`${experiments.lastUpdateTime}`,
};

function experimentCondition(c: Comparison): SQL {
  if (c.entity === 'tag') return sql`exists (select 1 from experiment_tags et where et.experiment_id = ${experiments.id} and et.key = ${c.key} and ${compare(sql`et.value`, c)})`;
  return compare(EXPERIMENT_ATTRIBUTES[c.key]!, c);
}

export async function searchExperiments(
  db: Db,
  organizationId: string,
  q: { filter: Comparison[]; orderBy: OrderClause[]; view: ViewType; offset: number; limit: number },
): Promise<{ rows: ExperimentRow[]; more: boolean }> {
  const order: SQL[] = q.orderBy.map((o) => {
    const col = o.entity === 'tag' ? sql`(select et.value from experiment_tags et where et.experiment_id = ${experiments.id} and et.key = ${o.key})` : EXPERIMENT_ATTRIBUTES[o.key]!;
    return sql`${col} ${sql.raw(o.ascending ? 'asc' : 'desc')} nulls last`;
  });
  if (q.orderBy.length === 0) order.push(sql`${experiments.createdAt} desc`);
  order.push(sql`${experiments.id} asc`);
  const rows = await db
    .select()
    .from(experiments)
    .where(and(eq(experiments.organizationId, organizationId), stageFilter(experiments.lifecycleStage, q.view), ...q.filter.map(experimentCondition)))
    .orderBy(...order)
    .limit(q.limit + 1)
    .offset(q.offset);
  return { rows: rows.slice(0, q.limit), more: rows.length > q.limit };
}

// ---- runs ----

/** Our run statuses and MLflow's, one to one. */
export const MLFLOW_STATUS = { queued: 'SCHEDULED', running: 'RUNNING', completed: 'FINISHED', failed: 'FAILED', cancelled: 'KILLED' } as const;
export type MlflowStatus = (typeof MLFLOW_STATUS)[keyof typeof MLFLOW_STATUS];
export const fromMlflowStatus = (s: MlflowStatus): RunRow['status'] =>
  (Object.entries(MLFLOW_STATUS).find(([, v]) => v === s)![0] as RunRow['status']);
const statusSql = sql`(case ${runs.status} when 'queued' then 'SCHEDULED' when 'running' then 'RUNNING' when 'completed' then 'FINISHED' when 'failed' then 'FAILED' else 'KILLED' end)`;

const RUN_ATTRIBUTES: Record<string, SQL> = {
  run_id: sql`${runs.id}`,
  run_name: sql`${runs.name}`,
  status: statusSql,
  user_id: sql`${runs.userId}`,
  artifact_uri: sql`${runs.artifactUri}`,
  lifecycle_stage: sql`${runs.lifecycleStage}`,
  start_time: epochMs(runs.startTime),
  created: epochMs(runs.startTime),
  end_time: epochMs(sql`${runs.endTime}`),
};

function runCondition(c: Comparison): SQL {
  switch (c.entity) {
    case 'metric':
      return sql`exists (select 1 from latest_metrics lm where lm.run_id = ${runs.id} and lm.key = ${c.key} and not lm.is_nan and ${compare(sql`lm.value`, c)})`;
    case 'param':
      return sql`exists (select 1 from run_params rp where rp.run_id = ${runs.id} and rp.key = ${c.key} and ${compare(sql`rp.value`, c)})`;
    case 'tag':
      return sql`exists (select 1 from run_tags rt where rt.run_id = ${runs.id} and rt.key = ${c.key} and ${compare(sql`rt.value`, c)})`;
    default:
      return compare(RUN_ATTRIBUTES[c.key]!, c);
  }
}

function runOrder(o: OrderClause): SQL {
  const col =
    o.entity === 'metric'
      ? sql`(select lm.value from latest_metrics lm where lm.run_id = ${runs.id} and lm.key = ${o.key})`
      : o.entity === 'param'
        ? sql`(select rp.value from run_params rp where rp.run_id = ${runs.id} and rp.key = ${o.key})`
        : o.entity === 'tag'
          ? sql`(select rt.value from run_tags rt where rt.run_id = ${runs.id} and rt.key = ${o.key})`
          : RUN_ATTRIBUTES[o.key]!;
  return sql`${col} ${sql.raw(o.ascending ? 'asc' : 'desc')} nulls last`;
}

export async function searchRuns(
  db: Db,
  organizationId: string,
  q: { experimentIds: string[]; filter: Comparison[]; orderBy: OrderClause[]; view: ViewType; offset: number; limit: number },
): Promise<{ rows: RunRow[]; more: boolean }> {
  if (q.experimentIds.length === 0) return { rows: [], more: false };
  const order = q.orderBy.map(runOrder);
  if (!q.orderBy.some((o) => o.entity === 'attribute' && (o.key === 'start_time' || o.key === 'created'))) order.push(sql`${runs.startTime} desc`);
  order.push(sql`${runs.id} asc`);
  const rows = await db
    .select()
    .from(runs)
    .where(
      and(eq(runs.organizationId, organizationId), inArray(runs.experimentId, q.experimentIds), stageFilter(runs.lifecycleStage, q.view), ...q.filter.map(runCondition)),
    )
    .orderBy(...order)
    .limit(q.limit + 1)
    .offset(q.offset);
  return { rows: rows.slice(0, q.limit), more: rows.length > q.limit };
}

export async function createMlflowRun(
  db: Db,
  p: { id: string; organizationId: string; experimentId: string; name: string; userId: string; artifactUri: string; startTime: number; tags: KeyValue[] },
): Promise<void> {
  await db.transaction(async (tx) => {
    await tx
      .insert(runs)
      .values({
        id: p.id,
        organizationId: p.organizationId,
        experimentId: p.experimentId,
        name: p.name,
        status: 'running',
        userId: p.userId,
        artifactUri: p.artifactUri,
        startTime: new Date(p.startTime),
      })
      .onConflictDoNothing();
    if (p.tags.length) await tx.insert(runTags).values(dedupe(p.tags).map((t) => ({ runId: p.id, ...t }))).onConflictDoNothing();
  });
}

export async function updateMlflowRun(db: Db, id: string, set: { status?: RunRow['status']; endTime?: number; name?: string }): Promise<void> {
  await db.transaction(async (tx) => {
    const values: Partial<RunRow> = {};
    if (set.status) values.status = set.status;
    if (set.endTime !== undefined) values.endTime = new Date(set.endTime);
    if (set.name !== undefined) values.name = set.name;
    if (Object.keys(values).length) await tx.update(runs).set(values).where(eq(runs.id, id));
    if (set.name !== undefined) await upsertTags(tx as unknown as Db, id, [{ key: 'mlflow.runName', value: set.name }]);
  });
}

export async function setRunLifecycle(db: Db, id: string, stage: 'active' | 'deleted'): Promise<void> {
  await db
    .update(runs)
    .set({ lifecycleStage: stage, deletedTime: stage === 'deleted' ? Date.now() : null })
    .where(eq(runs.id, id));
}

/** Sets run tags (last write wins); `mlflow.runName` also renames the run. */
export async function upsertTags(db: Db, runId: string, tags: KeyValue[]): Promise<void> {
  if (tags.length === 0) return;
  const rows = dedupe(tags)
    .sort((a, b) => (a.key < b.key ? -1 : 1))
    .map((t) => ({ runId, ...t }));
  await db
    .insert(runTags)
    .values(rows)
    .onConflictDoUpdate({ target: [runTags.runId, runTags.key], set: { value: sql`excluded.value` } });
  const rename = rows.find((t) => t.key === 'mlflow.runName');
  if (rename) await db.update(runs).set({ name: rename.value }).where(eq(runs.id, runId));
}

/** Deletes a run tag; false when the run has no such tag. */
export async function deleteTag(db: Db, runId: string, key: string): Promise<boolean> {
  const gone = await db
    .delete(runTags)
    .where(and(eq(runTags.runId, runId), eq(runTags.key, key)))
    .returning({ key: runTags.key });
  return gone.length > 0;
}

/**
 * Stores parameters, which are immutable: the same value again is a no-op (so a replayed request succeeds),
 * a different value is refused. Returns the conflicting parameters (nothing is written when there are any).
 */
export async function logParamsChecked(db: Db, runId: string, params: KeyValue[]): Promise<{ key: string; old: string; new: string }[]> {
  if (params.length === 0) return [];
  return db.transaction(async (tx) => {
    const existing = await tx
      .select()
      .from(runParams)
      .where(and(eq(runParams.runId, runId), inArray(runParams.key, params.map((p) => p.key))));
    const old = new Map(existing.map((r) => [r.key, r.value]));
    const conflicts = params.filter((p) => old.has(p.key) && old.get(p.key) !== p.value).map((p) => ({ key: p.key, old: old.get(p.key)!, new: p.value }));
    if (conflicts.length) return conflicts;
    const fresh = params.filter((p) => !old.has(p.key)).map((p) => ({ runId, ...p }));
    if (fresh.length) await tx.insert(runParams).values(fresh).onConflictDoNothing();
    // A concurrent writer may have won the race with another value: read back and compare.
    const after = await tx
      .select()
      .from(runParams)
      .where(and(eq(runParams.runId, runId), inArray(runParams.key, params.map((p) => p.key))));
    const now = new Map(after.map((r) => [r.key, r.value]));
    return params.filter((p) => now.get(p.key) !== p.value).map((p) => ({ key: p.key, old: now.get(p.key) ?? '', new: p.value }));
  });
}

export interface RunData {
  params: Map<string, KeyValue[]>;
  tags: Map<string, KeyValue[]>;
  metrics: Map<string, { key: string; value: number; timestamp: number; step: number }[]>;
}

/** Params, tags and latest metrics of several runs in three queries. */
export async function runDataOf(db: Db, runIds: string[]): Promise<RunData> {
  const empty = <T>() => new Map<string, T[]>(runIds.map((id) => [id, []]));
  const out: RunData = { params: empty(), tags: empty(), metrics: empty() };
  if (runIds.length === 0) return out;
  const [p, t, m] = await Promise.all([
    db.select().from(runParams).where(inArray(runParams.runId, runIds)).orderBy(asc(runParams.key)),
    db.select().from(runTags).where(inArray(runTags.runId, runIds)).orderBy(asc(runTags.key)),
    db.select().from(latestMetrics).where(inArray(latestMetrics.runId, runIds)).orderBy(asc(latestMetrics.key)),
  ]);
  for (const r of p) out.params.get(r.runId)!.push({ key: r.key, value: r.value });
  for (const r of t) out.tags.get(r.runId)!.push({ key: r.key, value: r.value });
  for (const r of m) out.metrics.get(r.runId)!.push({ key: r.key, value: r.isNan ? NaN : r.value, timestamp: r.timestamp, step: r.step });
  return out;
}

/** One page of a metric's full history in (step, timestamp, value) order. */
export async function metricHistoryByOffset(db: Db, runId: string, key: string, offset: number, limit: number) {
  const rows = await db
    .select()
    .from(metrics)
    .where(and(eq(metrics.runId, runId), eq(metrics.key, key)))
    .orderBy(asc(metrics.step), asc(metrics.timestamp), asc(metrics.value))
    .limit(limit + 1)
    .offset(offset);
  return { points: rows.slice(0, limit).map((r) => ({ key: r.key, value: r.isNan ? NaN : r.value, timestamp: r.timestamp, step: r.step })), more: rows.length > limit };
}

function dedupe(tags: KeyValue[]): KeyValue[] {
  return [...new Map(tags.map((t) => [t.key, t])).values()];
}

function isUniqueViolation(err: unknown): boolean {
  const e = err as { code?: string; cause?: { code?: string } };
  return e.code === '23505' || e.cause?.code === '23505';
}

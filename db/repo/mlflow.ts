// Storage for the MLflow-compatible tracking API: experiments with tags, runs with tags and a soft-delete
// lifecycle, checked parameter writes, and the run/experiment searches compiled from the filter grammar.
// Every function takes the caller's organization and never returns another organization's rows.
import { and, asc, eq, inArray, sql, type SQL } from 'drizzle-orm';
import { alias, type PgTable } from 'drizzle-orm/pg-core';
import type { Db } from '../client.js';
import { experimentTags, experiments, latestMetrics, runParams, runTags, runs } from '../schema/index.js';
import type { Comparison, OrderClause } from '../../lib/search-filter.js';
import type { RunRow } from './tracking.js';
import { runIoOf, type RunIo } from './logged-models.js';

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

/** Removes one experiment tag; false when the experiment has no tag with that key. */
export async function deleteExperimentTag(db: Db, experimentId: string, key: string): Promise<boolean> {
  const gone = await db
    .delete(experimentTags)
    .where(and(eq(experimentTags.experimentId, experimentId), eq(experimentTags.key, key)))
    .returning({ key: experimentTags.key });
  return gone.length > 0;
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

/** A tag test over the entity's rows of one tag key: a value comparison, or (IS [NOT] NULL) the tag's absence or presence. */
function tagTest(rowsWhere: (test: SQL) => SQL, value: SQL, c: Comparison): SQL {
  if (c.op === 'IS NULL') return sql`not exists (${rowsWhere(sql`true`)})`;
  if (c.op === 'IS NOT NULL') return sql`exists (${rowsWhere(sql`true`)})`;
  return sql`exists (${rowsWhere(compare(value, c))})`;
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
  if (c.entity === 'tag') return tagTest((test) => sql`select 1 from experiment_tags et where et.experiment_id = ${experiments.id} and et.key = ${c.key} and ${test}`, sql`et.value`, c);
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
      return tagTest((test) => sql`select 1 from run_tags rt where rt.run_id = ${runs.id} and rt.key = ${c.key} and ${test}`, sql`rt.value`, c);
    default:
      return compare(RUN_ATTRIBUTES[c.key]!, c);
  }
}

interface SortKey {
  col: SQL;
  ascending: boolean;
  /** The column is never null, so NULLS LAST is left out of its ORDER BY (see orderTerm). */
  notNull?: boolean;
  /** The table joined to supply the column: a run's metric, param or tag by key (at most one row per run). */
  join?: { table: PgTable; on: SQL };
}

const ORDER_TABLES = { param: runParams, tag: runTags } as const;

/**
 * The sort keys of an ORDER BY clause. A metric, param or tag is LEFT JOINed by (run_id, key), which is its
 * primary key, rather than looked up by a subquery: the value is then read once per run, not again in every
 * cursor comparison. A metric sorts as MLflow's does: numbers, then NaN, then runs without it, whichever the
 * direction (is_nan ascending, nulls last, ahead of the value).
 */
function runSortKeys(o: OrderClause, i: number): SortKey[] {
  if (o.entity === 'metric') {
    const t = alias(latestMetrics, `order${i}`);
    const join = { table: t, on: and(eq(t.runId, runs.id), eq(t.key, o.key))! };
    return [{ col: sql`${t.isNan}`, ascending: true, join }, { col: sql`${t.value}`, ascending: o.ascending }];
  }
  if (o.entity !== 'attribute') {
    const t = alias(ORDER_TABLES[o.entity], `order${i}`);
    return [{ col: sql`${t.value}`, ascending: o.ascending, join: { table: t, on: and(eq(t.runId, runs.id), eq(t.key, o.key))! } }];
  }
  // Start time sorts on the column itself (not its epoch-ms form) so the runs_search_idx index gives the order.
  if (o.key === 'start_time' || o.key === 'created') return [{ col: sql`${runs.startTime}`, ascending: o.ascending, notNull: true }];
  return [{ col: RUN_ATTRIBUTES[o.key]!, ascending: o.ascending, notNull: o.key !== 'end_time' }];
}

/**
 * MLflow sorts nulls last. A column that cannot be null leaves NULLS LAST out: an ascending index read
 * backwards yields DESC NULLS FIRST, and Postgres walks an index for a page (stopping after it) only when the
 * ORDER BY matches that exactly; without nulls both orders are the same.
 */
const orderTerm = (k: SortKey): SQL => sql`${k.col} ${sql.raw(k.ascending ? 'asc' : 'desc')}${sql.raw(k.notNull ? '' : ' nulls last')}`;

/**
 * Rows strictly after the cursor in the sort order (each key NULLS LAST): equal on every earlier key and after
 * on this one, for some key. The cursor holds each key's value as text; Postgres casts it to the key's type.
 */
function afterCursor(keys: SortKey[], cursor: (string | null)[]): SQL {
  const branches: SQL[] = [];
  keys.forEach((k, i) => {
    const v = cursor[i];
    // Under NULLS LAST nothing sorts after a NULL on its own key; ties continue on the next key.
    if (v === null || v === undefined) return;
    const equalBefore = keys.slice(0, i).map((e, j) => (cursor[j] === null ? sql`${e.col} is null` : sql`${e.col} = ${cursor[j]}`));
    const beyond = sql`${k.col} ${sql.raw(k.ascending ? '>' : '<')} ${v}`;
    const after = k.notNull ? beyond : sql`(${beyond} or ${k.col} is null)`;
    branches.push(sql.join([...equalBefore, after], sql` and `));
  });
  return branches.length ? sql`(${sql.join(branches.map((b) => sql`(${b})`), sql` or `)})` : sql`false`;
}

/** Where a page of a run search ends: the last run's sort-key values, as text. */
export type RunCursor = (string | null)[];

/**
 * One page of a run search. Pages continue from a cursor (the last row's sort keys, then start time and id,
 * which make the order total), so a deep page is found through the same ordered scan as the first instead of
 * counting past every earlier row. `offset` is still taken for the /v1 listing.
 */
export async function searchRuns(
  db: Db,
  organizationId: string,
  q: { experimentIds: string[]; filter: Comparison[]; orderBy: OrderClause[]; view: ViewType; offset?: number; after?: RunCursor | null; limit: number },
): Promise<{ rows: RunRow[]; more: boolean; next: RunCursor | null }> {
  if (q.experimentIds.length === 0) return { rows: [], more: false, next: null };
  // When the first sort key is a metric the filter also tests, every matching run has that metric: the search
  // walks latest_metrics' (key, value) index in sort order from the cursor and stops after one page, instead of
  // computing the key for every run of the experiments and sorting them all.
  const lead = q.orderBy[0];
  const driven = lead?.entity === 'metric' && q.filter.some((c) => c.entity === 'metric' && c.key === lead.key) ? lead : null;
  const lm0 = alias(latestMetrics, 'lm0');
  // (The driving join leaves NaN out, as the filter does, so its key needs no NaN ordering.)
  const keys = q.orderBy.flatMap((o, i): SortKey[] => (o === driven ? [{ col: sql`${lm0.value}`, ascending: o.ascending, notNull: true }] : runSortKeys(o, i)));
  if (!q.orderBy.some((o) => o.entity === 'attribute' && (o.key === 'start_time' || o.key === 'created'))) keys.push({ col: sql`${runs.startTime}`, ascending: false, notNull: true });
  keys.push({ col: sql`${runs.id}`, ascending: true, notNull: true });
  if (q.after && q.after.length !== keys.length) throw new RangeError(`the cursor has ${q.after.length} sort keys, this search ${keys.length}`);
  const sortValues = Object.fromEntries(keys.map((k, i) => [`k${i}`, sql<string | null>`(${k.col})::text`]));
  const onLead = (c: Comparison) => driven !== null && c.entity === 'metric' && c.key === driven.key;
  const base = db.select({ run: runs, ...sortValues }).from(runs).$dynamic();
  let from = driven ? base.innerJoin(lm0, and(eq(lm0.runId, runs.id), eq(lm0.key, driven.key), sql`not ${lm0.isNan}`)) : base;
  for (const k of keys) if (k.join) from = from.leftJoin(k.join.table, k.join.on);
  const leadCursor = driven && q.after?.[0] != null ? sql`${lm0.value} ${sql.raw(driven.ascending ? '>=' : '<=')} ${q.after[0]}` : undefined;
  const rows = await from
    .where(
      and(
        eq(runs.organizationId, organizationId),
        inArray(runs.experimentId, q.experimentIds),
        stageFilter(runs.lifecycleStage, q.view),
        ...q.filter.map((c) => (onLead(c) ? compare(sql`${lm0.value}`, c) : runCondition(c))),
        leadCursor, // the index range the cursor starts at; afterCursor then skips the ties already seen
        q.after ? afterCursor(keys, q.after) : undefined,
      ),
    )
    .orderBy(...keys.map(orderTerm))
    .limit(q.limit + 1)
    .offset(q.offset ?? 0);
  const more = rows.length > q.limit;
  const last = rows[q.limit - 1] as Record<string, unknown> | undefined;
  return { rows: rows.slice(0, q.limit).map((r) => r.run), more, next: more && last ? keys.map((_, i) => (last[`k${i}`] as string | null) ?? null) : null };
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
  /** Dataset inputs and model inputs/outputs (log-inputs, outputs). */
  io?: Map<string, RunIo>;
}

/**
 * Params, tags and latest metrics of several runs in one query (a search page's 100 runs otherwise cost three
 * round trips), plus their dataset and model inputs/outputs. Numbers come back as text, as in metricHistoryAfter.
 */
export async function runDataOf(db: Db, runIds: string[]): Promise<RunData> {
  const empty = <T>() => new Map<string, T[]>(runIds.map((id) => [id, []]));
  const out: RunData = { params: empty(), tags: empty(), metrics: empty() };
  if (runIds.length === 0) return out;
  const ids = sql`any(${sql.param(runIds)}::text[])`;
  const [result, io] = await Promise.all([
    db.execute(sql`
      select 'p' as kind, run_id, key, value, null as ts, null as step, false as is_nan from run_params where run_id = ${ids}
      union all
      select 't', run_id, key, value, null, null, false from run_tags where run_id = ${ids}
      union all
      select 'm', run_id, key, value::text, timestamp::text, step::text, is_nan from latest_metrics where run_id = ${ids}
      order by kind, key`),
    runIoOf(db, runIds),
  ]);
  out.io = io;
  type Row = { kind: 'p' | 't' | 'm'; run_id: string; key: string; value: string; ts: string | null; step: string | null; is_nan: boolean };
  for (const r of (result as unknown as { rows: Row[] }).rows) {
    if (r.kind === 'm') out.metrics.get(r.run_id)!.push({ key: r.key, value: r.is_nan ? NaN : Number(r.value), timestamp: Number(r.ts), step: Number(r.step) });
    else (r.kind === 'p' ? out.params : out.tags).get(r.run_id)!.push({ key: r.key, value: r.value });
  }
  return out;
}

function dedupe(tags: KeyValue[]): KeyValue[] {
  return [...new Map(tags.map((t) => [t.key, t])).values()];
}

function isUniqueViolation(err: unknown): boolean {
  const e = err as { code?: string; cause?: { code?: string } };
  return e.code === '23505' || e.cause?.code === '23505';
}

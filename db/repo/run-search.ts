// Run search: the MLflow filter and ORDER BY (lib/search-filter.ts) compiled to one keyset-paged query.
import { and, eq, inArray, sql, type SQL } from 'drizzle-orm';
import { alias, type PgTable } from 'drizzle-orm/pg-core';
import type { Db } from '../client.js';
import { latestMetrics, runParams, runTags, runs } from '../schema/index.js';
import type { Comparison, OrderClause } from '../../lib/search-filter.js';
import { compare, epochMs, stageFilter, tagTest, type ViewType } from './common.js';
import { statusSql, type RunRow } from './runs.js';

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
 * counting past every earlier row. `offset` answers the page at a position instead (the console's table jumping
 * to where its scroll bar was dropped): the same ordered scan, read past `offset` rows. A position has no index of
 * its own in Postgres (no order statistics), so a seek key for row N would cost the same walk of N index entries
 * to find; the offset is that walk without a second round trip, and at 10,000 runs it reads index entries for a
 * few milliseconds. Each offset page also answers the cursor after it, so reading on from a jump goes by keyset.
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

/** How many runs a search matches, all pages together (the runs table's total). */
export async function countRuns(db: Db, organizationId: string, q: { experimentIds: string[]; filter: Comparison[]; view: ViewType }): Promise<number> {
  if (q.experimentIds.length === 0) return 0;
  const [row] = await db
    .select({ n: sql<string>`count(*)` })
    .from(runs)
    .where(and(eq(runs.organizationId, organizationId), inArray(runs.experimentId, q.experimentIds), stageFilter(runs.lifecycleStage, q.view), ...q.filter.map(runCondition)));
  return Number(row?.n ?? 0);
}

/** The columns a runs table shows: some metrics, params and tags by key (empty: none of that kind). */
export interface RunColumns {
  metrics: string[];
  params: string[];
  tags: string[];
}

export interface RunColumnValues {
  metrics: Map<string, { key: string; value: number }[]>;
  params: Map<string, { key: string; value: string }[]>;
  tags: Map<string, { key: string; value: string }[]>;
}

/**
 * The asked columns of some runs, in one statement: each kind read by its primary key (run_id, key), so a run
 * with 5,000 metric keys costs the table only the keys it shows.
 */
export async function runColumnsOf(db: Db, runIds: string[], columns: RunColumns): Promise<RunColumnValues> {
  const empty = <T>() => new Map<string, T[]>(runIds.map((id) => [id, []]));
  const out: RunColumnValues = { metrics: empty(), params: empty(), tags: empty() };
  const parts: SQL[] = [];
  const ids = sql`any(${sql.param(runIds)}::text[])`;
  const keys = (k: string[]) => sql`any(${sql.param(k)}::text[])`;
  if (columns.metrics.length) parts.push(sql`select 'm' as kind, run_id, key, case when is_nan then 'NaN' else value::text end as value from latest_metrics where run_id = ${ids} and key = ${keys(columns.metrics)}`);
  // Every part names its kind column: the first part of a UNION names the result's columns, and it may be any of them.
  if (columns.params.length) parts.push(sql`select 'p' as kind, run_id, key, value from run_params where run_id = ${ids} and key = ${keys(columns.params)}`);
  if (columns.tags.length) parts.push(sql`select 't' as kind, run_id, key, value from run_tags where run_id = ${ids} and key = ${keys(columns.tags)}`);
  if (runIds.length === 0 || parts.length === 0) return out;
  const result = await db.execute(sql`${sql.join(parts, sql` union all `)} order by 1, 3`);
  for (const r of (result as unknown as { rows: { kind: string; run_id: string; key: string; value: string }[] }).rows) {
    if (r.kind === 'm') out.metrics.get(r.run_id)!.push({ key: r.key, value: Number(r.value) });
    else (r.kind === 'p' ? out.params : out.tags).get(r.run_id)!.push({ key: r.key, value: r.value });
  }
  return out;
}

// Metrics of runs: the writer (history rows and the latest value per key, one statement per batch) and the
// readers, one per concept: the latest values, a page of one key's full history (cursor-paged, as the wire JSON
// Postgres writes itself), and an evenly sampled history for charts (a different answer: a few points spread
// over the whole range, never a page).
import { eq, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../client.js';
import { latestMetrics } from '../schema/index.js';
import { auditWrites, type AuditEntry } from './auth.js';

export interface MetricPoint {
  key: string;
  value: number;
  timestamp: number;
  step: number;
}

const storedValue = (v: number): string => (Number.isNaN(v) ? '0' : String(v));

/**
 * The batch as one row set, bound once: one parameter per column whatever the batch size, unnested once and
 * materialized, so the history insert, the events and the latest values all read the same rows (binding the
 * arrays once per use tripled the parse and conversion work). `ord` is the point's place in the request: of two
 * points with the same step and timestamp, the later one is the latest.
 */
function pointRows(points: MetricPoint[]): SQL {
  const keys = sql.param(points.map((p) => p.key));
  const steps = sql.param(points.map((p) => String(p.step)));
  const timestamps = sql.param(points.map((p) => String(p.timestamp)));
  // Doubles travel as text: String() is the shortest exact form, and float8 parses "Infinity" and "-Infinity".
  const values = sql.param(points.map((p) => storedValue(p.value)));
  const nans = sql.param(points.map((p) => (Number.isNaN(p.value) ? 't' : 'f')));
  return sql`select key, step, ts, value::float8 as value, is_nan, ord
    from unnest(${keys}::text[], ${steps}::bigint[], ${timestamps}::bigint[], ${values}::text[], ${nans}::bool[]) with ordinality as u(key, step, ts, value, is_nan, ord)`;
}

/** The trainer's GPU telemetry keys (trainer/hanzo_ml/gpu_telemetry.py: MLflow system metrics). */
const GPU_KEY = '^system/(?:([^/]+)/)?gpu_([0-9]+)_(utilization_percentage|memory_usage_megabytes|temperature_celsius)$';
const mayHoldGpuTelemetry = (points: MetricPoint[]): boolean => points.some((p) => p.key.startsWith('system/'));

/**
 * The trainer's GPU telemetry among the points (`system/<node>/gpu_<i>_{utilization_percentage,
 * memory_usage_megabytes,temperature_celsius}`), one row per node, GPU and step that has all three: the
 * `hanzo.ml.gpu` events of the batch.
 */
const gpuSamples = sql`select coalesce(k.parts[1], 'main') as node, k.parts[2] as gpu, p.step,
      max(p.value) filter (where k.parts[3] = 'utilization_percentage') as utilization,
      max(p.value) filter (where k.parts[3] = 'memory_usage_megabytes') as memory_used,
      max(p.value) filter (where k.parts[3] = 'temperature_celsius') as temperature
    from p cross join lateral regexp_match(p.key, ${GPU_KEY}) as k(parts)
    where k.parts is not null and not p.is_nan
    group by 1, 2, 3
    having count(*) filter (where k.parts[3] = 'utilization_percentage') > 0
       and count(*) filter (where k.parts[3] = 'memory_usage_megabytes') > 0
       and count(*) filter (where k.parts[3] = 'temperature_celsius') > 0`;

/** The outbox rows of a batch: the `metrics` event of each step and, when the batch has telemetry, the `gpu` events. */
function eventRows(runId: string, points: MetricPoint[]): SQL {
  const stamp = sql`to_char(now() at time zone 'utc', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
  const metricEvents = sql`, events as (
      insert into outbox (organization_id, topic, key, payload)
      select r.organization_id, 'metrics', ${runId},
             jsonb_build_object('run_id', ${runId}::text, 'step', p.step, 'metrics', jsonb_object_agg(p.key, case when p.is_nan then null else p.value end), 'timestamp', ${stamp})
      from p join runs r on r.id = ${runId}
      group by r.organization_id, p.step
      order by p.step
    )`;
  if (!mayHoldGpuTelemetry(points)) return metricEvents;
  return sql`${metricEvents}, gpu_events as (
      insert into outbox (organization_id, topic, key, payload)
      select r.organization_id, 'gpu', g.node || '/' || g.gpu,
             jsonb_build_object('node_id', g.node, 'gpu_id', g.gpu, 'run_id', ${runId}::text, 'step', g.step,
               'utilization', g.utilization, 'memory_used', g.memory_used, 'temperature', g.temperature, 'timestamp', ${stamp})
      from (${gpuSamples}) g join runs r on r.id = ${runId}
      order by g.step, g.node, g.gpu
    )`;
}

/**
 * Stores a batch of metric points in one statement (so one transaction and one round trip): the history rows
 * are inserted in (key, step, timestamp, value) order, a replayed point being ignored by the primary key; the
 * latest value per key (by step, then timestamp, then place in the batch) is upserted in key order. Both orders
 * are total, so concurrent batches to one run take their row locks in the same order and cannot deadlock. The
 * `metrics` events of each step (contracts/events.ts) are outbox rows of the same statement: they commit with
 * the points or not at all. NaN travels as null (JSON has no NaN).
 */
export async function logMetrics(db: Db, runId: string, points: MetricPoint[], opts: { events?: boolean } = {}): Promise<void> {
  if (points.length === 0) return;
  await db.execute(sql`with p as materialized (${pointRows(points)}), ${metricWrites(runId, points, opts.events !== false)} select 1`);
}

/**
 * A logged batch as a request writes it: the run's check (in the caller's organization, active), the points
 * (as logMetrics) and the request's audit row, all in one statement, which needs no transaction of its own.
 * Training logs a batch every few steps, and on a loopback socket each round trip costs the server more than
 * the batch's rows: this is two round trips per request fewer than check, BEGIN, write, audit, COMMIT.
 * Nothing is written unless the run is active. Answers the run's lifecycle stage (null: no such run).
 */
export async function logRunMetrics(db: Db, organizationId: string, runId: string, points: MetricPoint[], entry: AuditEntry): Promise<'active' | 'deleted' | null> {
  const active = sql`exists (select 1 from run where lifecycle_stage = 'active')`;
  const result = await db.execute(sql`
    with run as (select lifecycle_stage from runs where id = ${runId} and organization_id = ${organizationId}),
    p as materialized (select * from (${pointRows(points)}) u where ${active}),
    ${metricWrites(runId, points, true)},
    ${auditWrites(entry, active)}
    select lifecycle_stage from run`);
  const [row] = (result as unknown as { rows: { lifecycle_stage: 'active' | 'deleted' }[] }).rows;
  return row?.lifecycle_stage ?? null;
}

/** The writes of a batch `p`, as data-modifying CTEs: history rows, their events, the latest value per key. */
function metricWrites(runId: string, points: MetricPoint[], events: boolean): SQL {
  return sql`history as (
      insert into metrics (run_id, key, step, timestamp, value, is_nan)
      select ${runId}, key, step, ts, value, is_nan from p
      order by key, step, ts, value
      on conflict do nothing
    )${events ? eventRows(runId, points) : sql``},
    latest as (
      insert into latest_metrics (run_id, key, step, timestamp, value, is_nan)
      select ${runId}, key, step, ts, value, is_nan
      from (select distinct on (key) key, step, ts, value, is_nan from p order by key, step desc, ts desc, ord desc) latest
      order by key
      on conflict (run_id, key) do update
        set step = excluded.step, timestamp = excluded.timestamp, value = excluded.value, is_nan = excluded.is_nan
        where (excluded.step, excluded.timestamp) >= (latest_metrics.step, latest_metrics.timestamp)
    )`;
}

export async function latestMetricsOf(db: Db, runId: string): Promise<Record<string, { value: number; step: number }>> {
  const rows = await db.select().from(latestMetrics).where(eq(latestMetrics.runId, runId));
  return Object.fromEntries(rows.map((r) => [r.key, { value: r.isNan ? NaN : r.value, step: r.step }]));
}

/** Where a page of metric history ends: the last point's (step, timestamp, stored value). */
export interface HistoryCursor {
  step: number;
  timestamp: number;
  value: number;
}

/**
 * Up to limit + 1 points of a metric's history after the cursor, in (step, timestamp, value) order: the primary
 * key's order, so a page is one index range scan however deep into a long series it starts. The extra row says
 * whether another page follows.
 */
function historyRange(runId: string, key: string, after: HistoryCursor | null, limit: number): SQL {
  return sql`
    select step, timestamp, value, is_nan from metrics
    where run_id = ${runId} and key = ${key}
      ${after ? sql`and (step, timestamp, value) > (${after.step}, ${after.timestamp}, ${String(after.value)}::float8)` : sql``}
    order by step, timestamp, value
    limit ${limit + 1}`;
}

const cursorOf = (last: [string, string, string]): HistoryCursor => ({ step: Number(last[0]), timestamp: Number(last[1]), value: Number(last[2]) });

/** A page of metric history: its points as the body of a JSON array, their count, and the cursor of the next page. */
export interface HistoryPage {
  json: string;
  count: number;
  next: HistoryCursor | null;
}

/**
 * One page of a metric's history, continuing after the cursor: the one history reader, behind MLflow's get-history
 * and get-history-bulk and the /v1 metrics route. The points are MLflow's wire objects
 * `{"key","value","timestamp","step"}` (plus `"run_id"` when asked), written by Postgres itself (float8's text form
 * is the shortest that reads back exact; NaN and the infinities as MLflow's strings), so a 25,000-point page
 * crosses to Node as one string instead of 25,000 rows to parse and re-serialize, and memory stays bounded by the
 * page however long the series. `byTime` orders the page's points by (timestamp, step, value), as
 * get-history-bulk answers; the page itself is always the next `limit` points in key order, and the cursor is
 * the page's last (limit-th) row in that order, which exists exactly when a next page does.
 */
export async function metricHistory(
  db: Db,
  runId: string,
  key: string,
  page: { after: HistoryCursor | null; limit: number; withRunId?: boolean; byTime?: boolean },
): Promise<HistoryPage> {
  const runIdField = page.withRunId ? sql`|| ',"run_id":' || ${JSON.stringify(runId)}::text` : sql``;
  const order = page.byTime ? sql`timestamp, step, value` : sql`n`;
  const result = await db.execute(sql`
    with fetched as (
      select *, row_number() over (order by step, timestamp, value) as n from (${historyRange(runId, key, page.after, page.limit)}) h
    )
    select
      coalesce(string_agg(
        '{"key":' || ${JSON.stringify(key)}::text || ',"value":' ||
        case when is_nan then '"NaN"' when value = 'Infinity'::float8 then '"Infinity"' when value = '-Infinity'::float8 then '"-Infinity"' else value::text end ||
        ',"timestamp":' || timestamp::text || ',"step":' || step::text ${runIdField} || '}', ',' order by ${order}) filter (where n <= ${page.limit}), '') as json,
      count(*) filter (where n <= ${page.limit})::int as count,
      max(json_build_array(step::text, timestamp::text, value::text)::text) filter (where n = ${page.limit}) as last,
      count(*) > ${page.limit} as more
    from fetched`);
  const [row] = (result as unknown as { rows: { json: string; count: number; more: boolean; last: string | null }[] }).rows;
  return { json: row?.json ?? '', count: Number(row?.count ?? 0), next: row?.more && row.last ? cursorOf(JSON.parse(row.last) as [string, string, string]) : null };
}

export interface SampledPoint {
  step: number;
  timestamp: number;
  value: number;
  is_nan: boolean;
}

/**
 * Up to `max` points of one run's metric, evenly sampled by row across [start, end] (NTILE buckets, first row of
 * each), always keeping the last point, as MLflow's SQL store does.
 */
export async function sampledMetricHistory(db: Db, runId: string, key: string, max: number, range: [number, number] | null): Promise<SampledPoint[]> {
  const where = sql`run_id = ${runId} and key = ${key}${range ? sql` and step >= ${range[0]} and step <= ${range[1]}` : sql``}`;
  const toPoint = (r: Record<string, unknown>): SampledPoint => ({ step: Number(r.step), timestamp: Number(r.timestamp), value: Number(r.value), is_nan: Boolean(r.is_nan) });
  const sampled = await db.execute(sql`
    with buckets as (
      select step, timestamp, value, is_nan, ntile(${max}::int) over (order by step, timestamp, value, is_nan) as bucket from metrics where ${where}
    ), ranked as (
      select step, timestamp, value, is_nan, row_number() over (partition by bucket order by step, timestamp, value, is_nan) as rn from buckets
    )
    select step, timestamp, value, is_nan from ranked where rn = 1 order by step, timestamp, value, is_nan`);
  const rows = (sampled as unknown as { rows: Record<string, unknown>[] }).rows.map(toPoint);
  const lastResult = await db.execute(sql`select step, timestamp, value, is_nan from metrics where ${where} order by step desc, timestamp desc, value desc, is_nan desc limit 1`);
  const [lastRow] = (lastResult as unknown as { rows: Record<string, unknown>[] }).rows;
  if (lastRow) {
    const last = toPoint(lastRow);
    const tail = rows[rows.length - 1];
    const same = tail && tail.step === last.step && tail.timestamp === last.timestamp && tail.value === last.value && tail.is_nan === last.is_nan;
    if (!same) {
      if (rows.length >= max) rows[rows.length - 1] = last;
      else rows.push(last);
    }
  }
  return rows;
}

// Metric series downsampled for charts: each (run, key) in at most `points` buckets of consecutive steps, each
// bucket its first and last step, its smallest and largest value and the value at its end. Computed by the
// catalogue in one statement for any number of series, reading each series' step range from the metrics
// primary key (run_id, key, step, ...), which carries every column read (is_nan included), so a settled history
// is read from the index alone and a million-point one never crosses to Node: what comes back is one row per series
// whose columns are JSON arrays Postgres wrote itself.
import { sql, type SQL } from 'drizzle-orm';
import type { Db } from '../client.js';

export interface SeriesRequest {
  /** (run, key) pairs; the answer keeps their order */
  series: { runId: string; key: string }[];
  fromStep?: number;
  toStep?: number;
  points: number;
  /** float32: values written with float32's shortest text (charts), else exactly */
  precision?: 'float64' | 'float32';
}

/** One series as JSON text of each column (arrays in bucket order), ready to splice into a response. */
export interface SeriesColumns {
  runId: string;
  key: string;
  count: number;
  fromStep: number | null;
  toStep: number | null;
  stepFirst: string;
  stepLast: string;
  min: string;
  max: string;
  last: string;
}

/** A double as a JSON value: NaN and the infinities as MLflow's strings (JSON has no literal for them). */
const wire = (v: string, precision: SeriesRequest['precision']) =>
  sql.raw(`case when ${v} = 'Infinity'::float8 then '"Infinity"' when ${v} = '-Infinity'::float8 then '"-Infinity"' ${precision === 'float32' ? float32Text(v) : ''} else ${v}::text end`);
/** float32's text where the value is in its range (a cast outside it is an error in Postgres, not a rounding). */
const float32Text = (v: string) => `when ${v} = 0 or abs(${v}) between 1.2e-38 and 3.4e38 then ${v}::float4::text`;

/**
 * The series, bucketed. Per series the range is [from, to] as asked, narrowed to the steps present (the first
 * and last step in range, each one index probe); a point's bucket is its place in that range scaled to `points`
 * (floor((step - lo) * points / (hi - lo + 1))), so buckets cover equal step spans, empty ones are absent, and
 * there are never more than `points`. The scan of each series is one index range (run_id, key, step between),
 * bucketed and written on its own: its grouping and sorts are of its own rows, in memory.
 * `last` is the value of the bucket's greatest (step, timestamp, value), as the latest value of a run is chosen
 * (steps and timestamps are below 2^53, so their float8 forms compare exactly).
 */
export async function downsampledSeries(db: Db, q: SeriesRequest): Promise<SeriesColumns[]> {
  // A compare page's 1,000 series in one statement took 2-3x as long as in four at once: one statement's grouping
  // of every bucket outgrows work_mem and runs on one backend. Four statements share the pool (Postgres runs them
  // side by side; PGlite one after another, as before).
  return (await Promise.all(statementParts(q).map((part) => seriesStatement(db, part)))).flat();
}

/** The request as the statements that answer it: one, or PARALLEL_STATEMENTS run side by side. */
export function statementParts(q: SeriesRequest): SeriesRequest[] {
  if (q.series.length <= SERIES_PER_STATEMENT) return [q];
  const size = Math.max(SERIES_PER_STATEMENT, Math.ceil(q.series.length / PARALLEL_STATEMENTS));
  const parts = [];
  for (let i = 0; i < q.series.length; i += size) parts.push({ ...q, series: q.series.slice(i, i + size) });
  return parts;
}

/** Series one statement buckets at least; a batch of more is split into PARALLEL_STATEMENTS statements. */
const SERIES_PER_STATEMENT = 50;
const PARALLEL_STATEMENTS = 4;

async function seriesStatement(db: Db, q: SeriesRequest): Promise<SeriesColumns[]> {
  if (q.series.length === 0) return [];
  const result = await db.execute(seriesQuery(q));
  const rows = (result as unknown as { rows: Record<string, string | null>[] }).rows;
  return rows.map((r) => ({
    runId: r.run_id!,
    key: r.key!,
    count: Number(r.count),
    fromStep: r.lo === null ? null : Number(r.lo),
    toStep: r.hi === null ? null : Number(r.hi),
    stepFirst: r.step_first!,
    stepLast: r.step_last!,
    min: r.min!,
    max: r.max!,
    last: r.last!,
  }));
}

/** The statement of one part (statementParts): exported for the console bench, which times it inside Postgres. */
export function seriesQuery(q: SeriesRequest): SQL {
  const runIds = sql.param(q.series.map((s) => s.runId));
  const keys = sql.param(q.series.map((s) => s.key));
  const from = q.fromStep ?? 0;
  const to = q.toStep ?? Number.MAX_SAFE_INTEGER;
  return sql`
    with s as (
      select run_id, key, ord from unnest(${runIds}::text[], ${keys}::text[]) with ordinality as u(run_id, key, ord)
    )
    select s.ord, s.run_id, s.key, r.lo::text as lo, r.hi::text as hi, coalesce(c.n, 0)::text as count,
      '[' || coalesce(c.step_first, '') || ']' as step_first, '[' || coalesce(c.step_last, '') || ']' as step_last,
      '[' || coalesce(c.min, '') || ']' as min, '[' || coalesce(c.max, '') || ']' as max, '[' || coalesce(c.last, '') || ']' as last
    from s
    cross join lateral (
      select
        (select m.step from metrics m where m.run_id = s.run_id and m.key = s.key and m.step >= ${from}::bigint and m.step <= ${to}::bigint order by m.step limit 1) as lo,
        (select m.step from metrics m where m.run_id = s.run_id and m.key = s.key and m.step >= ${from}::bigint and m.step <= ${to}::bigint order by m.step desc limit 1) as hi
    ) r
    -- Each series bucketed and written on its own (a lateral join: one index range scan, its buckets grouped in
    -- memory), not all series' rows joined, then sorted together by series and bucket (a sort that spilled to disk).
    left join lateral (
      select sum(n) as n,
        string_agg(sf::text, ',' order by b) as step_first,
        string_agg(sl::text, ',' order by b) as step_last,
        string_agg(coalesce(${wire('mn', q.precision)}, 'null'), ',' order by b) as min,
        string_agg(coalesce(${wire('mx', q.precision)}, 'null'), ',' order by b) as max,
        string_agg(case when lp[4] = 1 then '"NaN"' else ${wire('lp[3]', q.precision)} end, ',' order by b) as last
      from (
        -- The bucket's last point is the greatest (step, timestamp, value) array: max over arrays needs no sort.
        select floor((m.step - r.lo)::float8 * ${q.points}::int / (r.hi - r.lo + 1)::float8)::int as b,
          count(*) as n, min(m.step) as sf, max(m.step) as sl,
          min(m.value) filter (where not m.is_nan) as mn, max(m.value) filter (where not m.is_nan) as mx,
          max(array[m.step::float8, m.timestamp::float8, m.value, case when m.is_nan then 1 else 0 end]) as lp
        from metrics m
        where m.run_id = s.run_id and m.key = s.key and m.step >= r.lo and m.step <= r.hi
        group by 1
      ) agg
    ) c on true
    order by s.ord`;
}

/** A series as the JSON object of contracts/console.ts SeriesSchema, written without parsing its arrays. */
export function seriesJson(s: SeriesColumns): string {
  return (
    `{"run_id":${JSON.stringify(s.runId)},"key":${JSON.stringify(s.key)},"count":${s.count},"from_step":${s.fromStep ?? 'null'},"to_step":${s.toStep ?? 'null'},` +
    `"step_first":${s.stepFirst},"step_last":${s.stepLast},"min":${s.min},"max":${s.max},"last":${s.last}}`
  );
}

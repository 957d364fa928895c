import { randomUUID } from 'node:crypto';
import { and, asc, eq, gt, inArray, or, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../client.js';
import { experiments, latestMetrics, metrics, runArtifacts, runParams, runs } from '../schema/index.js';

export type RunRow = typeof runs.$inferSelect;
export interface MetricPoint {
  key: string;
  value: number;
  timestamp: number;
  step: number;
}

export async function getOrCreateExperiment(db: Db, organizationId: string, name: string, artifactRoot: string): Promise<string> {
  const id = randomUUID();
  await db
    .insert(experiments)
    .values({ id, organizationId, name, artifactLocation: `${artifactRoot}/experiments/${id}` })
    .onConflictDoNothing();
  const [row] = await db
    .select({ id: experiments.id })
    .from(experiments)
    .where(and(eq(experiments.organizationId, organizationId), eq(experiments.name, name)));
  return row!.id;
}

/** Creates a run with a caller-chosen ID, so a retried activity finds the run it already made. */
export async function createRun(
  db: Db,
  p: { id: string; organizationId: string; experimentId: string; name: string; userId: string; artifactRoot: string; config: unknown; params: Record<string, string> },
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
        artifactUri: `${p.artifactRoot}/runs/${p.id}/artifacts`,
        config: p.config,
      })
      .onConflictDoNothing();
    const params = Object.entries(p.params).map(([key, value]) => ({ runId: p.id, key, value }));
    if (params.length) await tx.insert(runParams).values(params).onConflictDoNothing();
  });
}

export async function getRun(db: Db, organizationId: string, id: string): Promise<RunRow | null> {
  const [row] = await db.select().from(runs).where(and(eq(runs.organizationId, organizationId), eq(runs.id, id)));
  return row ?? null;
}

/** Which of these run IDs are the organization's runs (one query, for requests that name many runs). */
export async function runIdsOf(db: Db, organizationId: string, ids: string[]): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const rows = await db
    .select({ id: runs.id })
    .from(runs)
    .where(and(eq(runs.organizationId, organizationId), inArray(runs.id, ids)));
  return new Set(rows.map((r) => r.id));
}

/** Run by ID alone, for the trainer's MLflow calls (the caller's organization is checked by the route). */
export async function getRunById(db: Db, id: string): Promise<RunRow | null> {
  const [row] = await db.select().from(runs).where(eq(runs.id, id));
  return row ?? null;
}

export async function setRunStatus(db: Db, id: string, status: RunRow['status']): Promise<void> {
  const ended = status === 'completed' || status === 'failed' || status === 'cancelled';
  await db.update(runs).set({ status, endTime: ended ? new Date() : null }).where(eq(runs.id, id));
}

const storedValue = (v: number): string => (Number.isNaN(v) ? '0' : String(v));

/** The newest point per key (by step, then timestamp; the later one on a tie), sorted by key. */
function latestPerKey(points: MetricPoint[]): MetricPoint[] {
  const latest = new Map<string, MetricPoint>();
  for (const p of points) {
    const cur = latest.get(p.key);
    if (!cur || p.step > cur.step || (p.step === cur.step && p.timestamp >= cur.timestamp)) latest.set(p.key, p);
  }
  return [...latest.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

/** Column arrays for unnest(): one bound parameter per column, whatever the batch size. */
function columns(points: MetricPoint[]): SQL {
  const keys = sql.param(points.map((p) => p.key));
  const steps = sql.param(points.map((p) => String(p.step)));
  const timestamps = sql.param(points.map((p) => String(p.timestamp)));
  // Doubles travel as text: String() is the shortest exact form, and float8 parses "Infinity" and "-Infinity".
  const values = sql.param(points.map((p) => storedValue(p.value)));
  const nans = sql.param(points.map((p) => (Number.isNaN(p.value) ? 't' : 'f')));
  return sql`unnest(${keys}::text[], ${steps}::bigint[], ${timestamps}::bigint[], ${values}::text[], ${nans}::bool[]) as p(key, step, ts, value, is_nan)`;
}

/**
 * Stores a batch of metric points in one statement (so one transaction and one round trip): the history rows
 * arrive as column arrays through unnest() and are inserted in (key, step, timestamp, value) order, a replayed
 * point being ignored by the primary key; the latest value per key is upserted in key order. Both orders are
 * total, so concurrent batches to one run take their row locks in the same order and cannot deadlock.
 */
export async function logMetrics(db: Db, runId: string, points: MetricPoint[], opts: { events?: boolean } = {}): Promise<void> {
  if (points.length === 0) return;
  // The `metrics` stream event of each step (contracts/events.ts), in the same statement: it commits with the
  // points or not at all. NaN travels as null (JSON has no NaN).
  const events =
    opts.events === false
      ? sql``
      : sql`, events as (
      insert into outbox (organization_id, topic, key, payload)
      select r.organization_id, 'metrics', ${runId},
             jsonb_build_object('run_id', ${runId}::text, 'step', p.step, 'metrics', jsonb_object_agg(p.key, case when p.is_nan then null else p.value::float8 end), 'timestamp', to_char(now() at time zone 'utc', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
      from ${columns(points)} join runs r on r.id = ${runId}
      group by r.organization_id, p.step
      order by p.step
    )`;
  await db.execute(sql`
    with history as (
      insert into metrics (run_id, key, step, timestamp, value, is_nan)
      select ${runId}, p.key, p.step, p.ts, p.value::float8, p.is_nan from ${columns(points)}
      order by p.key, p.step, p.ts, p.value::float8
      on conflict do nothing
    )${events}
    insert into latest_metrics (run_id, key, step, timestamp, value, is_nan)
    select ${runId}, p.key, p.step, p.ts, p.value::float8, p.is_nan from ${columns(latestPerKey(points))}
    order by p.key
    on conflict (run_id, key) do update
      set step = excluded.step, timestamp = excluded.timestamp, value = excluded.value, is_nan = excluded.is_nan
      where (excluded.step, excluded.timestamp) >= (latest_metrics.step, latest_metrics.timestamp)`);
}

export async function logParams(db: Db, runId: string, params: Record<string, string>): Promise<void> {
  const rows = Object.entries(params).map(([key, value]) => ({ runId, key, value }));
  if (rows.length) await db.insert(runParams).values(rows).onConflictDoNothing();
}

export async function latestMetricsOf(db: Db, runId: string): Promise<Record<string, { value: number; step: number }>> {
  const rows = await db.select().from(latestMetrics).where(eq(latestMetrics.runId, runId));
  return Object.fromEntries(rows.map((r) => [r.key, { value: r.isNan ? NaN : r.value, step: r.step }]));
}

export async function paramsOf(db: Db, runId: string): Promise<Record<string, string>> {
  const rows = await db.select().from(runParams).where(eq(runParams.runId, runId));
  return Object.fromEntries(rows.map((r) => [r.key, r.value]));
}

/** One page of a metric's history, ordered by step, continuing after the cursor (step, timestamp). */
export async function metricHistoryPage(
  db: Db,
  runId: string,
  key: string,
  opts: { after?: { step: number; timestamp: number }; limit: number },
): Promise<MetricPoint[]> {
  const where = [eq(metrics.runId, runId), eq(metrics.key, key)];
  if (opts.after)
    where.push(or(gt(metrics.step, opts.after.step), and(eq(metrics.step, opts.after.step), gt(metrics.timestamp, opts.after.timestamp)))!);
  const rows = await db
    .select()
    .from(metrics)
    .where(and(...where))
    .orderBy(asc(metrics.step), asc(metrics.timestamp))
    .limit(opts.limit);
  return rows.map((r) => ({ key: r.key, value: r.isNan ? NaN : r.value, step: r.step, timestamp: r.timestamp }));
}

export async function recordArtifact(
  db: Db,
  a: { runId: string; path: string; uri: string; sizeBytes: number; sha256: string; metadata?: Record<string, unknown> },
): Promise<void> {
  await db
    .insert(runArtifacts)
    .values({ ...a, metadata: a.metadata ?? {} })
    .onConflictDoNothing();
}

export async function artifactsOf(db: Db, runId: string): Promise<(typeof runArtifacts.$inferSelect)[]> {
  return db.select().from(runArtifacts).where(eq(runArtifacts.runId, runId)).orderBy(asc(runArtifacts.path));
}

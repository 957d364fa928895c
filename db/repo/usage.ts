// What finished train jobs used and cost, from the run tags their accounting writes when they end: the monthly
// usage report, the budget check, and the measured throughput that cost estimates prefer to a configured one.
import { sql, type SQL } from 'drizzle-orm';
import type { Db } from '../client.js';
import type { KeyValue } from './common.js';
import { fitThroughput, type ThroughputFit } from '../../lib/throughput-fit.js';

async function rows<T>(db: Db, q: SQL): Promise<T[]> {
  return ((await db.execute(q)) as unknown as { rows: T[] }).rows;
}

export interface JobTotals {
  seconds: number;
  deviceHours: number;
  /** null: the job ran without a price (hardware.price_per_device_hour_usd null and none configured) */
  costUsd: number | null;
  tokens: number;
  gpuType: string;
  method: string;
  baseModel: string;
  /** default: now */
  finishedAt?: Date;
}

const TAG = 'hanzo_ml.job.';

/** The run tags of a finished job's totals (spec 000's system metrics of the run). */
export function jobTotalTags(t: JobTotals): KeyValue[] {
  return [
    { key: `${TAG}duration_seconds`, value: String(t.seconds) },
    { key: `${TAG}device_hours`, value: String(t.deviceHours) },
    { key: `${TAG}cost_usd`, value: String(t.costUsd ?? 0) },
    { key: `${TAG}tokens`, value: String(t.tokens) },
    { key: `${TAG}gpu_type`, value: t.gpuType },
    { key: `${TAG}method`, value: t.method },
    { key: `${TAG}base_model`, value: t.baseModel },
    { key: `${TAG}finished_at`, value: (t.finishedAt ?? new Date()).toISOString() },
  ];
}

/** One tag's value per finished run, joined on the run that holds the finished_at tag. */
const tagOf = (key: string) => sql`(select value from run_tags t where t.run_id = f.run_id and t.key = ${TAG + key})`;

/** Finished jobs the fit reads: the newest first, enough to follow a change of hardware or code. */
const FIT_WINDOW = 50;

/**
 * Start-up and per-token device time of earlier finished jobs on the same device type, method and base model
 * (lib/throughput-fit.ts); null: none finished yet.
 */
export async function measuredThroughput(db: Db, k: { gpuType: string; method: string; baseModel: string }): Promise<ThroughputFit | null> {
  const points = await rows<{ tokens: number; hours: number }>(
    db,
    sql`select ${tagOf('tokens')}::float8 as tokens, ${tagOf('device_hours')}::float8 as hours
        from run_tags f
        where f.key = ${TAG + 'finished_at'} and ${tagOf('gpu_type')} = ${k.gpuType} and ${tagOf('method')} = ${k.method}
          and ${tagOf('base_model')} = ${k.baseModel} and ${tagOf('device_hours')}::float8 > 0 and ${tagOf('tokens')}::float8 > 0
        order by f.value desc
        limit ${FIT_WINDOW}`,
  );
  return fitThroughput(points.map((p) => ({ tokens: Number(p.tokens), deviceSeconds: Number(p.hours) * 3600 })));
}

export interface MonthlyUsage {
  organization_id: string;
  gpu_hours: number;
  cost_usd: number;
  jobs: number;
}

/** Start (inclusive) and end (exclusive) of a calendar month in UTC, from "YYYY-MM". */
export function monthBounds(month: string): { from: Date; to: Date } {
  const [y, m] = month.split('-').map(Number) as [number, number];
  return { from: new Date(Date.UTC(y, m - 1, 1)), to: new Date(Date.UTC(y, m, 1)) };
}

/** Totals of the jobs that finished in the month, per organization (only `organizationId`'s when given). */
export async function monthlyUsage(db: Db, month: string, organizationId?: string): Promise<MonthlyUsage[]> {
  const { from, to } = monthBounds(month);
  const org = organizationId === undefined ? sql`true` : sql`r.organization_id = ${organizationId}`;
  return rows<MonthlyUsage>(
    db,
    sql`select r.organization_id, coalesce(sum(${tagOf('device_hours')}::float8), 0)::float8 as gpu_hours,
               coalesce(sum(${tagOf('cost_usd')}::float8), 0)::float8 as cost_usd, count(*)::int as jobs
        from run_tags f join runs r on r.id = f.run_id
        where f.key = ${TAG + 'finished_at'} and f.value >= ${from.toISOString()} and f.value < ${to.toISOString()} and ${org}
        group by r.organization_id order by r.organization_id`,
  );
}

export interface MonthUsageRow extends MonthlyUsage {
  /** "YYYY-MM" */
  month: string;
}

/**
 * monthlyUsage of several months in one statement: each finished_at is matched to the month whose bounds hold it
 * (the same text comparison as monthlyUsage's), then totalled per month and organization. Months without a job
 * have no rows.
 */
export async function usageByMonth(db: Db, months: string[], organizationId?: string): Promise<MonthUsageRow[]> {
  if (months.length === 0) return [];
  const bounds = months.map(monthBounds);
  const org = organizationId === undefined ? sql`true` : sql`r.organization_id = ${organizationId}`;
  const list = (values: string[]) => sql`${sql.param(values)}::text[]`;
  return rows<MonthUsageRow>(
    db,
    sql`select m.month, r.organization_id, coalesce(sum(${tagOf('device_hours')}::float8), 0)::float8 as gpu_hours,
               coalesce(sum(${tagOf('cost_usd')}::float8), 0)::float8 as cost_usd, count(*)::int as jobs
        from unnest(${list(months)}, ${list(bounds.map((b) => b.from.toISOString()))}, ${list(bounds.map((b) => b.to.toISOString()))}) as m(month, lo, hi)
        join run_tags f on f.key = ${TAG + 'finished_at'} and f.value >= m.lo and f.value < m.hi
        join runs r on r.id = f.run_id
        where ${org}
        group by m.month, r.organization_id order by m.month, r.organization_id`,
  );
}

/** A model version trained by a finished job carries that job's device-hours, cost and tokens as version tags. */
export async function copyJobTotalsToVersion(db: Db, versionId: string, runId: string): Promise<void> {
  const keys = ['device_hours', 'cost_usd', 'tokens', 'gpu_type'].map((k) => TAG + k);
  await db.execute(
    sql`update model_versions set tags = tags || coalesce((select jsonb_object_agg(key, value) from run_tags
          where run_id = ${runId} and key in (${sql.join(keys.map((k) => sql`${k}`), sql`, `)})), '{}'::jsonb)
        where id = ${versionId}`,
  );
}

// The catalogue's side of the Prometheus metrics: every replica answers the same numbers because they come
// from the one catalogue, not from what this process happened to see.
import { sql, type SQL } from 'drizzle-orm';
import type { Db } from '../client.js';

async function rows<T>(db: Db, q: SQL): Promise<T[]> {
  return ((await db.execute(q)) as unknown as { rows: T[] }).rows;
}

/** Terminal pipeline stages; any other stage is a running (or, for `queued`, a waiting) pipeline. */
const TERMINAL = sql`('completed', 'failed')`;

export interface JobCount {
  type: string;
  status: string;
  org: string;
  n: number;
}

/**
 * Jobs by type, status and organization. `submitted` counts every job; the terminal statuses only grow, so each
 * series is a monotonic counter. Pipelines end `completed` or `failed`; sweeps `completed`, `cancelled`, `failed`.
 */
export async function jobCounts(db: Db): Promise<JobCount[]> {
  return rows<JobCount>(
    db,
    sql`select 'pipeline' as type, 'submitted' as status, organization_id as org, count(*)::int as n from pipelines group by organization_id
        union all select 'pipeline', stage, organization_id, count(*)::int from pipelines where stage in ${TERMINAL} group by stage, organization_id
        union all select 'hpo', 'submitted', organization_id, count(*)::int from hpo_sweeps group by organization_id
        union all select 'hpo', status, organization_id, count(*)::int from hpo_sweeps where status <> 'running' group by status, organization_id
        union all select 'train', 'completed', r.organization_id, count(*)::int from run_tags t join runs r on r.id = t.run_id where t.key = 'hanzo_ml.job.duration_seconds' group by r.organization_id`,
  );
}

export async function jobsRunning(db: Db): Promise<{ type: string; org: string; n: number }[]> {
  return rows(
    db,
    sql`select 'pipeline' as type, organization_id as org, count(*)::int as n from pipelines where stage not in ${TERMINAL} and stage <> 'queued' group by organization_id
        union all select 'hpo', organization_id, count(*)::int from hpo_sweeps where status = 'running' group by organization_id`,
  );
}

/**
 * Jobs waiting in the admission gate's queue (job_admissions, state "waiting"), by organization and priority
 * value (jobs/queue/kueue-objects.ts priorityValue; the metric names it).
 */
export async function queueDepth(db: Db): Promise<{ org: string; priority: number; n: number }[]> {
  return rows(db, sql`select organization_id as org, priority, count(*)::int as n from job_admissions where state = 'waiting' group by organization_id, priority`);
}

/** Device-hours of finished train jobs (run tags written when a job completes), by GPU type and organization. */
export async function gpuHours(db: Db): Promise<{ gpu_type: string; org: string; hours: number }[]> {
  return rows(
    db,
    sql`select coalesce(g.value, 'gpu') as gpu_type, r.organization_id as org, sum(h.value::float8)::float8 as hours
        from run_tags h join runs r on r.id = h.run_id left join run_tags g on g.run_id = h.run_id and g.key = 'hanzo_ml.job.gpu_type'
        where h.key = 'hanzo_ml.job.device_hours' group by 1, 2`,
  );
}

/** GPUs held by running train stages, from each pipeline's requested hardware. */
export async function gpusAllocated(db: Db): Promise<{ gpu_type: string; n: number }[]> {
  return rows(
    db,
    sql`select coalesce(input->'hardware'->>'gpu_type', 'gpu') as gpu_type,
               sum(coalesce((input->'hardware'->>'gpus_per_node')::int, 0) * coalesce((input->'hardware'->>'nodes')::int, 1))::int as n
        from pipelines where stage = 'train' group by 1`,
  );
}

export async function countsByOrg(db: Db, table: 'datasets' | 'model_versions'): Promise<{ org: string; n: number }[]> {
  return rows(db, sql`select organization_id as org, count(*)::int as n from ${sql.identifier(table)} group by organization_id`);
}

/** Finished job durations in seconds, by type (histograms are rebuilt from these on each scrape). */
export async function jobDurations(db: Db): Promise<{ type: string; seconds: number }[]> {
  return rows(
    db,
    sql`select 'pipeline' as type, extract(epoch from updated_at - created_at)::float8 as seconds from pipelines where stage in ${TERMINAL}
        union all select 'hpo', extract(epoch from updated_at - created_at)::float8 from hpo_sweeps where status <> 'running'
        union all select 'train', value::float8 from run_tags where key = 'hanzo_ml.job.duration_seconds'`,
  );
}

/** Bytes the catalogue records per bucket kind: dataset files; job outputs and logged artifacts. */
export async function storageBytes(db: Db): Promise<{ kind: string; bytes: number }[]> {
  return rows(
    db,
    sql`select 'datasets' as kind, coalesce(sum(size_bytes), 0)::float8 as bytes from datasets
        union all select 'checkpoints', (select coalesce(sum(size_bytes), 0) from run_artifacts)::float8 + (select coalesce(sum(size_bytes), 0) from artifact_objects)::float8`,
  );
}

/**
 * Running runs of pipeline train jobs (tagged hanzo_ml.pipeline_id or not): seconds since their last metric and
 * since their last checkpoint (or their start, before the first), for the stalled-training and
 * stale-checkpoint alerts.
 */
export async function runFreshness(db: Db): Promise<{ org: string; run_id: string; since_metric: number; since_checkpoint: number }[]> {
  return rows(
    db,
    sql`select r.organization_id as org, r.id as run_id,
               extract(epoch from now())::float8 - coalesce((select max(m.timestamp) from latest_metrics m where m.run_id = r.id) / 1000.0, extract(epoch from r.start_time))::float8 as since_metric,
               extract(epoch from now() - coalesce((select max(a.created_at) from run_artifacts a where a.run_id = r.id and a.path like 'checkpoints/%'), r.start_time))::float8 as since_checkpoint
        from runs r where r.status = 'running' and r.lifecycle_stage = 'active'`,
  );
}

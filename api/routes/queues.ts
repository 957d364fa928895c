// /v1/queues: the caller's organization's GPU queue: quota, what runs, what waits and at which position, and GPUs
// borrowed from the cohort (jobs/queue/queue-status.ts). An admin also sees every configured organization, as
// totals only; an admin of the operator organization (auth.dev_organization) sees every one in full. Each
// organization also carries the catalogue's side (contracts/console.ts QueueCatalogue): its jobs that hold or wait
// for GPUs, by job id (the queue names executor jobs, and knows nothing of jobs no admission gate tracks), and its
// GPUs per type against its quota.
import { Hono } from 'hono';
import { and, asc, inArray } from 'drizzle-orm';
import type { ApiDeps, AppEnv } from '../deps.js';
import { requireRole } from '../auth.js';
import type { Config } from '../../contracts/config.js';
import { JobQueuePlaceSchema } from '../../contracts/jobs.js';
import type { QueueActiveJob, QueueCatalogue, QueueGpuType } from '../../contracts/console.js';
import type { Db } from '../../db/client.js';
import type { JobRow } from '../../db/repo/jobs.js';
import { jobs } from '../../db/schema/index.js';
import { loadKubeConfig } from '../../jobs/executor/kubernetes.js';
import { queueStatus, totalsOnly } from '../../jobs/queue/queue-status.js';

/** Statuses of a job that holds GPUs (running) or will (validating, queued), or may again (paused). */
const ACTIVE = ['validating', 'queued', 'running', 'paused'];
/** The most active jobs answered per organization: the page lists, it does not page. */
const MAX_ACTIVE_JOBS = 500;
/** A job that asked for no GPU type. */
const ANY_TYPE = 'any';

export function queueRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();
  // On a cluster Kueue is read with the same credentials the worker creates Jobs with.
  const kube = deps.config.scheduler.executor === 'kubernetes' ? loadKubeConfig(deps.config.scheduler.kubeconfig) : null;

  app.get('/', async (c) => {
    const principal = requireRole(c, 'viewer');
    const orgs = principal.role === 'admin' ? [...new Set([principal.organizationId, ...Object.keys(deps.config.scheduler.quotas)])] : [principal.organizationId];
    const operator = principal.role === 'admin' && principal.organizationId === deps.config.auth.dev_organization;
    const queues = await queueStatus(deps.db, deps.config, kube, orgs);
    const active = await activeJobs(deps.db, orgs);
    return c.json({
      organizations: queues.map((q) => {
        const full = operator || q.organization === principal.organizationId;
        const catalogue = catalogueOf(deps.config, q.organization, active.get(q.organization) ?? []);
        return full ? { ...q, ...catalogue } : { ...totalsOnly(q), ...catalogue, active_jobs: [] };
      }),
    });
  });
  return app;
}

/** The organizations' jobs that hold or wait for GPUs, by organization. */
async function activeJobs(db: Db, orgs: string[]): Promise<Map<string, JobRow[]>> {
  const rows = await db
    .select()
    .from(jobs)
    .where(and(inArray(jobs.organizationId, orgs), inArray(jobs.status, ACTIVE)))
    .orderBy(asc(jobs.seq))
    .limit(MAX_ACTIVE_JOBS * orgs.length);
  const out = new Map<string, JobRow[]>();
  for (const r of rows) out.set(r.organizationId, [...(out.get(r.organizationId) ?? []), r]);
  return out;
}

/** GPUs a job asks for (every node) and of which type, from its submission; stage jobs without resources ask for none. */
function gpusOf(row: JobRow): { gpus: number; type: string | null } {
  const spec = row.spec as { resources?: { gpus?: number; gpu_type?: string | null }; distributed?: { num_nodes?: number; gpus_per_node?: number } } | null;
  const perNode = spec?.distributed?.gpus_per_node ?? spec?.resources?.gpus ?? 0;
  return { gpus: perNode * (spec?.distributed?.num_nodes ?? 1), type: spec?.resources?.gpu_type ?? null };
}

function activeJob(row: JobRow): QueueActiveJob {
  const place = row.status === 'queued' ? (JobQueuePlaceSchema.safeParse(row.queue).data ?? null) : null;
  const { gpus, type } = gpusOf(row);
  return {
    id: row.id,
    name: row.name,
    type: row.type,
    status: row.status,
    gpus,
    gpu_type: type,
    position: place?.position ?? null,
    reason: place?.reason ?? (row.status === 'queued' || row.status === 'validating' ? row.message : null),
    created_at: row.createdAt.toISOString(),
    started_at: row.startedAt?.toISOString() ?? null,
  };
}

/** Running jobs first (oldest first), then the waiting ones in queue order (no position: last, by arrival). */
const queueOrder = (a: QueueActiveJob, b: QueueActiveJob): number =>
  Number(a.status !== 'running') - Number(b.status !== 'running') || (a.position ?? Infinity) - (b.position ?? Infinity) || a.created_at.localeCompare(b.created_at);

/** Per GPU type: the organization's nominal quota (scheduler.quotas) and the GPUs its running jobs hold. */
export function gpuTypesOf(config: Config, org: string, active: QueueActiveJob[]): QueueGpuType[] {
  const quota = config.scheduler.quotas[org];
  const quotaOf = (type: string): number | null => {
    if (!quota) return null;
    if (typeof quota.max_gpus === 'number') return type === ANY_TYPE && config.scheduler.gpu_types.length === 0 ? quota.max_gpus : config.scheduler.gpu_types.includes(type) ? quota.max_gpus : null;
    return quota.max_gpus[type] ?? null;
  };
  const types = new Set<string>(config.scheduler.gpu_types);
  for (const j of active) if (j.status === 'running' && j.gpus > 0) types.add(j.gpu_type ?? ANY_TYPE);
  if (types.size === 0 && quota) types.add(ANY_TYPE);
  return [...types].sort().map((type) => ({
    gpu_type: type,
    quota: quotaOf(type),
    in_use: active.filter((j) => j.status === 'running' && (j.gpu_type ?? ANY_TYPE) === type).reduce((n, j) => n + j.gpus, 0),
  }));
}

function catalogueOf(config: Config, org: string, rows: JobRow[]): QueueCatalogue {
  const active = rows.map(activeJob).sort(queueOrder).slice(0, MAX_ACTIVE_JOBS);
  return { active_jobs: active, gpu_types: gpuTypesOf(config, org, active) };
}

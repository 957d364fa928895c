// What `hanzo-ml queue list` and GET /v1/queues show: per organization, its quota, what runs, what waits and
// where. Two sources: the admission gate's rows (jobs waiting for one of the organization's job slots, before any
// Job exists) and, on a cluster, Kueue itself (its ClusterQueue's usage and borrowing, and the Workloads waiting in
// its LocalQueue, in Kueue's own order).
import { CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node';
import type { Config, OrganizationQuota } from '../../contracts/config.js';
import type { Db } from '../../db/client.js';
import { listAdmissions } from '../../db/repo/admissions.js';
import { isAdmitted, isPending, listWorkloads, queueOrder, type Workload } from './kueue-status.js';
import { clusterQueueName, GPU_RESOURCE } from './kueue-objects.js';
import { jobNamespace } from './job-namespace.js';

export interface QueuedJob {
  job: string;
  /** waiting_for_slot: held by max_concurrent_jobs (no Job yet); queued: a suspended Job in Kueue; admitted: running or starting */
  stage: 'waiting_for_slot' | 'queued' | 'admitted';
  /** place among the organization's jobs at the same stage, 1 = next */
  position: number | null;
  gpus: number;
  reason: string | null;
}

export interface OrganizationQueue {
  organization: string;
  quota: OrganizationQuota | null;
  admitted: number;
  pending: number;
  /** GPUs its admitted jobs hold (Kueue's usage on a cluster; the gate's count locally) */
  gpus_in_use: number;
  /** GPUs it holds beyond its nominal quota, lent by idle organizations of the cohort (cluster only) */
  borrowed_gpus: number | null;
  jobs: QueuedJob[];
  /** true: another organization's queue as its totals only (jobs is empty, whatever runs) */
  totals_only: boolean;
}

/**
 * Another organization's queue as an organization's admin may see it: how much it holds and how much waits, not
 * what (job names carry its model and run names, reasons its limits).
 */
export const totalsOnly = (q: OrganizationQueue): OrganizationQueue => ({ ...q, jobs: [], totals_only: true });

interface ClusterQueueStatus {
  status?: { flavorsUsage?: { resources?: { name: string; total?: string; borrowed?: string }[] }[] };
}

const gpusOfWorkload = (w: Workload & { spec: { podSets?: { count: number; template: { spec: { containers: { resources?: { requests?: Record<string, string> } }[] } } }[] } }): number =>
  (w.spec.podSets ?? []).reduce((n, ps) => n + ps.count * ps.template.spec.containers.reduce((g, c) => g + Number(c.resources?.requests?.[GPU_RESOURCE] ?? 0), 0), 0);

const jobNameOfWorkload = (w: Workload & { metadata: { ownerReferences?: { kind: string; name: string }[] } }): string =>
  w.metadata.ownerReferences?.find((o) => o.kind === 'Job')?.name ?? w.metadata.name;

async function kueueView(kube: KubeConfig, config: Config, org: string): Promise<{ jobs: QueuedJob[]; inUse: number; borrowed: number }> {
  const custom = kube.makeApiClient(CustomObjectsApi);
  const workloads = (await listWorkloads(custom, jobNamespace(config.scheduler.namespace, org))).filter((w) => w.spec.queueName === org);
  const pending = workloads.filter(isPending).sort(queueOrder);
  const jobs: QueuedJob[] = [
    ...workloads.filter(isAdmitted).map((w) => ({ job: jobNameOfWorkload(w), stage: 'admitted' as const, position: null, gpus: gpusOfWorkload(w), reason: null })),
    ...pending.map((w, i) => ({ job: jobNameOfWorkload(w), stage: 'queued' as const, position: i + 1, gpus: gpusOfWorkload(w), reason: w.status?.conditions?.find((c) => c.type === 'QuotaReserved')?.message ?? null })),
  ];
  const cq = (await custom.getClusterCustomObject({ group: 'kueue.x-k8s.io', version: 'v1beta2', plural: 'clusterqueues', name: clusterQueueName(org) }).catch(() => ({}))) as ClusterQueueStatus;
  const gpuUsage = (cq.status?.flavorsUsage ?? []).flatMap((f) => f.resources ?? []).filter((r) => r.name === GPU_RESOURCE);
  return { jobs, inUse: gpuUsage.reduce((n, r) => n + Number(r.total ?? 0), 0), borrowed: gpuUsage.reduce((n, r) => n + Number(r.borrowed ?? 0), 0) };
}

/** The queues of the given organizations (on a cluster, `kube` reads Kueue; locally it is null). */
export async function queueStatus(db: Db, config: Config, kube: KubeConfig | null, organizations: string[]): Promise<OrganizationQueue[]> {
  const out: OrganizationQueue[] = [];
  for (const org of organizations) {
    const rows = await listAdmissions(db, org);
    const waiting = rows.filter((r) => r.state === 'waiting').map((r, i): QueuedJob => ({ job: r.jobName, stage: 'waiting_for_slot', position: i + 1, gpus: r.gpus, reason: 'waiting for one of the organization\'s job slots (max_concurrent_jobs)' }));
    const quota = config.scheduler.quotas[org] ?? null;
    if (kube && quota) {
      const k = await kueueView(kube, config, org);
      const jobs = [...k.jobs, ...waiting];
      out.push({ organization: org, quota, admitted: jobs.filter((j) => j.stage === 'admitted').length, pending: jobs.length - jobs.filter((j) => j.stage === 'admitted').length, gpus_in_use: k.inUse, borrowed_gpus: k.borrowed, jobs, totals_only: false });
      continue;
    }
    const admitted = rows.filter((r) => r.state === 'admitted').map((r): QueuedJob => ({ job: r.jobName, stage: 'admitted', position: null, gpus: r.gpus, reason: null }));
    out.push({ organization: org, quota, admitted: admitted.length, pending: waiting.length, gpus_in_use: admitted.reduce((n, j) => n + j.gpus, 0), borrowed_gpus: null, jobs: [...admitted, ...waiting], totals_only: false });
  }
  return out;
}

// A suspended Job's life in Kueue, read from its Workload: waiting for quota (with its place in the queue), admitted
// but waiting for the rest of its gang, or evicted (preempted) and back in the queue. Kueue names the Workload after
// the Job and labels it with the Job's uid (JOB_UID_LABEL).
import type { CustomObjectsApi } from '@kubernetes/client-node';

/** Where a queued job stands in its organization's queue (Kueue). */
export interface QueuePlace {
  /** the organization's queue */
  queue: string;
  /** 1 = next to be admitted among the queue's pending jobs (priority, then age); null once admitted */
  position: number | null;
  /** why it waits: quota, no capacity, the rest of its gang */
  reason: string;
}

/** The queue took a running job back (preempted to reclaim quota or for a higher priority): it will run again. */
export interface Eviction {
  reason: string;
  message: string;
  /** when the queue evicted it (ISO time): one eviction, however often it is read */
  at: string;
}

const GROUP = 'kueue.x-k8s.io';
const VERSION = 'v1beta2';

interface Condition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
  lastTransitionTime?: string;
}

export interface Workload {
  metadata: { name: string; creationTimestamp?: string; labels?: Record<string, string> };
  spec: { queueName?: string; priority?: number; active?: boolean };
  status?: { conditions?: Condition[]; admission?: unknown };
}

const condition = (w: Workload, type: string): Condition | undefined => w.status?.conditions?.find((c) => c.type === type);
const isTrue = (w: Workload, type: string): boolean => condition(w, type)?.status === 'True';

/** A namespace's Workloads; `cached` reads the API server's watch cache (resourceVersion 0), not etcd. */
export async function listWorkloads(api: CustomObjectsApi, namespace: string, opts: { cached?: boolean; labelSelector?: string } = {}): Promise<Workload[]> {
  const list = (await api.listNamespacedCustomObject({
    group: GROUP, version: VERSION, namespace, plural: 'workloads',
    ...(opts.cached ? { resourceVersion: '0' } : {}),
    ...(opts.labelSelector ? { labelSelector: opts.labelSelector } : {}),
  })) as { items: Workload[] };
  return list.items;
}

/** The label Kueue puts on a Job's Workload: the Job's uid. */
export const JOB_UID_LABEL = 'kueue.x-k8s.io/job-uid';

/** A Job's own Workload, read fresh (one object, found by the uid label Kueue gives it). */
export async function workloadOfJob(api: CustomObjectsApi, namespace: string, jobUid: string): Promise<Workload | undefined> {
  return (await listWorkloads(api, namespace, { labelSelector: `${JOB_UID_LABEL}=${jobUid}` }))[0];
}

/** Pending = in a queue and not holding quota; finished and deactivated workloads are not waiting. */
export const isPending = (w: Workload): boolean => !isTrue(w, 'QuotaReserved') && !isTrue(w, 'Finished') && w.spec.active !== false;
export const isAdmitted = (w: Workload): boolean => isTrue(w, 'Admitted') && !isTrue(w, 'Finished');

/** Kueue's own order within a BestEffortFIFO queue: higher priority first, then older first. */
export function queueOrder(a: Workload, b: Workload): number {
  return (b.spec.priority ?? 0) - (a.spec.priority ?? 0) || String(a.metadata.creationTimestamp).localeCompare(String(b.metadata.creationTimestamp));
}

/** Where a workload waits: its queue, its position among the queue's pending workloads, and Kueue's reason. */
export function queuePlace(w: Workload, sameQueue: Workload[]): QueuePlace {
  const queue = w.spec.queueName ?? '';
  if (!isPending(w)) {
    // Admitted but its Job still suspended or its pods not all running: waiting for the whole gang.
    const ready = condition(w, 'PodsReady');
    return { queue, position: null, reason: ready?.status === 'False' ? `admitted, waiting for all its pods (${ready.message ?? ready.reason ?? 'not ready'})` : 'admitted' };
  }
  const pending = sameQueue.filter((o) => o.spec.queueName === queue && isPending(o)).sort(queueOrder);
  const position = pending.findIndex((o) => o.metadata.name === w.metadata.name) + 1;
  const reserved = condition(w, 'QuotaReserved');
  return { queue, position: position > 0 ? position : null, reason: reserved?.message ?? 'waiting for the queue to admit it' };
}

/** The eviction that sent an admitted workload back to its queue, if that is what happened last. */
export function evictionOf(w: Workload): Eviction | null {
  const evicted = condition(w, 'Evicted');
  if (evicted?.status !== 'True') return null;
  return { reason: evicted.reason ?? 'Evicted', message: evicted.message ?? '', at: evicted.lastTransitionTime ?? new Date(0).toISOString() };
}

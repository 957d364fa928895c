// scheduler.quotas and scheduler.preemption as Kueue objects (v1beta2): a ResourceFlavor per gpu_type, a
// WorkloadPriorityClass per priority, a ClusterQueue per organization with its nominal GPU quota in one cohort
// (idle quota is lent and reclaimed), and a LocalQueue per organization in its own job namespace
// (namespace-objects.ts). Pure: rendering
// here, applying in kueue-apply.ts. The Kueue manager itself runs with the Helm chart's kueue.manager settings
// (all-or-nothing gangs, fair sharing, GPUs the only quota resource).
import type { Config, JobPriority, OrganizationQuota } from '../../contracts/config.js';
import { jobNamespace } from './job-namespace.js';
import { JOB_PRIORITIES } from '../../contracts/config.js';

/** An organization's nominal GPUs over every gpu_type. */
export function totalGpus(quota: OrganizationQuota, gpuTypes: string[]): number {
  if (typeof quota.max_gpus === 'number') return quota.max_gpus * Math.max(1, gpuTypes.length);
  return Object.values(quota.max_gpus).reduce((a, b) => a + b, 0);
}

export const KUEUE_API = 'kueue.x-k8s.io/v1beta2';
export const GPU_RESOURCE = 'nvidia.com/gpu';
export const GPU_TYPE_LABEL = 'hanzo-ml.dev/gpu-type';
export const QUEUE_NAME_LABEL = 'kueue.x-k8s.io/queue-name';
export const PRIORITY_CLASS_LABEL = 'kueue.x-k8s.io/priority-class';
export const MANAGED_BY = { 'app.kubernetes.io/managed-by': 'hanzo-ml' };

/** Priority values: far apart, so a cluster's own classes can sit between them. */
const PRIORITY_VALUES: Record<JobPriority, number> = { high: 10000, medium: 1000, low: 100 };
/** A flavor for GPUs of any type, when scheduler.gpu_types is empty. */
const ANY_GPU_FLAVOR = 'hanzo-ml-gpu';

export interface KueueObject {
  apiVersion: string;
  kind: 'ResourceFlavor' | 'WorkloadPriorityClass' | 'ClusterQueue' | 'LocalQueue';
  metadata: { name: string; namespace?: string; labels: Record<string, string> };
  [field: string]: unknown;
}

export const priorityClassName = (p: JobPriority): string => `hanzo-ml-${p}`;
export const clusterQueueName = (org: string): string => `hanzo-ml-${org}`;
export const localQueueName = (org: string): string => org;
export const flavorName = (gpuType: string): string => `hanzo-ml-${gpuType}`;
export const priorityRank = (p: JobPriority): number => JOB_PRIORITIES.length - JOB_PRIORITIES.indexOf(p);
export const priorityValue = (p: JobPriority): number => PRIORITY_VALUES[p];

/**
 * The Kueue objects for a configuration, in the order they must exist (flavors and classes before queues); none
 * without scheduler.quotas, so a cluster without Kueue runs jobs unqueued.
 */
export function renderKueueObjects(config: Config): KueueObject[] {
  const s = config.scheduler;
  const orgs = Object.entries(s.quotas);
  if (orgs.length === 0) return [];
  return [
    ...flavors(s.gpu_types),
    ...JOB_PRIORITIES.map((p) => priorityClass(p)),
    ...orgs.map(([org, quota]) => clusterQueue(org, quota, config)),
    ...orgs.map(([org]) => localQueue(org, jobNamespace(s.namespace, org))),
  ];
}

function flavors(gpuTypes: string[]): KueueObject[] {
  if (gpuTypes.length === 0) return [{ apiVersion: KUEUE_API, kind: 'ResourceFlavor', metadata: { name: ANY_GPU_FLAVOR, labels: MANAGED_BY }, spec: {} }];
  // Kueue adds the flavor's node labels to an admitted Job's pods, so a job lands on the GPU type it was given.
  return gpuTypes.map((t) => ({ apiVersion: KUEUE_API, kind: 'ResourceFlavor', metadata: { name: flavorName(t), labels: MANAGED_BY }, spec: { nodeLabels: { [GPU_TYPE_LABEL]: t } } }));
}

function priorityClass(p: JobPriority): KueueObject {
  return { apiVersion: KUEUE_API, kind: 'WorkloadPriorityClass', metadata: { name: priorityClassName(p), labels: MANAGED_BY }, value: PRIORITY_VALUES[p], description: `hanzo-ml ${p}-priority jobs` };
}

function gpuQuota(quota: OrganizationQuota, gpuType: string | null): number {
  if (typeof quota.max_gpus === 'number') return quota.max_gpus;
  return gpuType ? (quota.max_gpus[gpuType] ?? 0) : 0;
}

/**
 * An organization's ClusterQueue. A preemptible organization borrows idle quota from the cohort and gives it back
 * when its owner asks (its jobs are the victims of reclaim); a non-preemptible one never borrows (borrowingLimit
 * 0), so reclaim never touches it, and its own jobs never preempt each other. Preemption within a queue goes by
 * priority, lowest first (scheduler.preemption.policy).
 */
function clusterQueue(org: string, quota: OrganizationQuota, config: Config): KueueObject {
  const s = config.scheduler;
  const types = s.gpu_types.length > 0 ? s.gpu_types : [null];
  const preempt = s.preemption.enabled;
  return {
    apiVersion: KUEUE_API,
    kind: 'ClusterQueue',
    metadata: { name: clusterQueueName(org), labels: { ...MANAGED_BY, 'hanzo-ml.dev/organization': org } },
    spec: {
      cohortName: s.cohort,
      // Its organization's namespace only: no other organization's Job can enter its queue.
      namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': jobNamespace(s.namespace, org) } },
      queueingStrategy: 'BestEffortFIFO',
      resourceGroups: [
        {
          coveredResources: [GPU_RESOURCE],
          flavors: types.map((t) => ({
            name: t ? flavorName(t) : ANY_GPU_FLAVOR,
            // Quantities as strings, as the API server returns them, so a re-apply compares equal.
            resources: [{ name: GPU_RESOURCE, nominalQuota: String(gpuQuota(quota, t)), ...(quota.preemptible ? {} : { borrowingLimit: '0' }) }],
          })),
        },
      ],
      preemption: {
        reclaimWithinCohort: preempt ? 'Any' : 'Never',
        withinClusterQueue: preempt && quota.preemptible ? 'LowerPriority' : 'Never',
        borrowWithinCohort: { policy: 'Never' },
      },
      fairSharing: { weight: String(quota.weight) },
    },
  };
}

function localQueue(org: string, namespace: string): KueueObject {
  return { apiVersion: KUEUE_API, kind: 'LocalQueue', metadata: { name: localQueueName(org), namespace, labels: MANAGED_BY }, spec: { clusterQueue: clusterQueueName(org) } };
}

// Each organization's jobs run in a namespace of their own, <scheduler.namespace>-<organization>, so that one
// organization's Jobs, pods, Secrets and Workloads are out of another's reach and each has its own limits. Rendered
// here (pure), applied by `hanzo-ml cluster apply` (kueue-apply.ts), the one owner of per-organization objects:
//   - the Namespace, enforcing the "restricted" Pod Security Standard (non-root, no privilege escalation, every
//     capability dropped, seccomp RuntimeDefault, no host namespaces or host paths) at admission;
//   - a ResourceQuota: the most GPUs the organization can ever hold and the pods of its concurrent jobs;
//   - the worker's Role and RoleBinding there (and the API's, to read Workloads for GET /v1/queues);
//   - a NetworkPolicy: job pods accept nothing and reach only DNS, the object store and the API. The pods of one
//     multi-node job reach each other through a policy of that job's own (jobPeersPolicy), made with the Job.
import type { V1NetworkPolicy } from '@kubernetes/client-node';
import type { Config, EgressPeer, OrganizationQuota } from '../../contracts/config.js';
import { GPU_RESOURCE, MANAGED_BY, totalGpus } from './kueue-objects.js';
import { clusterOrganizations, jobNamespace } from './job-namespace.js';

export const JOB_LABEL = 'hanzo-ml.dev/job';
export const ORGANIZATION_LABEL = 'hanzo-ml.dev/organization';
/** torchrun's rendezvous (c10d store) on rank 0. */
export const RENDEZVOUS_PORT = 29500;
/** NCCL's socket transport listens on ephemeral ports: a gang's pods reach each other on all of them. */
export const NCCL_PORTS = { port: 1024, endPort: 65535 };
export const WORKER_ROLE = 'hanzo-ml-worker';
export const QUEUE_READER_ROLE = 'hanzo-ml-queue-reader';
export const JOB_NETWORK_POLICY = 'hanzo-ml-jobs';

export interface ClusterObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels: Record<string, string> };
  [field: string]: unknown;
}

/** The per-organization objects of a configuration, namespaces first. Throws, naming the key, on an egress it cannot express. */
export function renderNamespaceObjects(config: Config): ClusterObject[] {
  const orgs = clusterOrganizations(config);
  const egress = jobEgress(config);
  return [...orgs.map((org) => namespace(config, org)), ...orgs.flatMap((org) => organizationObjects(config, org, egress))];
}

function labelsOf(org: string): Record<string, string> {
  return { ...MANAGED_BY, [ORGANIZATION_LABEL]: org };
}

function namespace(config: Config, org: string): ClusterObject {
  const restricted = { 'pod-security.kubernetes.io/enforce': 'restricted', 'pod-security.kubernetes.io/enforce-version': 'latest' };
  return { apiVersion: 'v1', kind: 'Namespace', metadata: { name: jobNamespace(config.scheduler.namespace, org), labels: { ...labelsOf(org), ...restricted } } };
}

function organizationObjects(config: Config, org: string, egress: NetworkPolicyEgressRule[]): ClusterObject[] {
  const s = config.scheduler;
  const ns = jobNamespace(s.namespace, org);
  const quota = s.quotas[org];
  return [
    ...(quota ? [resourceQuota(config, org, ns, quota)] : []),
    ...(s.worker_service_account ? roleWithBinding(org, ns, WORKER_ROLE, WORKER_RULES, s.worker_service_account) : []),
    ...(s.api_service_account ? roleWithBinding(org, ns, QUEUE_READER_ROLE, QUEUE_READER_RULES, s.api_service_account) : []),
    {
      apiVersion: 'networking.k8s.io/v1',
      kind: 'NetworkPolicy',
      metadata: { name: JOB_NETWORK_POLICY, namespace: ns, labels: labelsOf(org) },
      // Every pod of the namespace (it holds jobs only): no ingress at all, egress only as listed.
      spec: { podSelector: {}, policyTypes: ['Ingress', 'Egress'], egress },
    },
  ];
}

/**
 * The organization's hard limits, a backstop behind Kueue (which admits by GPU quota): GPUs it can ever hold (its
 * own, plus what it may borrow from the cohort when preemptible) and one pod per node of each concurrent job.
 */
function resourceQuota(config: Config, org: string, ns: string, quota: OrganizationQuota): ClusterObject {
  const s = config.scheduler;
  const own = totalGpus(quota, s.gpu_types);
  const cohort = Object.values(s.quotas).reduce((n, q) => n + totalGpus(q, s.gpu_types), 0);
  const gpus = quota.preemptible ? cohort : own;
  return {
    apiVersion: 'v1',
    kind: 'ResourceQuota',
    metadata: { name: 'hanzo-ml-jobs', namespace: ns, labels: labelsOf(org) },
    // Quantities as strings, as the API server returns them, so a re-apply compares equal.
    spec: { hard: { [`requests.${GPU_RESOURCE}`]: String(gpus), pods: String(quota.max_concurrent_jobs * config.limits.max_nodes) } },
  };
}

interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

/** What the worker does in a job namespace (jobs/executor/kubernetes.ts), and nothing more. */
const WORKER_RULES: PolicyRule[] = [
  { apiGroups: ['batch'], resources: ['jobs'], verbs: ['create', 'get', 'list', 'watch', 'patch', 'delete'] },
  // The Job controller creates the pods; stop() deletes them with the job's grace period.
  { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch', 'delete'] },
  { apiGroups: [''], resources: ['pods/log'], verbs: ['get'] },
  // A job's own Secret (its token) and a multi-node job's headless Service and peers policy, adopted by its Job.
  { apiGroups: [''], resources: ['secrets'], verbs: ['create', 'patch', 'delete'] },
  { apiGroups: [''], resources: ['services'], verbs: ['create', 'get', 'patch', 'delete'] },
  { apiGroups: ['networking.k8s.io'], resources: ['networkpolicies'], verbs: ['create', 'get', 'patch', 'delete'] },
  // A queued Job's place in its queue, and whether it was preempted.
  { apiGroups: ['kueue.x-k8s.io'], resources: ['workloads'], verbs: ['get', 'list'] },
];

const QUEUE_READER_RULES: PolicyRule[] = [{ apiGroups: ['kueue.x-k8s.io'], resources: ['workloads'], verbs: ['get', 'list'] }];

function roleWithBinding(org: string, ns: string, name: string, rules: PolicyRule[], serviceAccount: string): ClusterObject[] {
  const [saNamespace, saName] = serviceAccount.split('/') as [string, string];
  return [
    { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: { name, namespace: ns, labels: labelsOf(org) }, rules },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name, namespace: ns, labels: labelsOf(org) },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
      subjects: [{ kind: 'ServiceAccount', name: saName, namespace: saNamespace }],
    },
  ];
}

interface NetworkPolicyPeer {
  ipBlock?: { cidr: string };
  namespaceSelector?: { matchLabels: Record<string, string> };
  podSelector?: { matchLabels: Record<string, string> };
}
interface NetworkPolicyPort {
  protocol: 'TCP' | 'UDP';
  port: number;
  endPort?: number;
}
export interface NetworkPolicyEgressRule {
  to: NetworkPolicyPeer[];
  ports: NetworkPolicyPort[];
}

/** The egress every job pod gets: DNS, the object store, the API. */
export function jobEgress(config: Config): NetworkPolicyEgressRule[] {
  const n = config.scheduler.job_network;
  const api = config.server.public_url ?? `http://${config.server.host}:${config.server.port}`;
  const dns = n.dns.ports ?? [53];
  return [
    { to: peersOf(n.dns, 'dns', null), ports: dns.flatMap((port) => [{ protocol: 'UDP' as const, port }, { protocol: 'TCP' as const, port }]) },
    { to: peersOf(n.object_store, 'object_store', config.storage.endpoint ?? null), ports: portsOf(n.object_store, config.storage.endpoint ?? null) },
    { to: peersOf(n.api, 'api', api), ports: portsOf(n.api, api) },
  ];
}

/** Addresses and pods as configured (either matches), else the URL's host when it is an address. */
function peersOf(peer: EgressPeer, key: string, url: string | null): NetworkPolicyPeer[] {
  const peers: NetworkPolicyPeer[] = peer.cidrs.map((cidr) => ({ ipBlock: { cidr } }));
  if (peer.namespace || peer.pod_labels) {
    peers.push({
      ...(peer.namespace ? { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': peer.namespace } } } : {}),
      ...(peer.pod_labels ? { podSelector: { matchLabels: peer.pod_labels } } : {}),
    });
  }
  if (peers.length > 0) return peers;
  const host = url ? new URL(url).hostname : '';
  if (/^\d{1,3}(\.\d{1,3}){3}$/.test(host)) return [{ ipBlock: { cidr: `${host}/32` } }];
  throw new Error(
    `scheduler.job_network.${key}: ${url ? `the host of ${url} is a name ("${host}")` : 'nothing to reach'}, and a NetworkPolicy allows addresses or pods: set its cidrs, or its namespace and pod_labels`,
  );
}

function portsOf(peer: EgressPeer, url: string | null): NetworkPolicyPort[] {
  if (peer.ports) return peer.ports.map((port) => ({ protocol: 'TCP', port }));
  const u = new URL(url!);
  return [{ protocol: 'TCP', port: Number(u.port || (u.protocol === 'https:' ? 443 : 80)) }];
}

/**
 * The pods of one multi-node job reach each other, and only each other, on the rendezvous port and NCCL's
 * ports; the namespace's policy denies everything else. Created with the Job and owned by it. Typed for the
 * client's NetworkingV1Api, whose models name a peer list `_from` (serialized as `from`): a plain `from` would be
 * dropped, and an ingress rule without peers admits every pod.
 */
export function jobPeersPolicy(namespace: string, job: string): V1NetworkPolicy {
  const peers = [{ podSelector: { matchLabels: { [JOB_LABEL]: job } } }];
  const ports: NetworkPolicyPort[] = [{ protocol: 'TCP', port: RENDEZVOUS_PORT }, { protocol: 'TCP', ...NCCL_PORTS }];
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: { name: `${job}-peers`, namespace, labels: { ...MANAGED_BY, [JOB_LABEL]: job } },
    spec: { podSelector: { matchLabels: { [JOB_LABEL]: job } }, policyTypes: ['Ingress', 'Egress'], ingress: [{ _from: peers, ports }], egress: [{ to: peers, ports }] },
  };
}

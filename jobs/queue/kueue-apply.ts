// `hanzo-ml cluster apply`: makes the cluster's per-organization objects (namespace-objects.ts: namespaces, quotas,
// the worker's RBAC, network policies) and Kueue objects (kueue-objects.ts) what the configuration says,
// idempotently, and says what changed. Server-side apply under our own field manager: a second run with the same
// configuration changes nothing, and objects we made for an organization no longer configured are deleted, except
// its namespace (deleting it would delete its jobs and their Secrets: an operator does that knowingly).
import { KubernetesObjectApi, PatchStrategy, type KubeConfig, type KubernetesObject } from '@kubernetes/client-node';
import type { Config } from '../../contracts/config.js';
import { KUEUE_API, MANAGED_BY, renderKueueObjects } from './kueue-objects.js';
import { ORGANIZATION_LABEL, renderNamespaceObjects, type ClusterObject } from './namespace-objects.js';

export type ApplyOutcome = 'created' | 'configured' | 'unchanged' | 'deleted';
export interface AppliedObject {
  kind: string;
  name: string;
  namespace?: string;
  outcome: ApplyOutcome;
}

const FIELD_MANAGER = 'hanzo-ml';
const isStatus = (err: unknown, code: number): boolean => (err as { code?: number }).code === code;

/** Kinds we prune, in deletion order: Kueue's queues before flavors and classes, then the organizations' objects. */
const PRUNED: { apiVersion: string; kind: string; selector: string }[] = [
  ...['LocalQueue', 'ClusterQueue', 'ResourceFlavor', 'WorkloadPriorityClass'].map((kind) => ({ apiVersion: KUEUE_API, kind, selector: selectorOf(MANAGED_BY) })),
  // Only what cluster apply made (it carries the organization label); a job's own peers policy is its Job's.
  ...[['networking.k8s.io/v1', 'NetworkPolicy'], ['rbac.authorization.k8s.io/v1', 'RoleBinding'], ['rbac.authorization.k8s.io/v1', 'Role'], ['v1', 'ResourceQuota']].map(([apiVersion, kind]) => ({
    apiVersion: apiVersion!,
    kind: kind!,
    selector: `${selectorOf(MANAGED_BY)},${ORGANIZATION_LABEL}`,
  })),
];

function selectorOf(labels: Record<string, string>): string {
  return Object.entries(labels).map(([k, v]) => `${k}=${v}`).join(',');
}

/** Renders everything first (a configuration that cannot be expressed applies nothing), then applies and prunes. */
export async function applyClusterObjects(config: Config, kubeConfig: KubeConfig): Promise<AppliedObject[]> {
  const api = KubernetesObjectApi.makeApiClient(kubeConfig);
  const wanted: ClusterObject[] = [...renderNamespaceObjects(config), ...renderKueueObjects(config)];
  const out: AppliedObject[] = [];
  for (const obj of wanted) out.push(await applyOne(api, obj));
  for (const kind of PRUNED) out.push(...(await pruneKind(api, kind, wanted)));
  return out;
}

async function readOrNull(api: KubernetesObjectApi, obj: ClusterObject): Promise<KubernetesObject | null> {
  try {
    return await api.read({ apiVersion: obj.apiVersion, kind: obj.kind, metadata: { name: obj.metadata.name, ...(obj.metadata.namespace ? { namespace: obj.metadata.namespace } : {}) } });
  } catch (err) {
    if (isStatus(err, 404)) return null;
    throw err;
  }
}

async function applyOne(api: KubernetesObjectApi, obj: ClusterObject): Promise<AppliedObject> {
  const before = await readOrNull(api, obj);
  const after = await api.patch(obj as KubernetesObject, undefined, undefined, FIELD_MANAGER, true, PatchStrategy.ServerSideApply);
  const outcome: ApplyOutcome = !before ? 'created' : sameContent(before, after) ? 'unchanged' : 'configured';
  return { kind: obj.kind, name: obj.metadata.name, ...(obj.metadata.namespace ? { namespace: obj.metadata.namespace } : {}), outcome };
}

/** Labels and everything but metadata and status (Kueue updates a queue's status, and so its resourceVersion, all the time). */
function sameContent(a: KubernetesObject, b: KubernetesObject): boolean {
  const content = ({ metadata, status: _s, ...rest }: KubernetesObject & { status?: unknown }) => JSON.stringify([metadata?.labels, rest]);
  return content(a) === content(b);
}

async function pruneKind(api: KubernetesObjectApi, target: (typeof PRUNED)[number], wanted: ClusterObject[]): Promise<AppliedObject[]> {
  const { apiVersion, kind, selector } = target;
  const keep = new Set(wanted.filter((o) => o.kind === kind).map((o) => `${o.metadata.namespace ?? ''}/${o.metadata.name}`));
  const existing = await api.list(apiVersion, kind, undefined, undefined, undefined, undefined, undefined, selector).then(
    (l) => l.items,
    // A cluster without Kueue has none of its kinds, and nothing of them to prune.
    (err: unknown) => {
      if (isStatus(err, 404) && apiVersion === KUEUE_API) return [];
      throw err;
    },
  );
  const out: AppliedObject[] = [];
  for (const item of existing) {
    const name = item.metadata?.name ?? '';
    const namespace = item.metadata?.namespace;
    if (keep.has(`${namespace ?? ''}/${name}`)) continue;
    // A ClusterQueue with workloads waits for them to finish (Kueue's finalizer) before it is gone.
    await api.delete({ apiVersion, kind, metadata: { name, ...(namespace ? { namespace } : {}) } }).catch((err: unknown) => {
      if (!isStatus(err, 404)) throw err;
    });
    out.push({ kind, name, ...(namespace ? { namespace } : {}), outcome: 'deleted' });
  }
  return out;
}

/** One line per object, as `kubectl apply` prints them. */
export function describeApplied(objects: AppliedObject[]): string {
  return objects.map((o) => `${o.kind.toLowerCase()}/${o.name}${o.namespace ? ` (namespace ${o.namespace})` : ''} ${o.outcome}`).join('\n');
}

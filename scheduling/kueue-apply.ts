// `hanzo-ml cluster apply`: makes the cluster's Kueue objects what the configuration says, idempotently, and says
// what changed. Server-side apply under our own field manager: a second run with the same configuration changes
// nothing, and objects we made for an organization no longer configured are deleted.
import { CoreV1Api, KubernetesObjectApi, PatchStrategy, type KubeConfig, type KubernetesObject } from '@kubernetes/client-node';
import type { Config } from '../contracts/config.js';
import { KUEUE_API, MANAGED_BY, renderKueueObjects, type KueueObject } from './kueue-objects.js';

export type ApplyOutcome = 'created' | 'configured' | 'unchanged' | 'deleted';
export interface AppliedObject {
  kind: string;
  name: string;
  namespace?: string;
  outcome: ApplyOutcome;
}

const FIELD_MANAGER = 'hanzo-ml';
const isStatus = (err: unknown, code: number): boolean => (err as { code?: number }).code === code;

export async function applyKueueObjects(config: Config, kubeConfig: KubeConfig): Promise<AppliedObject[]> {
  const api = KubernetesObjectApi.makeApiClient(kubeConfig);
  const out: AppliedObject[] = [];
  const ns = await ensureNamespace(kubeConfig, config.scheduler.namespace);
  if (ns) out.push(ns);
  const wanted = renderKueueObjects(config);
  for (const obj of wanted) out.push(await applyOne(api, obj));
  // LocalQueues before ClusterQueues before flavors and classes: the reverse of creation.
  for (const kind of ['LocalQueue', 'ClusterQueue', 'ResourceFlavor', 'WorkloadPriorityClass'] as const) out.push(...(await pruneKind(api, kind, wanted)));
  return out;
}

async function ensureNamespace(kubeConfig: KubeConfig, name: string): Promise<AppliedObject | null> {
  const core = kubeConfig.makeApiClient(CoreV1Api);
  try {
    await core.readNamespace({ name });
    return null;
  } catch (err) {
    if (!isStatus(err, 404)) throw err;
  }
  await core.createNamespace({ body: { metadata: { name, labels: MANAGED_BY } } });
  return { kind: 'Namespace', name, outcome: 'created' };
}

async function readOrNull(api: KubernetesObjectApi, obj: KueueObject): Promise<KubernetesObject | null> {
  try {
    return await api.read({ apiVersion: obj.apiVersion, kind: obj.kind, metadata: { name: obj.metadata.name, ...(obj.metadata.namespace ? { namespace: obj.metadata.namespace } : {}) } });
  } catch (err) {
    if (isStatus(err, 404)) return null;
    throw err;
  }
}

async function applyOne(api: KubernetesObjectApi, obj: KueueObject): Promise<AppliedObject> {
  const before = await readOrNull(api, obj);
  const after = await api.patch(obj as KubernetesObject, undefined, undefined, FIELD_MANAGER, true, PatchStrategy.ServerSideApply);
  const outcome: ApplyOutcome = !before ? 'created' : sameContent(before, after) ? 'unchanged' : 'configured';
  return { kind: obj.kind, name: obj.metadata.name, ...(obj.metadata.namespace ? { namespace: obj.metadata.namespace } : {}), outcome };
}

/** Everything but metadata and status (Kueue updates a queue's status, and so its resourceVersion, all the time). */
function sameContent(a: KubernetesObject, b: KubernetesObject): boolean {
  const content = ({ metadata: _m, status: _s, ...rest }: KubernetesObject & { status?: unknown }) => JSON.stringify(rest);
  return content(a) === content(b);
}

async function pruneKind(api: KubernetesObjectApi, kind: KueueObject['kind'], wanted: KueueObject[]): Promise<AppliedObject[]> {
  const keep = new Set(wanted.filter((o) => o.kind === kind).map((o) => `${o.metadata.namespace ?? ''}/${o.metadata.name}`));
  const selector = Object.entries(MANAGED_BY).map(([k, v]) => `${k}=${v}`).join(',');
  const existing = (await api.list(KUEUE_API, kind, undefined, undefined, undefined, undefined, undefined, selector)).items;
  const out: AppliedObject[] = [];
  for (const item of existing) {
    const name = item.metadata?.name ?? '';
    const namespace = item.metadata?.namespace;
    if (keep.has(`${namespace ?? ''}/${name}`)) continue;
    // A ClusterQueue with workloads waits for them to finish (Kueue's finalizer) before it is gone.
    await api.delete({ apiVersion: KUEUE_API, kind, metadata: { name, ...(namespace ? { namespace } : {}) } }).catch((err: unknown) => {
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

// A container's environment, resolved as a kubelet resolves it: `envFrom` sources first, in order, then `env`
// entries (later ones win), each value expanded with `$(NAME)` against what is defined so far.
import type { CoreV1Api, V1ConfigMap, V1Container, V1Pod, V1ResourceRequirements, V1Secret } from '@kubernetes/client-node';

/** A reference that cannot be resolved yet; the kubelet reports it as CreateContainerConfigError and retries. */
export class ContainerConfigError extends Error {}

/** Expands `$(NAME)` from `vars`; `$$(NAME)` is an escaped literal; an unknown name is left as written. */
export function expandVars(text: string, vars: Record<string, string>): string {
  return text.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)/g, (match, name: string | undefined) => {
    if (match === '$$') return '$';
    return name !== undefined && name in vars ? vars[name]! : match;
  });
}

class SourceCache {
  private secrets = new Map<string, V1Secret | null>();
  private configMaps = new Map<string, V1ConfigMap | null>();
  constructor(
    private core: CoreV1Api,
    private namespace: string,
  ) {}

  async secret(name: string): Promise<Record<string, string> | null> {
    if (!this.secrets.has(name)) this.secrets.set(name, await this.core.readNamespacedSecret({ name, namespace: this.namespace }).catch(notFoundAsNull));
    const s = this.secrets.get(name);
    if (!s) return null;
    return Object.fromEntries(Object.entries(s.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]));
  }

  async configMap(name: string): Promise<Record<string, string> | null> {
    if (!this.configMaps.has(name)) this.configMaps.set(name, await this.core.readNamespacedConfigMap({ name, namespace: this.namespace }).catch(notFoundAsNull));
    const c = this.configMaps.get(name);
    if (!c) return null;
    const binary = Object.entries(c.binaryData ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]);
    return { ...Object.fromEntries(binary), ...(c.data ?? {}) };
  }
}

function notFoundAsNull(err: unknown): null {
  if ((err as { code?: number }).code === 404) return null;
  throw err;
}

function fieldValue(pod: V1Pod, path: string): string {
  const subscript = /^metadata\.(labels|annotations)\['(.+)'\]$/.exec(path);
  if (subscript) {
    const map = subscript[1] === 'labels' ? pod.metadata?.labels : pod.metadata?.annotations;
    return map?.[subscript[2]!] ?? '';
  }
  switch (path) {
    case 'metadata.name':
      return pod.metadata?.name ?? '';
    case 'metadata.namespace':
      return pod.metadata?.namespace ?? '';
    case 'metadata.uid':
      return pod.metadata?.uid ?? '';
    case 'spec.nodeName':
      return pod.spec?.nodeName ?? '';
    case 'spec.serviceAccountName':
      return pod.spec?.serviceAccountName ?? '';
    case 'status.podIP':
    case 'status.podIPs':
    case 'status.hostIP':
    case 'status.hostIPs':
      return '127.0.0.1';
    default:
      throw new ContainerConfigError(`unsupported fieldRef fieldPath "${path}"`);
  }
}

const BINARY_SUFFIX: Record<string, number> = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60 };
const DECIMAL_SUFFIX: Record<string, number> = { n: 1e-9, u: 1e-6, m: 1e-3, '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18 };

/** A Kubernetes quantity ("500m", "2Gi", "1e3") as a number. */
export function parseQuantity(q: string): number {
  const m = /^([+-]?[0-9.]+(?:[eE][+-]?\d+)?)([a-zA-Z]*)$/.exec(q.trim());
  if (!m) throw new ContainerConfigError(`bad quantity "${q}"`);
  const factor = BINARY_SUFFIX[m[2]!] ?? DECIMAL_SUFFIX[m[2]!];
  if (factor === undefined) throw new ContainerConfigError(`bad quantity "${q}"`);
  return Number(m[1]) * factor;
}

/** `resourceFieldRef` (limits.cpu, requests.memory, ...), rounded up in units of the divisor, like the kubelet. */
function resourceValue(resources: V1ResourceRequirements | undefined, resource: string, divisor: string | undefined): string {
  const [kind, name] = resource.split('.') as ['limits' | 'requests', string];
  const raw = resources?.[kind]?.[name] ?? (kind === 'requests' ? resources?.limits?.[name] : undefined);
  if (raw === undefined) return '0';
  return String(Math.ceil(parseQuantity(String(raw)) / parseQuantity(divisor ?? '1')));
}

async function envFromSources(container: V1Container, sources: SourceCache, env: Record<string, string>): Promise<void> {
  for (const from of container.envFrom ?? []) {
    const ref = from.secretRef ?? from.configMapRef;
    if (!ref) continue;
    const kind = from.secretRef ? 'secret' : 'configmap';
    const name = ref.name ?? '';
    const data = from.secretRef ? await sources.secret(name) : await sources.configMap(name);
    if (!data) {
      if (ref.optional) continue;
      throw new ContainerConfigError(`${kind} "${name}" not found`);
    }
    for (const [k, v] of Object.entries(data)) env[(from.prefix ?? '') + k] = v;
  }
}

export async function containerEnv(core: CoreV1Api, pod: V1Pod, container: V1Container): Promise<Record<string, string>> {
  const sources = new SourceCache(core, pod.metadata?.namespace ?? 'default');
  const env: Record<string, string> = {};
  await envFromSources(container, sources, env);
  for (const e of container.env ?? []) {
    const from = e.valueFrom;
    if (!from) {
      env[e.name] = expandVars(e.value ?? '', env);
    } else if (from.fieldRef) {
      env[e.name] = fieldValue(pod, from.fieldRef.fieldPath);
    } else if (from.resourceFieldRef) {
      env[e.name] = resourceValue(container.resources, from.resourceFieldRef.resource, from.resourceFieldRef.divisor as string | undefined);
    } else {
      const ref = from.secretKeyRef ?? from.configMapKeyRef;
      if (!ref) continue;
      const kind = from.secretKeyRef ? 'secret' : 'configmap';
      const name = ref.name ?? '';
      const data = from.secretKeyRef ? await sources.secret(name) : await sources.configMap(name);
      const value = data?.[ref.key];
      if (value !== undefined) env[e.name] = value;
      else if (!ref.optional) throw new ContainerConfigError(data ? `couldn't find key ${ref.key} in ${kind === 'secret' ? 'Secret' : 'ConfigMap'} ${pod.metadata?.namespace}/${name}` : `${kind} "${name}" not found`);
    }
  }
  return env;
}

// What a container would see, translated for a process on this machine. There is no mount namespace and no
// cluster DNS here, so the stand-in rewrites paths and names instead:
// - each volume is a directory under the pod's directory (emptyDir empty; secret and configMap holding their
//   keys as files), and a path under a volumeMount's mountPath, in the command, args, env values or workingDir,
//   becomes the same path under that directory;
// - a cluster DNS name (`*.svc`, `*.svc.cluster.local`) becomes 127.0.0.1, every pod's IP in this cluster.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { CoreV1Api, V1Container, V1KeyToPath, V1Pod } from '@kubernetes/client-node';
import { ContainerConfigError } from './env.js';

export interface Mount {
  mountPath: string;
  hostPath: string;
}

function writeKeys(dir: string, data: Record<string, string>, items: V1KeyToPath[] | undefined): void {
  const entries = items?.length ? items.filter((i) => i.key in data).map((i) => [i.path, data[i.key]!] as const) : Object.entries(data);
  for (const [path, value] of entries) {
    const file = join(dir, path);
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, value);
  }
}

async function readData(core: CoreV1Api, namespace: string, kind: 'secret' | 'configmap', name: string): Promise<Record<string, string> | null> {
  try {
    if (kind === 'secret') {
      const s = await core.readNamespacedSecret({ name, namespace });
      return Object.fromEntries(Object.entries(s.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]));
    }
    const c = await core.readNamespacedConfigMap({ name, namespace });
    return { ...Object.fromEntries(Object.entries(c.binaryData ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')])), ...(c.data ?? {}) };
  } catch (err) {
    if ((err as { code?: number }).code === 404) return null;
    throw err;
  }
}

/** Materialises the pod's volumes under `podDir/volumes/<name>`; returns each volume's directory. */
export async function prepareVolumes(core: CoreV1Api, pod: V1Pod, podDir: string): Promise<Map<string, string>> {
  const dirs = new Map<string, string>();
  const namespace = pod.metadata?.namespace ?? 'default';
  for (const v of pod.spec?.volumes ?? []) {
    const dir = join(podDir, 'volumes', v.name);
    mkdirSync(dir, { recursive: true });
    dirs.set(v.name, dir);
    const source = v.secret
      ? { kind: 'secret' as const, name: v.secret.secretName ?? '', optional: v.secret.optional, items: v.secret.items }
      : v.configMap
        ? { kind: 'configmap' as const, name: v.configMap.name ?? '', optional: v.configMap.optional, items: v.configMap.items }
        : null;
    if (!source) continue;
    const data = await readData(core, namespace, source.kind, source.name);
    if (!data && !source.optional) throw new ContainerConfigError(`MountVolume.SetUp failed for volume "${v.name}": ${source.kind} "${source.name}" not found`);
    if (data) writeKeys(dir, data, source.items);
  }
  return dirs;
}

export function containerMounts(container: V1Container, volumes: Map<string, string>): Mount[] {
  return (container.volumeMounts ?? [])
    .filter((m) => volumes.has(m.name))
    .map((m) => ({ mountPath: m.mountPath.replace(/\/+$/, ''), hostPath: join(volumes.get(m.name)!, m.subPath ?? '') }))
    .filter((m) => m.mountPath !== '')
    .sort((a, b) => b.mountPath.length - a.mountPath.length);
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const CLUSTER_DNS_NAME = /\b[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?\.svc(?:\.cluster\.local)?\b/g;

/** Rewrites mount paths (deepest first) and cluster DNS names in one string as the container would resolve them. */
export function translate(text: string, mounts: Mount[]): string {
  let out = text;
  for (const m of mounts) {
    // The mount path as a whole path component: at the start or after a separator, before "/" or the end.
    out = out.replace(new RegExp(`(^|[\\s=:,'"])${escape(m.mountPath)}(?=/|$|[\\s,'"])`, 'g'), (_all, before: string) => before + m.hostPath);
  }
  return out.replace(CLUSTER_DNS_NAME, '127.0.0.1');
}

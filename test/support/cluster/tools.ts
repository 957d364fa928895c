// Where the test cluster's binaries are (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and
// kwok-stages/), as built by scripts/cluster-tools.sh. Found without building: a test that needs them is skipped
// when they are missing, and building takes half an hour, which no test run should start by surprise.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

export const CLUSTER_BINARIES = ['etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kwok'] as const;

function isComplete(dir: string): boolean {
  return CLUSTER_BINARIES.every((b) => existsSync(join(dir, b))) && existsSync(join(dir, 'kwok-stages'));
}

function bootstrapJson(): Record<string, unknown> {
  const file = join(repoRoot, '.bootstrap.json');
  if (!existsSync(file)) return {};
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  } catch {
    return {};
  }
}

/** The newest complete build in the cache scripts/cluster-tools.sh writes to (its directory names carry a hash). */
function newestCachedBuild(cache: string): string | null {
  if (!existsSync(cache)) return null;
  const builds = readdirSync(cache)
    .filter((n) => /^cluster-tools-[0-9a-f]+$/.test(n))
    .map((n) => join(cache, n))
    .filter((d) => existsSync(join(d, '.complete')) && isComplete(d))
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  return builds[0] ?? null;
}

/**
 * The directory holding the cluster binaries, or null when they are not built. In order: HANZO_ML_CLUSTER_TOOLS,
 * `cluster_tools` in .bootstrap.json, then the cache of scripts/cluster-tools.sh (HANZO_ML_CACHE, the bootstrap's
 * `cache`, or ~/.cache/hanzo-ml).
 */
export function findClusterTools(): string | null {
  const fromEnv = process.env.HANZO_ML_CLUSTER_TOOLS;
  if (fromEnv) return isComplete(fromEnv) ? fromEnv : null;
  const bootstrap = bootstrapJson();
  if (typeof bootstrap.cluster_tools === 'string' && isComplete(bootstrap.cluster_tools)) return bootstrap.cluster_tools;
  const cache = process.env.HANZO_ML_CACHE ?? (typeof bootstrap.cache === 'string' ? bootstrap.cache : join(homedir(), '.cache/hanzo-ml'));
  return newestCachedBuild(cache);
}

export const CLUSTER_TOOLS_MISSING =
  'the test Kubernetes cluster is not built: run scripts/cluster-tools.sh (20-40 min cold) or set HANZO_ML_CLUSTER_TOOLS to its output';

/**
 * Kueue's directory as scripts/cluster-tools.sh builds it (the `kueue` binary, crds/, webhooks.yaml), or null. In
 * order: HANZO_ML_KUEUE, `kueue` in .bootstrap.json, then the newest complete kueue-<key> in the cache.
 */
export function findKueue(): string | null {
  return findCachedTool('kueue', process.env.HANZO_ML_KUEUE);
}

/** A tool cached apart as <name>-<key>/<name>: the directory `fromEnv` names, the bootstrap's, else the newest. */
function findCachedTool(name: 'kueue' | 'helm', fromEnv: string | undefined): string | null {
  const ok = (d: string) => existsSync(join(d, '.complete')) && existsSync(join(d, name));
  if (fromEnv) return ok(fromEnv) ? fromEnv : null;
  const bootstrap = bootstrapJson();
  const named = bootstrap[name];
  if (typeof named === 'string' && ok(named)) return named;
  const cache = process.env.HANZO_ML_CACHE ?? (typeof bootstrap.cache === 'string' ? bootstrap.cache : join(homedir(), '.cache/hanzo-ml'));
  if (!existsSync(cache)) return null;
  const builds = readdirSync(cache).filter((n) => new RegExp(`^${name}-[0-9a-f]+$`).test(n)).map((n) => join(cache, n)).filter(ok);
  return builds.sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs)[0] ?? null;
}

export const KUEUE_MISSING = 'Kueue is not built: run scripts/cluster-tools.sh kueue (a few minutes cold) or set HANZO_ML_KUEUE to its output';

/**
 * Helm's directory as scripts/cluster-tools.sh builds it (the `helm` binary), or null. In order: HANZO_ML_HELM,
 * `helm` in .bootstrap.json, then the newest complete helm-<key> in the cache.
 */
export function findHelm(): string | null {
  return findCachedTool('helm', process.env.HANZO_ML_HELM);
}

export const HELM_MISSING = 'Helm is not built: run scripts/cluster-tools.sh helm (a few minutes cold) or set HANZO_ML_HELM to its output';

// What the test cluster tells its kubelet stand-in (as a JSON file named on its command line), and which images
// the stand-in can "pull".
import type { ContainerRuntime } from '../container-runtime.js';

export interface StandinConfig {
  kubeconfig: string;
  /** The fake nodes whose pods the stand-in runs. */
  nodes: string[];
  /** Images that pull successfully; see imagePullable. */
  images: string[];
  /** Per image (matched as in `images`), the environment its ENV lines would give: under the pod's own env. */
  imageEnv: Record<string, Record<string, string>>;
  /** Loopback port of the kubelet endpoint (the nodes' daemonEndpoints.kubeletEndpoint.Port). */
  port: number;
  tlsCert: string;
  tlsKey: string;
  /** CA of the API server's kubelet client certificate: only the API server may read logs. */
  clientCa: string;
  /** Per-pod working directories and container logs. */
  dir: string;
  /** Written once the stand-in watches pods and serves its endpoint. */
  readyFile: string;
  /** The process groups of running containers, one per line, so a harness can reap them if the stand-in dies. */
  pgidFile: string;
  /** podman: containers run from their images; process: as local processes (the fallback). */
  runtime: ContainerRuntime;
  /** The podman containers running, one name per line, so a harness can remove them if the stand-in dies. */
  containersFile: string;
}

/**
 * Images pullable when a test names none: common base images and the product's own. An entry without a tag
 * matches every tag of that repository.
 */
export const DEFAULT_PULLABLE_IMAGES = ['busybox', 'alpine', 'debian', 'ubuntu', 'python', 'hanzoai/ml', 'hanzoai/ml-pytorch', 'hanzoai/ml-trainer'];

/** "docker.io/library/busybox:1.36@sha256:..." -> { repo: "busybox", tag: "1.36" }. */
function parseImage(ref: string): { repo: string; tag: string | null } {
  let rest = ref.split('@')[0]!;
  const slash = rest.lastIndexOf('/');
  const colon = rest.lastIndexOf(':');
  let tag: string | null = null;
  if (colon > slash) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
  }
  const repo = rest.replace(/^(docker\.io|index\.docker\.io|registry-1\.docker\.io)\//, '').replace(/^library\//, '');
  return { repo, tag };
}

/** Whether `entry` (a repository, or a repository with a tag) names `image`. */
function imageMatches(image: string, entry: string): boolean {
  const want = parseImage(image);
  const have = parseImage(entry);
  return have.repo === want.repo && (have.tag === null || have.tag === (want.tag ?? 'latest'));
}

export function imagePullable(image: string | undefined, pullable: string[]): boolean {
  return Boolean(image) && pullable.some((entry) => imageMatches(image!, entry));
}

/** The image's own environment, from the first `imageEnv` entry that names it. */
export function imageEnvFor(image: string | undefined, imageEnv: Record<string, Record<string, string>>): Record<string, string> {
  const key = image ? Object.keys(imageEnv).find((entry) => imageMatches(image, entry)) : undefined;
  return key ? imageEnv[key]! : {};
}

/** The image name as a container runtime reports it: fully qualified, with a tag. */
export function qualifiedImage(image: string): string {
  const { repo, tag } = parseImage(image);
  const first = repo.split('/')[0]!;
  const hasRegistry = repo.includes('/') && (first.includes('.') || first.includes(':') || first === 'localhost');
  const name = hasRegistry ? repo : `docker.io/${repo.includes('/') ? repo : `library/${repo}`}`;
  return `${name}:${tag ?? 'latest'}`;
}

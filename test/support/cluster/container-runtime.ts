// How the kubelet stand-in runs a pod's containers: from their images with podman (the images scripts/images.sh
// builds into local storage), or, as a named fallback where podman or those images are missing, as local processes
// with the container's paths translated (standin/container-view.ts).
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '../../../lib/config.js';

export type ContainerRuntime =
  | { kind: 'podman'; /** Storage and runtime options before every podman command (scripts/images.sh --podman). */ podmanArgs: string[] }
  | { kind: 'process'; /** Why the pods run as processes. */ reason: string };

/** The image every stand-in test pod can run when podman is in use. */
export const BUSYBOX_IMAGE = 'localhost/busybox:latest';

let detected: ContainerRuntime | null = null;

/**
 * podman when it is installed and the local busybox image exists; otherwise the process fallback, with the reason.
 * HANZO_ML_TEST_CONTAINER_RUNTIME=process selects the fallback explicitly.
 */
export function detectContainerRuntime(): ContainerRuntime {
  if (detected) return detected;
  if (process.env.HANZO_ML_TEST_CONTAINER_RUNTIME === 'process') return (detected = { kind: 'process', reason: 'HANZO_ML_TEST_CONTAINER_RUNTIME=process' });
  let podmanArgs: string[];
  try {
    execFileSync('podman', ['--version'], { stdio: 'ignore' });
    podmanArgs = execFileSync(join(repoRoot, 'scripts/images.sh'), ['--podman'], { encoding: 'utf8' }).split('\n').filter(Boolean);
  } catch {
    return (detected = { kind: 'process', reason: 'podman is not installed (scripts/bootstrap.sh --tests installs it)' });
  }
  if (!podmanImageExists(podmanArgs, BUSYBOX_IMAGE)) {
    return (detected = { kind: 'process', reason: `${BUSYBOX_IMAGE} is not built (scripts/images.sh builds it)` });
  }
  return (detected = { kind: 'podman', podmanArgs });
}

export function podmanImageExists(podmanArgs: string[], image: string): boolean {
  return spawnSync('podman', [...podmanArgs, 'image', 'exists', image], { stdio: 'ignore' }).status === 0;
}

/** Removes, at once, every container named in `containersFile` (a stand-in that died could not stop them). */
export function reapPodmanContainers(podmanArgs: string[], containersFile: string): void {
  if (!existsSync(containersFile)) return;
  const names = readFileSync(containersFile, 'utf8').split('\n').filter(Boolean);
  if (!names.length) return;
  spawnSync('podman', [...podmanArgs, 'rm', '-f', '-t', '0', '--ignore', ...names], { stdio: 'ignore', timeout: 60_000 });
}

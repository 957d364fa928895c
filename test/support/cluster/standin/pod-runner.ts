// The kubelet stand-in's pod lifecycle: "pull" images, run each container from its image with podman (or, in the
// process fallback, its command as a local process group), report status through pods/status as a kubelet does, and
// finalise deletions (SIGTERM, SIGKILL after the grace period, terminal status, then removal with grace period 0).
import { spawn } from 'node:child_process';
import { chmodSync, closeSync, existsSync, mkdirSync, openSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { constants } from 'node:os';
import { join } from 'node:path';
import type { CoreV1Api, V1Container, V1Pod } from '@kubernetes/client-node';
import { PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import type { ContainerRuntime } from '../container-runtime.js';
import { imageEnvFor, imagePullable, qualifiedImage } from './config.js';
import { containerMounts, prepareVolumes, translate, type Mount } from './container-view.js';
import { ContainerConfigError, containerEnv, expandVars } from './env.js';
import type { LogTarget } from './log-server.js';
import { now, podStatus, type ContainerRun, type ContainerState, type PodRun } from './pod-status.js';


export type Log = (message: string) => void;

export class PodRunner {
  private runs = new Map<string, PodRun>();
  private byName = new Map<string, string>();
  private pgids = new Set<number>();
  private containerNames = new Set<string>();

  constructor(
    private core: CoreV1Api,
    private opts: {
      nodes: Set<string>;
      images: string[];
      imageEnv: Record<string, Record<string, string>>;
      dir: string;
      pgidFile: string;
      runtime: ContainerRuntime;
      containersFile: string;
      log: Log;
    },
  ) {}

  private get podmanArgs(): string[] | null {
    return this.opts.runtime.kind === 'podman' ? this.opts.runtime.podmanArgs : null;
  }

  /** One podman command to completion; resolves to its exit code (its output goes to the stand-in's log on failure). */
  private podman(args: string[]): Promise<number> {
    return new Promise((resolve) => {
      const child = spawn('podman', [...this.podmanArgs!, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
      let err = '';
      child.stderr.on('data', (d: Buffer) => void (err += d.toString()));
      child.once('error', (e) => {
        this.opts.log(`podman ${args[0]}: ${e.message}`);
        resolve(127);
      });
      child.once('close', (code) => {
        if (code !== 0 && args[0] !== 'image') this.opts.log(`podman ${args.join(' ')} exited ${code}: ${err.trim()}`);
        resolve(code ?? 128);
      });
    });
  }

  /** Stops a container as a kubelet does: SIGTERM, SIGKILL after `graceSeconds`; removes it. */
  private stopContainer(c: ContainerRun, graceSeconds: number): void {
    if (c.containerName) void this.podman(['stop', '--ignore', '-t', String(Math.max(0, Math.ceil(graceSeconds))), c.containerName]);
    else if (c.pgid) this.signal(c.pgid, 'SIGTERM');
  }

  private killContainer(c: ContainerRun): void {
    if (c.containerName) void this.podman(['rm', '-f', '--ignore', '-t', '0', c.containerName]);
    else if (c.pgid) this.signal(c.pgid, 'SIGKILL');
  }

  /** Called with every pod the watch reports added or changed. */
  sync(pod: V1Pod): void {
    const uid = pod.metadata?.uid;
    const node = pod.spec?.nodeName;
    if (!uid || !node || !this.opts.nodes.has(node)) return;
    const run = this.runs.get(uid);
    if (pod.metadata?.deletionTimestamp) {
      void this.finaliseDeletion(run ?? this.track(pod), pod);
      return;
    }
    if (run) {
      run.pod = pod;
      return;
    }
    // A pod that finished under an earlier stand-in stays as it is.
    if (pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed') return;
    void this.start(this.track(pod));
  }

  /** The pod is gone from the API (removed, or force-deleted): nothing of it may keep running. */
  forget(pod: V1Pod): void {
    const run = this.runs.get(pod.metadata?.uid ?? '');
    if (!run) return;
    run.gone = true;
    clearTimeout(run.retry);
    for (const c of run.containers) {
      clearTimeout(c.timer);
      this.killContainer(c);
    }
    this.runs.delete(run.uid);
    if (this.byName.get(`${run.namespace}/${run.name}`) === run.uid) this.byName.delete(`${run.namespace}/${run.name}`);
  }

  /** Stops every container at once (the stand-in is exiting). */
  async shutdown(graceMs: number): Promise<void> {
    const all = [...this.runs.values()].flatMap((r) => r.containers);
    const names = [...this.containerNames];
    // One podman command for every container: stop them together, within the grace period, then remove them.
    const stopped = names.length ? this.podman(['stop', '--ignore', '-t', String(Math.ceil(graceMs / 1000)), ...names]) : Promise.resolve(0);
    for (const c of all) if (c.pgid && !c.containerName) this.signal(c.pgid, 'SIGTERM');
    await Promise.race([Promise.all([stopped, ...all.map((c) => c.exited)]), new Promise((r) => setTimeout(r, graceMs + 2000))]);
    for (const pgid of this.pgids) this.signal(pgid, 'SIGKILL');
    if (this.containerNames.size) await this.podman(['rm', '-f', '--ignore', '-t', '0', ...this.containerNames]);
  }

  logTarget(namespace: string, pod: string, container: string, previous: boolean): LogTarget {
    const run = this.runs.get(this.byName.get(`${namespace}/${pod}`) ?? '');
    if (!run) return { status: 404, message: `pod "${pod}" in namespace "${namespace}" is not running on this node` };
    const c = run.containers.find((x) => x.spec.name === container);
    if (!c) return { status: 404, message: `container "${container}" not found in pod "${pod}"` };
    const instance = previous ? c.restartCount - 1 : c.restartCount;
    const path = this.logPath(run, c, instance);
    if (instance < 0 || !existsSync(path)) {
      const why = c.state.kind === 'waiting' ? `is waiting to start: ${c.state.reason}` : 'has not started';
      return { status: 400, message: previous ? `previous terminated container "${container}" in pod "${pod}" not found` : `container "${container}" in pod "${pod}" ${why}` };
    }
    return { path, running: () => !run.gone && c.restartCount === instance && c.state.kind === 'running' };
  }

  private track(pod: V1Pod): PodRun {
    const meta = pod.metadata!;
    const dir = join(this.opts.dir, `${meta.namespace}_${meta.name}_${meta.uid}`);
    mkdirSync(dir, { recursive: true });
    const run: PodRun = {
      uid: meta.uid!,
      namespace: meta.namespace!,
      name: meta.name!,
      node: pod.spec!.nodeName!,
      pod,
      dir,
      startTime: now(),
      containers: (pod.spec?.containers ?? []).map((spec) => ({ spec, state: { kind: 'waiting', reason: 'ContainerCreating' }, restartCount: 0, pgid: null, containerName: null, exited: null })),
      deleting: false,
      gone: false,
      conditionTimes: new Map(),
      statusWrites: Promise.resolve(),
      volumes: new Map(),
    };
    this.runs.set(run.uid, run);
    this.byName.set(`${run.namespace}/${run.name}`, run.uid);
    return run;
  }

  private logPath(run: PodRun, c: ContainerRun, instance = c.restartCount): string {
    return join(run.dir, `${c.spec.name}.${instance}.log`);
  }

  private async start(run: PodRun): Promise<void> {
    const pullable = await Promise.all(run.containers.map((c) => this.imagePresent(c.spec.image)));
    if (run.deleting || run.gone) return;
    const unpullable = run.containers.filter((_c, i) => !pullable[i]);
    if (unpullable.length) return this.failPull(run, unpullable);
    const envs: Record<string, string>[] = [];
    try {
      for (const c of run.containers) envs.push(await containerEnv(this.core, run.pod, c.spec));
      run.volumes = await prepareVolumes(this.core, run.pod, run.dir);
    } catch (err) {
      // Like the kubelet: report a missing reference and try again, since it may yet be created; an API error is
      // only logged before the next try.
      if (err instanceof ContainerConfigError) {
        for (const c of run.containers) c.state = { kind: 'waiting', reason: 'CreateContainerConfigError', message: err.message };
        this.publish(run);
      } else {
        this.opts.log(`preparing ${run.namespace}/${run.name}: ${(err as Error).message}`);
      }
      if (!run.deleting && !run.gone) run.retry = setTimeout(() => void this.start(run), 2000);
      return;
    }
    if (run.deleting || run.gone) return;
    run.containers.forEach((c, i) => this.spawnContainer(run, c, envs[i]!));
    this.publish(run);
  }

  /** podman: the image is in local storage (nothing is pulled); process fallback: it is on the pullable list. */
  private async imagePresent(image: string | undefined): Promise<boolean> {
    if (!this.podmanArgs) return imagePullable(image, this.opts.images);
    return Boolean(image) && (await this.podman(['image', 'exists', image!])) === 0;
  }

  private failPull(run: PodRun, unpullable: ContainerRun[]): void {
    for (const c of unpullable) {
      const image = qualifiedImage(c.spec.image!);
      c.state = {
        kind: 'waiting',
        reason: 'ErrImagePull',
        message: `failed to pull and unpack image "${image}": pull access denied, repository does not exist or may require authorization`,
      };
      this.event(run, 'Warning', 'Failed', `Failed to pull image "${c.spec.image}": ${c.state.message}`);
    }
    this.publish(run);
    run.retry = setTimeout(() => {
      if (run.deleting || run.gone) return;
      for (const c of unpullable) {
        c.state = { kind: 'waiting', reason: 'ImagePullBackOff', message: `Back-off pulling image "${c.spec.image}"` };
        this.event(run, 'Normal', 'BackOff', `Back-off pulling image "${c.spec.image}"`);
      }
      this.publish(run);
    }, 1000);
  }

  private spawnContainer(run: PodRun, c: ContainerRun, env: Record<string, string>): void {
    if (this.podmanArgs) return this.runPodman(run, c, env);
    if (!c.spec.command?.length) {
      c.state = { kind: 'waiting', reason: 'CreateContainerError', message: 'the kubelet stand-in runs only containers with a command (it cannot read an image entrypoint)' };
      return;
    }
    const mounts = containerMounts(c.spec, run.volumes);
    const argv = [...c.spec.command, ...(c.spec.args ?? [])].map((a) => translate(expandVars(a, env), mounts));
    // workingDir names a path inside the image; on this machine it is used only if it exists (or is a volume).
    const workingDir = c.spec.workingDir ? translate(c.spec.workingDir, mounts) : '';
    const cwd = workingDir && existsSync(workingDir) ? workingDir : run.dir;
    // As in a container: the runtime's HOSTNAME, the image's ENV, then the pod's env.
    const base = { PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin', HOME: run.dir, HOSTNAME: run.pod.spec?.hostname ?? run.name };
    const podEnv = Object.fromEntries(Object.entries(env).map(([k, v]) => [k, translate(v, mounts)]));
    const log = openSync(this.logPath(run, c), 'a');
    const child = spawn(argv[0]!, argv.slice(1), {
      cwd,
      detached: true,
      stdio: ['ignore', log, log],
      env: { ...base, ...imageEnvFor(c.spec.image, this.opts.imageEnv), ...podEnv },
    });
    closeSync(log);
    c.pgid = child.pid ?? null;
    if (c.pgid) this.trackGroup(c.pgid, true);
    this.watchExit(run, c, child);
  }

  /**
   * `podman run` of the container's image, in the foreground: its output is the container log and its exit code is
   * the container's. Volumes are bind mounts of their host directories; the network is the machine's loopback.
   */
  private runPodman(run: PodRun, c: ContainerRun, env: Record<string, string>): void {
    const name = podmanName(run.uid, c.spec.name, c.restartCount);
    const mounts = containerMounts(c.spec, run.volumes);
    const readOnly = new Set((c.spec.volumeMounts ?? []).filter((m) => m.readOnly || this.alwaysReadOnly(run.pod, m.name)).map((m) => m.mountPath.replace(/\/+$/, '')));
    // Cluster DNS names still resolve to 127.0.0.1, every pod's address here.
    const dns = (v: string) => translate(v, []);
    const podEnv = { ...imageEnvFor(c.spec.image, this.opts.imageEnv), HOSTNAME: run.pod.spec?.hostname ?? run.name, ...env };
    const args = [
      'run', '--rm', '--name', name, '--pull=never', '--network=host', '--hostname', run.pod.spec?.hostname ?? run.name,
      // The defaults ask for more than some machines allow.
      '--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=1024:1024',
      ...securityArgs(run.pod, c.spec),
      ...mounts.flatMap((m) => ['-v', `${m.hostPath}:${m.mountPath}${readOnly.has(m.mountPath) ? ':ro' : ''}`]),
      ...Object.entries(podEnv).flatMap(([k, v]) => ['-e', `${k}=${dns(v)}`]),
      ...(c.spec.workingDir ? ['-w', c.spec.workingDir] : []),
      ...(c.spec.command?.length ? ['--entrypoint', JSON.stringify(c.spec.command.map((a) => dns(expandVars(a, env))))] : []),
      c.spec.image!,
      ...(c.spec.args ?? []).map((a) => dns(expandVars(a, env))),
    ];
    for (const m of mounts) if (!readOnly.has(m.mountPath)) ensureWritable(m);
    const log = openSync(this.logPath(run, c), 'a');
    const child = spawn('podman', [...this.podmanArgs!, ...args], { detached: true, stdio: ['ignore', log, log] });
    closeSync(log);
    c.containerName = name;
    this.trackContainer(name, true);
    this.watchExit(run, c, child);
  }

  /** Secret, configMap and downwardAPI volumes are read-only in a pod whatever the mount says. */
  private alwaysReadOnly(pod: V1Pod, volume: string): boolean {
    const v = pod.spec?.volumes?.find((x) => x.name === volume);
    return Boolean(v?.secret || v?.configMap || v?.downwardAPI || v?.projected);
  }

  private watchExit(run: PodRun, c: ContainerRun, child: ReturnType<typeof spawn>): void {
    const startedAt = now();
    c.state = { kind: 'running', startedAt };
    this.event(run, 'Normal', 'Started', `Started container ${c.spec.name}`);
    c.exited = new Promise((resolve) => {
      let done = false;
      const finish = (exitCode: number, signal: number | undefined, message?: string) => {
        if (done) return;
        done = true;
        this.containerExited(run, c, { kind: 'terminated', exitCode, signal, reason: exitCode === 0 ? 'Completed' : 'Error', message, startedAt, finishedAt: now() });
        resolve();
      };
      child.once('exit', (code, sig) => {
        const signal = sig ? constants.signals[sig] : undefined;
        finish(code ?? 128 + (signal ?? 0), signal);
      });
      child.once('error', (err) => finish(128, undefined, `failed to start container process: ${err.message}`));
    });
  }

  private containerExited(run: PodRun, c: ContainerRun, state: ContainerState & { kind: 'terminated' }): void {
    if (c.containerName) {
      // `podman run --rm` removed it (a podman failure to start may leave it: remove it anyway).
      if (state.exitCode >= 125 && state.exitCode <= 127) void this.podman(['rm', '-f', '--ignore', '-t', '0', c.containerName]);
      this.trackContainer(c.containerName, false);
      c.containerName = null;
    } else if (c.pgid) {
      // When a container's main process ends, the runtime kills everything else in it.
      this.signal(c.pgid, 'SIGKILL');
      this.trackGroup(c.pgid, false);
    }
    c.pgid = null;
    if (state.message?.startsWith('failed to start')) state.reason = 'StartError';
    c.state = state;
    const policy = run.pod.spec?.restartPolicy ?? 'Always';
    if (!run.deleting && !run.gone && (policy === 'Always' || (policy === 'OnFailure' && state.exitCode !== 0))) this.scheduleRestart(run, c);
    this.publish(run);
  }

  /** Restarts in place with the kubelet's back-off (10 s doubling, at most 5 min), reporting CrashLoopBackOff. */
  private scheduleRestart(run: PodRun, c: ContainerRun): void {
    const delay = Math.min(10_000 * 2 ** c.restartCount, 300_000);
    c.lastState = c.state;
    c.restartCount += 1;
    c.state = { kind: 'waiting', reason: 'CrashLoopBackOff', message: `back-off ${delay / 1000}s restarting failed container=${c.spec.name} pod=${run.name}` };
    c.timer = setTimeout(async () => {
      if (run.deleting || run.gone) return;
      try {
        this.spawnContainer(run, c, await containerEnv(this.core, run.pod, c.spec));
      } catch (err) {
        c.state = { kind: 'waiting', reason: 'CreateContainerConfigError', message: (err as Error).message };
      }
      this.publish(run);
    }, delay);
  }

  /** As a kubelet finalises a graceful deletion: SIGTERM, SIGKILL after the grace period, status, removal. */
  private async finaliseDeletion(run: PodRun, pod: V1Pod): Promise<void> {
    run.pod = pod;
    if (run.deleting) return;
    run.deleting = true;
    clearTimeout(run.retry);
    for (const c of run.containers) clearTimeout(c.timer);
    const grace = pod.metadata?.deletionGracePeriodSeconds ?? pod.spec?.terminationGracePeriodSeconds ?? 30;
    const running = run.containers.filter((c) => c.state.kind === 'running' && (c.pgid || c.containerName));
    for (const c of running) {
      this.event(run, 'Normal', 'Killing', `Stopping container ${c.spec.name}`);
      this.stopContainer(c, grace);
    }
    const kill = setTimeout(() => running.forEach((c) => this.killContainer(c)), grace * 1000 + 2000);
    await Promise.all(running.map((c) => c.exited));
    clearTimeout(kill);
    const wasTerminal = ['Succeeded', 'Failed'].includes(pod.status?.phase ?? '');
    for (const c of run.containers) {
      if (c.state.kind !== 'terminated') {
        c.state = { kind: 'terminated', exitCode: 137, reason: 'ContainerStatusUnknown', message: 'The container could not be located when the pod was deleted.', finishedAt: now() };
      }
    }
    if (!wasTerminal) this.publish(run);
    await run.statusWrites;
    if (run.gone) return;
    await this.core
      // In the body, not the query: the API server reads the query's options only when there is no body.
      .deleteNamespacedPod({ name: run.name, namespace: run.namespace, body: { gracePeriodSeconds: 0, preconditions: { uid: run.uid } } })
      .catch((err: { code?: number; message?: string }) => {
        if (err.code !== 404 && err.code !== 409) this.opts.log(`delete ${run.namespace}/${run.name}: ${err.message}`);
      });
  }

  private signal(pgid: number, signal: NodeJS.Signals): void {
    // A container's processes are everything it started, whatever group or session they moved to (a container
    // runtime kills its whole cgroup): SIGKILL reaches every descendant of the container's process group.
    const targets = signal === 'SIGKILL' ? descendantsOfGroup(pgid) : [];
    try {
      process.kill(-pgid, signal);
    } catch {
      // The group is gone already.
    }
    for (const pid of targets) {
      try {
        process.kill(pid, signal);
      } catch {
        // gone already
      }
    }
  }

  private trackGroup(pgid: number, alive: boolean): void {
    if (alive) this.pgids.add(pgid);
    else this.pgids.delete(pgid);
    writeFileSync(this.opts.pgidFile, [...this.pgids].map((p) => `${p}\n`).join(''));
  }

  private trackContainer(name: string, alive: boolean): void {
    if (alive) this.containerNames.add(name);
    else this.containerNames.delete(name);
    writeFileSync(this.opts.containersFile, [...this.containerNames].map((n) => `${n}\n`).join(''));
  }

  private event(run: PodRun, type: 'Normal' | 'Warning', reason: string, message: string): void {
    const t = new Date();
    this.core
      .createNamespacedEvent({
        namespace: run.namespace,
        body: {
          metadata: { generateName: `${run.name}.`, namespace: run.namespace },
          involvedObject: { apiVersion: 'v1', kind: 'Pod', name: run.name, namespace: run.namespace, uid: run.uid },
          reason,
          message,
          type,
          source: { component: 'kubelet', host: run.node },
          firstTimestamp: t,
          lastTimestamp: t,
          count: 1,
        },
      })
      .catch((err: Error) => this.opts.log(`event ${reason} for ${run.namespace}/${run.name}: ${err.message}`));
  }

  /** Queues a status write; writes go out in order and each carries the state at the time it is sent. */
  private publish(run: PodRun): void {
    run.statusWrites = run.statusWrites.then(() => this.writeStatus(run));
  }

  private async writeStatus(run: PodRun): Promise<void> {
    for (let attempt = 0; attempt < 5 && !run.gone; attempt++) {
      try {
        await this.core.patchNamespacedPodStatus(
          { name: run.name, namespace: run.namespace, body: { status: podStatus(run) } },
          setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch),
        );
        return;
      } catch (err) {
        if ((err as { code?: number }).code === 404) return;
        this.opts.log(`status of ${run.namespace}/${run.name} (attempt ${attempt + 1}): ${(err as Error).message}`);
        await new Promise((r) => setTimeout(r, 500 * (attempt + 1)));
      }
    }
  }
}

/** The podman container of one instance of a pod's container: unique per pod uid, container and restart. */
export function podmanName(uid: string, container: string, restart: number): string {
  return `k8s_${container}_${uid}_${restart}`;
}

/** The kubelet's mapping of a pod's security context to the runtime's options. */
function securityArgs(pod: V1Pod, c: V1Container): string[] {
  const podSc = pod.spec?.securityContext;
  const sc = c.securityContext;
  const user = sc?.runAsUser ?? podSc?.runAsUser;
  const group = sc?.runAsGroup ?? podSc?.runAsGroup;
  const args: string[] = [];
  if (user !== undefined) args.push('--user', group !== undefined ? `${user}:${group}` : String(user));
  else if (group !== undefined) args.push('--group-add', String(group));
  for (const g of podSc?.supplementalGroups ?? []) args.push('--group-add', String(g));
  // As on a cluster: a read-only root is read-only everywhere but the pod's volumes.
  if (sc?.readOnlyRootFilesystem) args.push('--read-only', '--read-only-tmpfs=false');
  if (sc?.allowPrivilegeEscalation === false) args.push('--security-opt', 'no-new-privileges');
  for (const cap of sc?.capabilities?.drop ?? []) args.push('--cap-drop', cap);
  for (const cap of sc?.capabilities?.add ?? []) args.push('--cap-add', cap);
  if (sc?.privileged) args.push('--privileged');
  return args;
}

/** An emptyDir is writable by whatever user the container runs as. */
function ensureWritable(m: Mount): void {
  try {
    chmodSync(m.hostPath, 0o777);
  } catch {
    // a subPath that does not exist yet: podman creates it
  }
}

/** Every live process below the members of a process group (by parent pid, from /proc). */
function descendantsOfGroup(pgid: number): number[] {
  const parents = new Map<number, number>();
  const groups = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      // /proc/PID/stat: "pid (comm) state ppid pgrp ..."; comm may hold spaces, so split after its ')'.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      parents.set(Number(entry), Number(fields[1]));
      groups.set(Number(entry), Number(fields[2]));
    } catch {
      // exited while we looked
    }
  }
  const found = new Set([...groups].filter(([, g]) => g === pgid).map(([pid]) => pid));
  for (let grew = true; grew; ) {
    grew = false;
    for (const [pid, ppid] of parents) {
      if (found.has(pid) || !found.has(ppid)) continue;
      found.add(pid);
      grew = true;
    }
  }
  return [...found];
}

// The kubelet stand-in's pod lifecycle: "pull" images, run each container's command as a local process group,
// report status through pods/status as a kubelet does, and finalise deletions (SIGTERM, SIGKILL after the grace
// period, terminal status, then removal with grace period 0).
import { spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { constants } from 'node:os';
import { join } from 'node:path';
import type { CoreV1Api, V1Pod } from '@kubernetes/client-node';
import { PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { imageEnvFor, imagePullable, qualifiedImage } from './config.js';
import { containerMounts, prepareVolumes, translate } from './container-view.js';
import { ContainerConfigError, containerEnv, expandVars } from './env.js';
import type { LogTarget } from './log-server.js';
import { now, podStatus, type ContainerRun, type ContainerState, type PodRun } from './pod-status.js';


export type Log = (message: string) => void;

export class PodRunner {
  private runs = new Map<string, PodRun>();
  private byName = new Map<string, string>();
  private pgids = new Set<number>();

  constructor(
    private core: CoreV1Api,
    private opts: { nodes: Set<string>; images: string[]; imageEnv: Record<string, Record<string, string>>; dir: string; pgidFile: string; log: Log },
  ) {}

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
      if (c.pgid) this.signal(c.pgid, 'SIGKILL');
    }
    this.runs.delete(run.uid);
    if (this.byName.get(`${run.namespace}/${run.name}`) === run.uid) this.byName.delete(`${run.namespace}/${run.name}`);
  }

  /** Stops every container at once (the stand-in is exiting). */
  async shutdown(graceMs: number): Promise<void> {
    const all = [...this.runs.values()].flatMap((r) => r.containers);
    for (const c of all) if (c.pgid) this.signal(c.pgid, 'SIGTERM');
    await Promise.race([Promise.all(all.map((c) => c.exited)), new Promise((r) => setTimeout(r, graceMs))]);
    for (const pgid of this.pgids) this.signal(pgid, 'SIGKILL');
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
      containers: (pod.spec?.containers ?? []).map((spec) => ({ spec, state: { kind: 'waiting', reason: 'ContainerCreating' }, restartCount: 0, pgid: null, exited: null })),
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
    const unpullable = run.containers.filter((c) => !imagePullable(c.spec.image, this.opts.images));
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
    const startedAt = now();
    c.state = { kind: 'running', startedAt };
    c.pgid = child.pid ?? null;
    if (c.pgid) this.trackGroup(c.pgid, true);
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
    if (c.pgid) {
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
    const running = run.containers.filter((c) => c.state.kind === 'running' && c.pgid);
    for (const c of running) {
      this.event(run, 'Normal', 'Killing', `Stopping container ${c.spec.name}`);
      this.signal(c.pgid!, 'SIGTERM');
    }
    const kill = setTimeout(() => running.forEach((c) => c.pgid && this.signal(c.pgid, 'SIGKILL')), grace * 1000);
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

// Local executor (the embedded mode): runs a job as a detached process group that outlives the worker.
// The process is the job runner (`python -m hanzo_ml job --envelope URI`, trainer/hanzo_ml/jobio/), which reads
// and writes only through the object store, exactly as it does in a pod; the workspace here is its scratch.
// A small sh wrapper records the runner's pid and, when it ends, its exit code, each file written to a
// temporary name and renamed; a retried activity re-attaches through these files instead of starting a
// second copy. Workspaces are named after the job (deterministic per attempt), never per activity attempt.
import { spawn } from 'node:child_process';
import { existsSync, openSync, closeSync, readFileSync, readdirSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { JobPlacementSchema } from '../../contracts/job-io.js';
import { JobRejected, type JobExecutor, type JobPlacement, type JobRequest, type JobState } from './types.js';

export interface LocalExecutorOptions {
  /** job workspaces: {workRoot}/{job name} */
  workRoot: string;
  /** this machine's GPUs, handed out by the admission gate (CUDA_VISIBLE_DEVICES); default 0 */
  gpus?: number;
  /** the trainer venv's python, which runs the job runner */
  python: string;
  /** environment every job gets (PYTHONPATH, offline switches, the Candle binary, object-store settings) */
  env: Record<string, string>;
  /** the command line of a job (default: the job runner); it must name `scratch`, which lies in the workspace */
  command?: (job: JobRequest, scratch: string) => string[];
}

const WRAPPER = [
  'echo $$ > wrapper.pid.tmp && mv wrapper.pid.tmp wrapper.pid',
  '"$@" &',
  'child=$!',
  'echo $child > child.pid.tmp && mv child.pid.tmp child.pid',
  'wait $child',
  'rc=$?',
  'echo $rc > exitcode.tmp && mv exitcode.tmp exitcode',
].join('\n');

export class LocalExecutor implements JobExecutor {
  readonly kind = 'local';
  readonly machineGpus: number;
  constructor(private readonly o: LocalExecutorOptions) {
    this.machineGpus = o.gpus ?? 0;
  }

  workdir(name: string): string {
    return join(this.o.workRoot, name);
  }

  async validate(job: JobRequest): Promise<void> {
    if (job.resources.nodes > 1) throw new JobRejected(`${job.name}: a job of ${job.resources.nodes} nodes needs scheduler.executor: kubernetes; the local executor runs on one machine`);
  }

  async startOrAttach(job: JobRequest): Promise<JobState> {
    const found = jobState(this.workdir(job.name));
    if (found.state !== 'absent') return found;
    await this.spawn(job);
    return jobState(this.workdir(job.name));
  }

  async state(job: JobRequest): Promise<JobState> {
    return jobState(this.workdir(job.name));
  }

  async stop(job: JobRequest, graceSeconds: number): Promise<void> {
    const workdir = this.workdir(job.name);
    signalJob(workdir, 'SIGTERM');
    const deadline = Date.now() + graceSeconds * 1000;
    while (jobState(workdir).state === 'running' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    // Past the grace period: every process of the job, the trainer's workers included, whatever their group.
    for (const pid of processesOf(workdir)) killQuietly(pid, 'SIGKILL');
  }

  async logTail(job: JobRequest, lines: number): Promise<string> {
    const text = await readFile(join(this.workdir(job.name), 'job.log'), 'utf8').catch(() => '');
    return text.trimEnd().split('\n').slice(-lines).join('\n');
  }

  private async spawn(job: JobRequest): Promise<void> {
    const workdir = this.workdir(job.name);
    await mkdir(workdir, { recursive: true });
    // Clear a previous start's files first: waiting for child.pid below must see the new one, not a stale one.
    for (const f of ['exitcode', 'child.pid', 'wrapper.pid']) await rm(join(workdir, f), { force: true });
    const scratch = join(workdir, 'scratch');
    const command = this.o.command?.(job, scratch) ?? [this.o.python, '-m', 'hanzo_ml', 'job', '--envelope', job.envelopeUri, '--scratch', scratch];
    // Not the worker's environment: a job gets what it needs and its own token, never the API's secrets.
    const env: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? workdir, ...this.o.env, ...job.env, ...job.secretEnv };
    // Its placement is recorded with its command: a worker that re-attaches later reads the GPUs it was started with.
    const placement = localPlacement(job.name, env.CUDA_VISIBLE_DEVICES);
    await writeFile(join(workdir, 'command.json'), JSON.stringify({ command, started_at: new Date().toISOString(), placement }));
    const log = openSync(join(workdir, 'job.log'), 'a');
    try {
      const child = spawn('sh', ['-c', WRAPPER, 'hanzo-ml-job', ...command], { cwd: workdir, detached: true, stdio: ['ignore', log, log], env });
      child.unref();
    } finally {
      closeSync(log);
    }
    await waitFor(() => existsSync(join(workdir, 'child.pid')) || existsSync(join(workdir, 'exitcode')), 10_000);
  }
}

/**
 * A local job's placement: the job (its process group) by name as the pod, this machine as the node, and the CUDA
 * device indices of its environment ([] when it was given none: a CPU machine, or a job that asked for no GPU).
 */
export function localPlacement(name: string, cudaVisibleDevices: string | undefined): JobPlacement {
  const gpuIds = (cudaVisibleDevices ?? '').split(',').map((d) => d.trim()).filter((d) => d !== '');
  return { pods: [name], nodes: [hostname()], gpu_ids: gpuIds };
}

/** The placement recorded when the job was started; undefined for a job started before placements were recorded. */
function recordedPlacement(workdir: string): JobPlacement | undefined {
  try {
    const recorded = JSON.parse(readFileSync(join(workdir, 'command.json'), 'utf8')) as { placement?: unknown };
    const parsed = JobPlacementSchema.safeParse(recorded.placement);
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

function running(workdir: string): JobState {
  const placement = recordedPlacement(workdir);
  return placement ? { state: 'running', placement } : { state: 'running' };
}

function readInt(path: string): number | null {
  try {
    const n = Number.parseInt(readFileSync(path, 'utf8').trim(), 10);
    return Number.isFinite(n) ? n : null;
  } catch {
    return null;
  }
}

/** A pid counts as our job only if it is alive and its command line names the workspace (pids are reused). */
function isOurProcess(pid: number, workdir: string): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    const status = readFileSync(`/proc/${pid}/stat`, 'utf8');
    if (/\) Z /.test(status)) return false; // a zombie has finished
    return cmdline.includes(workdir);
  } catch {
    return false;
  }
}

/** Every live process whose command line names the workspace: the wrapper, the runner, torchrun and its workers. */
function processesOf(workdir: string): number[] {
  const pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d)).map(Number);
  return pids.filter((pid) => pid !== process.pid && isOurProcess(pid, workdir));
}

function killQuietly(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // already gone
  }
}

/** SIGTERM goes to the runner, which forwards it to the trainer and uploads what it wrote before exiting. */
export function signalJob(workdir: string, signal: NodeJS.Signals): boolean {
  const s = jobState(workdir);
  const pid = readInt(join(workdir, 'child.pid'));
  if (s.state !== 'running' || pid === null) return false;
  killQuietly(pid, signal);
  return true;
}

export function jobState(workdir: string): JobState {
  const exitCode = readInt(join(workdir, 'exitcode'));
  if (exitCode !== null) return { state: 'exited', exitCode };
  const pid = readInt(join(workdir, 'child.pid'));
  if (pid === null) return { state: 'absent' };
  if (isOurProcess(pid, workdir)) return running(workdir);
  // The child has been reaped but its wrapper may not have written the exit code yet: while the wrapper
  // lives the job is still finishing, not lost (calling it lost here would restart a finished job).
  const wrapper = readInt(join(workdir, 'wrapper.pid'));
  if (wrapper !== null && isOurProcess(wrapper, workdir)) return running(workdir);
  const late = readInt(join(workdir, 'exitcode'));
  return late !== null ? { state: 'exited', exitCode: late } : { state: 'lost', reason: 'the process ended without an exit code (killed with its machine or its wrapper)' };
}

/** Running local jobs (for a clean Ctrl-C of `hanzo-ml dev`): their workspaces under workRoot. */
export function runningLocalJobs(workRoot: string): string[] {
  let names: string[] = [];
  try {
    names = readdirSync(workRoot);
  } catch {
    return [];
  }
  return names.map((n) => join(workRoot, n)).filter((w) => jobState(w).state === 'running');
}

async function waitFor(pred: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error('job did not start within 10 s');
    await new Promise((r) => setTimeout(r, 50));
  }
}

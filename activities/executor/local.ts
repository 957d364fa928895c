// Local executor: runs a job as a detached process group that outlives the worker.
// A small sh wrapper records the child's pid and, when it ends, its exit code, each file written to a
// temporary name and renamed; a retried activity re-attaches through these files instead of starting a
// second copy. Job workspaces are deterministic (derived from the workflow), never per attempt.
import { spawn } from 'node:child_process';
import { existsSync, openSync, closeSync, readFileSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export type JobState =
  | { state: 'running'; pid: number }
  | { state: 'exited'; exitCode: number }
  /** The process is gone without an exit code (killed with its wrapper, or the machine restarted). */
  | { state: 'lost' }
  | { state: 'absent' };

export interface JobRequest {
  workdir: string;
  /** `[python, '-m', module, ...args]` for a job that may run as several processes */
  command: string[];
  env: Record<string, string>;
  /** > 1: run `command` under torchrun as this many processes on this machine (data-parallel training) */
  processes?: number;
}

/**
 * The command line actually started: `python -m torch.distributed.run --standalone --nproc-per-node N -m module
 * ...` (torchrun, with a private rendezvous on a free port) when the job asks for several processes.
 */
export function launchCommand(job: JobRequest): string[] {
  const n = job.processes ?? 1;
  if (n <= 1) return job.command;
  const [python, flag, ...module] = job.command;
  if (flag !== '-m' || !python || module.length === 0) throw new Error(`a job of ${n} processes must be a python -m command, got: ${job.command.join(' ')}`);
  return [python, '-m', 'torch.distributed.run', '--standalone', `--nproc-per-node=${n}`, '-m', ...module];
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

export class LocalExecutor {
  /** Starts the job unless it is already running or has exited; returns what it found. */
  async startOrAttach(job: JobRequest): Promise<JobState> {
    const found = jobState(job.workdir);
    if (found.state === 'running' || found.state === 'exited') return found;
    await this.spawn(job);
    return jobState(job.workdir);
  }

  /** Starts the job again in the same workspace (after a preemption or a lost process). */
  async restart(job: JobRequest): Promise<JobState> {
    await this.spawn(job);
    return jobState(job.workdir);
  }

  state(workdir: string): JobState {
    return jobState(workdir);
  }

  /** SIGTERM gives the trainer its grace period to write an emergency checkpoint. */
  signal(workdir: string, signal: NodeJS.Signals): boolean {
    const s = jobState(workdir);
    if (s.state !== 'running') return false;
    try {
      process.kill(s.pid, signal);
      return true;
    } catch {
      return false;
    }
  }

  private async spawn(job: JobRequest): Promise<void> {
    await mkdir(job.workdir, { recursive: true });
    // Clear the previous run's files first: waiting for child.pid below must see the new one, not a stale one.
    await rm(join(job.workdir, 'exitcode'), { force: true });
    await rm(join(job.workdir, 'child.pid'), { force: true });
    await rm(join(job.workdir, 'wrapper.pid'), { force: true });
    // And the previous run's failure record: a run that dies before writing its own (an import error, a failed
    // rendezvous) must not be read as the previous fault again, which would restart it without end.
    await rm(join(job.workdir, 'failure.json'), { force: true });
    const command = launchCommand(job);
    await writeFile(join(job.workdir, 'command.json'), JSON.stringify({ command, started_at: new Date().toISOString() }));
    const log = openSync(join(job.workdir, 'job.log'), 'a');
    try {
      const child = spawn('sh', ['-c', WRAPPER, 'hanzo-ml-job', ...command], {
        cwd: job.workdir,
        detached: true,
        stdio: ['ignore', log, log],
        env: { ...process.env, ...job.env },
      });
      child.unref();
    } finally {
      closeSync(log);
    }
    await waitFor(() => existsSync(join(job.workdir, 'child.pid')) || existsSync(join(job.workdir, 'exitcode')), 10_000);
  }
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

export function jobState(workdir: string): JobState {
  const exitCode = readInt(join(workdir, 'exitcode'));
  if (exitCode !== null) return { state: 'exited', exitCode };
  const pid = readInt(join(workdir, 'child.pid'));
  if (pid === null) return { state: 'absent' };
  if (isOurProcess(pid, workdir)) return { state: 'running', pid };
  // The child has been reaped but its wrapper may not have written the exit code yet: while the wrapper
  // lives the job is still finishing, not lost (calling it lost here would restart a finished job).
  const wrapper = readInt(join(workdir, 'wrapper.pid'));
  if (wrapper !== null && isOurProcess(wrapper, workdir)) return { state: 'running', pid };
  const late = readInt(join(workdir, 'exitcode'));
  return late !== null ? { state: 'exited', exitCode: late } : { state: 'lost' };
}

async function waitFor(pred: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error('job did not start within 10 s');
    await new Promise((r) => setTimeout(r, 50));
  }
}

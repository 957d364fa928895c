// The test cluster's processes: each in its own process group (so a stop reaches whatever it forked), its
// stdout and stderr in a log file beside the others, and its exit observed so a start-up can fail fast.
import { spawn } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export interface ClusterProcess {
  name: string;
  pid: number;
  logPath: string;
  /** The exit code, or the signal's name; null while it runs. */
  exited(): string | null;
  stop(graceMs?: number): Promise<void>;
}

/** Sends a signal to a whole process group; a group that is gone already is no error. */
export function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}

export function startClusterProcess(name: string, command: string, args: string[], opts: { dir: string; env?: NodeJS.ProcessEnv; cwd?: string }): ClusterProcess {
  const logPath = join(opts.dir, `${name}.log`);
  const log = openSync(logPath, 'a');
  const child = spawn(command, args, { detached: true, stdio: ['ignore', log, log], env: opts.env ?? process.env, cwd: opts.cwd ?? opts.dir });
  closeSync(log);
  let status: string | null = null;
  const exit = new Promise<void>((resolve) => {
    child.once('exit', (code, signal) => {
      status = code !== null ? String(code) : (signal ?? 'unknown');
      resolve();
    });
    // A spawn failure (no such binary) arrives as 'error' without 'exit'.
    child.once('error', (err) => {
      status = `spawn error: ${err.message}`;
      resolve();
    });
  });
  const pid = child.pid ?? -1;
  return {
    name,
    pid,
    logPath,
    exited: () => status,
    async stop(graceMs = 10_000) {
      if (pid < 0) return;
      if (status === null) signalGroup(pid, 'SIGTERM');
      await Promise.race([exit, new Promise((r) => setTimeout(r, graceMs))]);
      // The leader may be gone while something it forked lingers in the group: that goes too.
      signalGroup(pid, 'SIGKILL');
      await Promise.race([exit, new Promise((r) => setTimeout(r, 2000))]);
    },
  };
}

/** The last lines of a component's log, for an error message that says why a start-up failed. */
export function logTail(path: string, lines = 15): string {
  if (!existsSync(path)) return '(no log)';
  return readFileSync(path, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
}

/**
 * Polls `ready` until it returns true. Fails early when one of `watched` exits, and on timeout, naming `what`.
 */
export async function waitUntil(what: string, ready: () => Promise<boolean> | boolean, opts: { timeoutMs: number; watched?: ClusterProcess[]; intervalMs?: number }): Promise<void> {
  const deadline = Date.now() + opts.timeoutMs;
  for (;;) {
    const dead = opts.watched?.find((p) => p.exited() !== null);
    if (dead) throw new Error(`${dead.name} exited (${dead.exited()}) while waiting for ${what}; ${dead.logPath}:\n${logTail(dead.logPath)}`);
    if (await Promise.resolve(ready()).catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${opts.timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 250));
  }
}

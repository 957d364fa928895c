// Helpers of the tests that run `hanzo-ml dev` as a real process and kill parts of it.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DEV_TOKEN } from './config.js';
import { freePort } from './ports.js';

const BIN = fileURLToPath(new URL('../../bin/hanzo-ml', import.meta.url));

/**
 * Asks `fn` every `intervalMs` until it answers something (a throw counts as nothing yet); past `timeoutMs` fails
 * naming `what` and the log to read.
 */
export async function until<T>(fn: () => Promise<T | null>, timeoutMs: number, what: string, log: string, intervalMs = 1000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => null);
    if (v !== null && v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; see ${log}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** Live processes whose command line matches (pgrep exits 1 when there is none). */
export function pids(pattern: string): number[] {
  try {
    return execFileSync('pgrep', ['-f', pattern]).toString().trim().split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/**
 * `hanzo-ml dev` as a real process on free ports (its metrics too: other tests run dev beside it), its output
 * appended to <home>/dev-test.log, started again on the same home after a crash.
 */
export class DevProcess {
  readonly log: string;
  private child: ChildProcess | null = null;

  private constructor(
    readonly home: string,
    private readonly env: Record<string, string>,
    private readonly pollMs: number,
  ) {
    this.log = join(home, 'dev-test.log');
  }

  /** `pollMs`: how often `until` asks. */
  static async on(home: string, pollMs = 1000): Promise<DevProcess> {
    return new DevProcess(home, {
      HANZO_ML_HOME: home,
      HANZO_ML_SERVER_PORT: String(await freePort()),
      HANZO_ML_TEMPORAL_PORT: String(await freePort()),
      HANZO_ML_TEMPORAL_UI_PORT: '0',
      HANZO_ML_METRICS_PORT: '0',
      HANZO_ML_TEMPORAL_HEARTBEAT_TIMEOUT: '10s',
      HANZO_ML_LOGGING_LEVEL: 'warn',
    }, pollMs);
  }

  /** Starts dev in a process group of its own and waits until its API answers. */
  async start(timeoutMs: number, what = 'dev to start'): Promise<void> {
    const out = openSync(this.log, 'a');
    this.child = spawn(BIN, ['dev'], { env: { ...process.env, ...this.env }, stdio: ['ignore', out, out], detached: true });
    await this.until(() => this.api('GET', '/v1/models'), timeoutMs, what);
  }

  /**
   * A machine crash: SIGKILL to dev's process group (API, worker, Temporal) and to the detached job running in
   * `jobDir` (its wrapper's group, then anything left with the directory on its command line), with no chance to
   * clean up.
   */
  async crash(jobDir: string): Promise<void> {
    const wrapperPid = Number(readFileSync(join(jobDir, 'wrapper.pid'), 'utf8'));
    process.kill(-this.child!.pid!, 'SIGKILL');
    process.kill(-wrapperPid, 'SIGKILL');
    for (const pid of pids(jobDir)) process.kill(pid, 'SIGKILL');
    await new Promise((r) => setTimeout(r, 1000));
  }

  async stop(): Promise<void> {
    if (!this.child?.pid) return;
    try {
      process.kill(-this.child.pid, 'SIGTERM');
    } catch {
      return; // already gone
    }
    await new Promise((r) => setTimeout(r, 3000));
  }

  /** A call to the API as the dev organization: a Buffer goes as the raw body, anything else as JSON. */
  async api<T>(method: string, path: string, body?: unknown): Promise<T> {
    const raw = Buffer.isBuffer(body);
    const res = await fetch(`http://127.0.0.1:${this.env.HANZO_ML_SERVER_PORT}${path}`, {
      method,
      headers: { authorization: `Bearer ${DEV_TOKEN}`, ...(body !== undefined && !raw ? { 'content-type': 'application/json' } : {}) },
      body: body === undefined ? undefined : raw ? new Uint8Array(body) : JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
    return (await res.json()) as T;
  }

  until<T>(fn: () => Promise<T | null>, timeoutMs: number, what: string): Promise<T> {
    return until(fn, timeoutMs, what, this.log, this.pollMs);
  }
}

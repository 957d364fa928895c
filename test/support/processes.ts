// Helpers of the tests that run `hanzo-ml dev` as a real process and kill parts of it.
import { execFileSync } from 'node:child_process';

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

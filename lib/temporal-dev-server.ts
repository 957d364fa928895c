// The embedded Temporal: `temporal server start-dev` as a child process, persisted in SQLite in the data dir,
// with our search attributes registered. A server left behind by a killed dev process is stopped first.
import { spawn } from 'node:child_process';
import { existsSync, openSync, readFileSync, writeFileSync, rmSync, closeSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Connection } from '@temporalio/client';
import { fileURLToPath } from 'node:url';
import { SEARCH_ATTRIBUTES } from '../contracts/pipeline.js';
import { freePort } from './ports.js';

/** temporal-config/dev-server.json as --dynamic-config-value flags. */
function dynamicConfigArgs(): string[] {
  const file = fileURLToPath(new URL('../temporal-config/dev-server.json', import.meta.url));
  const values = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  return Object.entries(values)
    .filter(([k]) => k !== '//')
    .flatMap(([k, v]) => ['--dynamic-config-value', `${k}=${JSON.stringify(v)}`]);
}

export interface DevServer {
  address: string;
  uiUrl: string | null;
  stop(): Promise<void>;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function stopPid(pid: number, timeoutMs = 10_000): Promise<void> {
  if (!alive(pid)) return;
  process.kill(pid, 'SIGTERM');
  const deadline = Date.now() + timeoutMs;
  while (alive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  if (alive(pid)) process.kill(pid, 'SIGKILL');
}

function isTemporal(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('start-dev');
  } catch {
    return false;
  }
}

/**
 * Starts the dev server and waits for its frontend. `port: 0` picks a free loopback port. The server also binds
 * a few internal ports of its own choosing, so two servers started side by side can race for one and the loser
 * exits at once: a start that exits before answering is tried again (with a fresh port where the caller left the
 * choice to us), and the last error carries the tail of logs/temporal.log.
 */
export async function startTemporalDevServer(opts: {
  binary: string;
  home: string;
  port: number;
  uiPort: number | null;
  namespace: string;
  extraArgs?: string[];
}): Promise<DevServer> {
  const pidFile = join(opts.home, 'temporal.pid');
  if (existsSync(pidFile)) {
    const stale = Number(readFileSync(pidFile, 'utf8'));
    if (stale && isTemporal(stale)) await stopPid(stale);
  }
  for (let attempt = 1; ; attempt++) {
    const port = opts.port || (await freePort());
    try {
      return await startOnce({ ...opts, port }, pidFile);
    } catch (err) {
      if (!(err instanceof EarlyExit) || attempt >= START_ATTEMPTS) throw err;
    }
  }
}

const START_ATTEMPTS = 3;

class EarlyExit extends Error {}

async function startOnce(opts: Parameters<typeof startTemporalDevServer>[0], pidFile: string): Promise<DevServer> {
  const args = [
    'server', 'start-dev',
    '--db-filename', join(opts.home, 'temporal.db'),
    '--ip', '127.0.0.1',
    '--port', String(opts.port),
    '--namespace', opts.namespace,
    '--log-level', 'error',
    ...(opts.uiPort ? ['--ui-port', String(opts.uiPort), '--ui-disable-news-fetch'] : ['--headless']),
    ...Object.values(SEARCH_ATTRIBUTES).flatMap((n) => ['--search-attribute', `${n}=Keyword`]),
    ...dynamicConfigArgs(),
    ...(opts.extraArgs ?? []),
  ];
  const logPath = join(opts.home, 'logs', 'temporal.log');
  const logStart = existsSync(logPath) ? statSync(logPath).size : 0;
  const log = openSync(logPath, 'a');
  const child = spawn(opts.binary, args, { stdio: ['ignore', log, log], detached: false });
  closeSync(log);
  writeFileSync(pidFile, String(child.pid));
  const address = `127.0.0.1:${opts.port}`;
  try {
    await waitForFrontend(address, child);
  } catch (err) {
    if (child.exitCode === null) await stopPid(child.pid!);
    rmSync(pidFile, { force: true });
    const tail = logTail(logPath, logStart);
    if (err instanceof EarlyExit) throw new EarlyExit(`${err.message}: ${tail}`);
    throw new Error(`${(err as Error).message}: ${tail}`);
  }
  return {
    address,
    uiUrl: opts.uiPort ? `http://127.0.0.1:${opts.uiPort}` : null,
    stop: async () => {
      if (child.pid) await stopPid(child.pid);
      rmSync(pidFile, { force: true });
    },
  };
}

/** What the server wrote to its log since `from`, last 2,000 characters on one line. */
function logTail(path: string, from: number): string {
  try {
    const text = readFileSync(path).subarray(from).toString('utf8').trim();
    return text ? text.slice(-2000).replace(/\s*\n\s*/g, ' | ') : '(nothing in logs/temporal.log)';
  } catch {
    return '(no logs/temporal.log)';
  }
}

async function waitForFrontend(address: string, child: import('node:child_process').ChildProcess): Promise<void> {
  const deadline = Date.now() + 60_000;
  let exited: number | null = null;
  child.once('exit', (code) => (exited = code ?? -1));
  for (;;) {
    if (exited !== null) throw new EarlyExit(`temporal dev server exited with code ${exited}`);
    try {
      const conn = await Connection.connect({ address, connectTimeout: 1000 });
      await conn.workflowService.getSystemInfo({});
      await conn.close();
      return;
    } catch {
      if (Date.now() > deadline) throw new Error(`temporal dev server did not answer on ${address} within 60 s`);
      await new Promise((r) => setTimeout(r, 300));
    }
  }
}

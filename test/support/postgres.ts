// A real PostgreSQL server for tests (Debian's package), in a temporary directory on a free port.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { chownSync, closeSync, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { freePort } from './ports.js';

export interface TestPostgres {
  url(db?: string): string;
  createDatabase(name: string): Promise<string>;
  stop(): Promise<void>;
}

function pgBinDir(): string {
  const env = process.env.HANZO_ML_PG_BIN;
  if (env) return env;
  const versions = existsSync('/usr/lib/postgresql') ? readdirSync('/usr/lib/postgresql').sort() : [];
  if (!versions.length) throw new Error('PostgreSQL is not installed: run scripts/bootstrap.sh --tests');
  return join('/usr/lib/postgresql', versions.at(-1)!, 'bin');
}

export async function startPostgres(): Promise<TestPostgres> {
  const bin = pgBinDir();
  const dir = mkdtempSync(join(tmpdir(), 'hanzo-ml-pg-'));
  const asRoot = process.getuid?.() === 0;
  // PostgreSQL refuses to run as root: run it as the postgres user the Debian package created.
  const run = (cmd: string, args: string[]) => (asRoot ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]] : [cmd, args]) as [string, string[]];
  if (asRoot) chownSync(dir, Number(execFileSync('id', ['-u', 'postgres']).toString()), Number(execFileSync('id', ['-g', 'postgres']).toString()));
  const data = join(dir, 'data');
  execFileSync(...run(join(bin, 'initdb'), ['-D', data, '-A', 'trust', '-U', 'hanzo', '--no-sync', '-E', 'UTF8']), { stdio: 'ignore' });
  const port = await freePort();
  const logPath = join(dir, 'postgres.log');
  const log = openSync(logPath, 'a');
  const child: ChildProcess = spawn(...run(join(bin, 'postgres'), ['-D', data, '-p', String(port), '-k', dir, '-h', '127.0.0.1', '-c', 'fsync=off']), {
    stdio: ['ignore', log, log],
  });
  closeSync(log);
  const url = (db = 'postgres') => `postgres://hanzo@127.0.0.1:${port}/${db}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    const client = new pg.Client({ connectionString: url() });
    try {
      await client.connect();
      await client.end();
      break;
    } catch (err) {
      await client.end().catch(() => undefined);
      if (Date.now() > deadline) throw new Error(`postgres did not start: ${(err as Error).message}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  return {
    url,
    async createDatabase(name) {
      const client = new pg.Client({ connectionString: url() });
      await client.connect();
      await client.query(`create database "${name}"`);
      await client.end();
      return url(name);
    },
    async stop() {
      // runuser does not forward signals to postgres: stop it through pg_ctl.
      const exited = new Promise((r) => child.once('exit', r));
      execFileSync(...run(join(bin, 'pg_ctl'), ['-D', data, 'stop', '-m', 'fast', '-w']), { stdio: 'ignore' });
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
      reportServerFaults(logPath);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A test that fails because the server crashed or ran short says so: print the server's own fault lines. */
function reportServerFaults(logPath: string): void {
  const faults = readFileSync(logPath, 'utf8')
    .split('\n')
    .filter((line) => /PANIC|FATAL|terminated by signal|out of memory|could not resize|No space left|deadlock detected/.test(line))
    .filter((line) => !/the database system is (starting up|shutting down)|terminating connection due to administrator command/.test(line));
  if (faults.length) console.error(`postgres reported:\n${faults.slice(0, 20).join('\n')}`);
}

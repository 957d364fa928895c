// The tracking benchmark: hanzo-ml against `mlflow server`, side by side, driven by the same stock-mlflow-client
// workload (bench/tracking/driver.py) from N concurrent processes, first with both on one Postgres cluster (same
// worker count), then on the embedded stores (PGlite for hanzo-ml, SQLite for MLflow, one worker each).
// Writes bench/results/tracking.json and tracking.md (with --only ingest,history,search: tracking-<names>.{json,md}).
//
//   npx tsx bench/tracking/run.ts            full scale (about 50 minutes on 2 cores)
//   npx tsx bench/tracking/run.ts --quick    a smoke run of the same comparison at small scale
//   npx tsx bench/tracking/run.ts --only search   one workload (or a comma-separated list) at full scale
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startPostgres, type TestPostgres } from '../../test/support/postgres.js';
import { freePort } from '../../test/support/ports.js';
import { renderMarkdown, summarize, type Workload, type WorkloadResult } from './report.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const DEV_TOKEN = 'hanzo-ml-dev-token';

export interface Settings {
  quick: boolean;
  procs: number;
  workers: number;
  ingest: { runs: number; batches: number; keys: number };
  history: { points: number; reads: number };
  search: { runs: number; queries: number; page: number };
  /** --only: the workloads to run (all when empty); a partial run writes tracking-<names>.{json,md}. */
  only: DriverWorkload[];
}

function parseArgs(argv: string[]): Settings {
  const quick = argv.includes('--quick');
  const num = (flag: string, fallback: number): number => {
    const i = argv.indexOf(flag);
    if (i < 0) return fallback;
    const n = Number(argv[i + 1]);
    if (!Number.isInteger(n) || n < 1) throw new Error(`${flag}: expected a positive integer, got '${argv[i + 1] ?? ''}'`);
    return n;
  };
  const known = ['--quick', '--procs', '--workers', '--history-points', '--search-runs', '--only'];
  for (const a of argv) if (a.startsWith('--') && !known.includes(a)) throw new Error(`unknown option ${a} (known: ${known.join(', ')})`);
  const onlyAt = argv.indexOf('--only');
  const only = onlyAt < 0 ? [] : (argv[onlyAt + 1] ?? '').split(',');
  for (const w of only) if (!['ingest', 'history', 'search'].includes(w)) throw new Error(`--only: expected a comma-separated list of ingest, history, search; got '${argv[onlyAt + 1] ?? ''}'`);
  const historyPoints = num('--history-points', quick ? 20_000 : 1_000_000);
  if (historyPoints % 1000) throw new Error(`--history-points: expected a multiple of 1000, got ${historyPoints}`);
  return {
    quick,
    procs: num('--procs', 4),
    workers: num('--workers', 2),
    // 200 batches at full scale: with fewer, a p99 is one or two slow requests and the ratios swing by 30%
    ingest: quick ? { runs: 1, batches: 5, keys: 10 } : { runs: 2, batches: 25, keys: 10 },
    history: { points: historyPoints, reads: 1 },
    search: { runs: num('--search-runs', quick ? 500 : 20_000), queries: quick ? 5 : 10, page: 100 },
    // ingest runs twice: through the client, and again at the wire level
    only: only.flatMap((w) => (w === 'ingest' ? ['ingest', 'ingest_wire'] : [w])) as DriverWorkload[],
  };
}

interface Bootstrap {
  mlflow_python: string;
  pg_bin: string;
}

function bootstrap(): Bootstrap {
  const r = spawnSync(join(root, 'scripts/bootstrap.sh'), ['--tests'], { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] });
  if (r.status !== 0) throw new Error(`scripts/bootstrap.sh --tests failed (exit ${r.status})`);
  const b = JSON.parse(readFileSync(join(root, '.bootstrap.json'), 'utf8')) as Bootstrap;
  if (!b.mlflow_python || !b.pg_bin) throw new Error('.bootstrap.json lacks mlflow_python or pg_bin');
  return b;
}

interface Server {
  url: string;
  stop(): Promise<void>;
}

async function waitForHealth(url: string, path: string, child: ChildProcess, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`server for ${url} exited with code ${child.exitCode} before answering`);
    if (await fetch(url + path).then((r) => r.ok, () => false)) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`server at ${url} did not answer ${path} within ${ms} ms`);
}

/** Starts a server in its own process group (both fork workers) and stops the whole group. */
async function startServer(cmd: string, args: string[], env: NodeJS.ProcessEnv, cwd: string, healthPath: string, logFile: string): Promise<Server> {
  const port = await freePort();
  const { openSync } = await import('node:fs');
  const log = openSync(logFile, 'a');
  const child = spawn(cmd, args.map((a) => a.replace('{port}', String(port))), {
    cwd,
    env: { ...env, HANZO_ML_SERVER_PORT: String(port) },
    stdio: ['ignore', log, log],
    detached: true,
  });
  const url = `http://127.0.0.1:${port}`;
  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || !child.pid) return;
    const exited = new Promise((r) => child.once('exit', r));
    process.kill(-child.pid, 'SIGTERM');
    await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
    if (child.exitCode === null) process.kill(-child.pid, 'SIGKILL');
  };
  try {
    await waitForHealth(url, healthPath, child, 120_000);
  } catch (err) {
    await stop();
    throw new Error(`${(err as Error).message} (log: ${logFile})`);
  }
  return { url, stop };
}

function startHanzo(dir: string, databaseUrl: string | null, workers: number): Promise<Server> {
  const env = {
    ...process.env,
    HANZO_ML_HOME: join(dir, 'home'),
    HANZO_ML_SERVER_HOST: '127.0.0.1',
    HANZO_ML_SERVER_WORKERS: String(workers),
    HANZO_ML_LOGGING_LEVEL: 'warn',
    ...(databaseUrl ? { HANZO_ML_DATABASE_URL: databaseUrl } : {}),
  };
  return startServer(join(root, 'node_modules/.bin/tsx'), [join(root, 'bench/tracking/server.ts')], env, root, '/alive', join(dir, 'hanzo.log'));
}

function startMlflow(b: Bootstrap, dir: string, backendUri: string, workers: number): Promise<Server> {
  // uvicorn kills a worker that misses its 5 s health check; on a saturated 2-core machine that happens under
  // load, so the check gets more time (requests are not affected). Keep-alive matches hanzo-ml's (server.ts).
  const args = ['server', '--backend-store-uri', backendUri, '--artifacts-destination', join(dir, 'mlartifacts'), '--host', '127.0.0.1', '--port', '{port}', '--workers', String(workers), '--uvicorn-opts', '--timeout-worker-healthcheck 120 --timeout-keep-alive 65'];
  return startServer(join(dirname(b.mlflow_python), 'mlflow'), args, { ...process.env, PYTHONWARNINGS: 'ignore' }, dir, '/health', join(dir, 'mlflow.log'));
}

type DriverWorkload = 'ingest' | 'ingest_wire' | 'history' | 'search';

function driverArgs(w: DriverWorkload, s: Settings): string[] {
  if (w === 'ingest_wire') return ['--wire', ...driverArgs('ingest', s)];
  if (w === 'ingest') return ['--runs', String(s.ingest.runs), '--batches', String(s.ingest.batches), '--keys', String(s.ingest.keys)];
  if (w === 'history') return ['--points', String(s.history.points), '--reads', String(s.history.reads)];
  return ['--runs', String(s.search.runs), '--queries', String(s.search.queries), '--page', String(s.search.page)];
}

async function drive(b: Bootstrap, w: DriverWorkload, url: string, s: Settings): Promise<WorkloadResult> {
  const args = [join(root, 'bench/tracking/driver.py'), w === 'ingest_wire' ? 'ingest' : w, '--uri', url, '--procs', String(s.procs), ...driverArgs(w, s)];
  const child = spawn(b.mlflow_python, args, { env: { ...process.env, MLFLOW_TRACKING_TOKEN: DEV_TOKEN }, stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  const code = await new Promise<number | null>((r) => child.once('exit', r));
  if (!out.trim()) throw new Error(`driver ${w} against ${url} printed nothing (exit ${code})`);
  return JSON.parse(out) as WorkloadResult;
}

const DRIVER_WORKLOADS: DriverWorkload[] = ['ingest', 'ingest_wire', 'history', 'search'];

async function benchPair(b: Bootstrap, s: Settings, label: string, start: { hanzo: () => Promise<Server>; mlflow: () => Promise<Server> }) {
  const out: Record<string, Record<Workload, WorkloadResult>> = {};
  for (const system of ['hanzo', 'mlflow'] as const) {
    process.stderr.write(`[${label}] starting ${system}\n`);
    const server = await start[system]();
    try {
      const results = {} as Record<Workload, WorkloadResult>;
      for (const w of DRIVER_WORKLOADS.filter((w) => s.only.length === 0 || s.only.includes(w))) {
        const t = Date.now();
        const r = await drive(b, w, server.url, s);
        results[w] = r;
        // The history and search workloads read what they seeded twice: with the client, and at the wire level.
        if (w === 'history' && r.wire) results.history_wire = { ...r.wire, points: r.points } as WorkloadResult;
        if (w === 'search' && r.wire) results.search_wire = r.wire as WorkloadResult;
        process.stderr.write(`[${label}] ${system} ${w}: ${((Date.now() - t) / 1000).toFixed(1)} s${r.problems.length ? ` PROBLEMS: ${r.problems.join('; ')}` : ''}\n`);
      }
      out[system] = results;
    } finally {
      await server.stop();
    }
  }
  return out as Record<'hanzo' | 'mlflow', Record<Workload, WorkloadResult>>;
}

type PairResults = Record<'hanzo' | 'mlflow', Record<Workload, WorkloadResult>>;

/** Writes bench/results/tracking.{json,md}; called after each backend so a cut-short run still leaves numbers. */
function writeResults(s: Settings, b: Bootstrap, pairs: { postgres: PairResults; embedded?: PairResults }): void {
  const backends: Record<string, unknown> = {
    postgres: { workers: s.workers, hanzo: 'Postgres (one cluster, database "hanzo")', mlflow: 'Postgres (same cluster, database "mlflow")', results: summarize(pairs.postgres) },
  };
  if (pairs.embedded) backends.embedded = { workers: 1, hanzo: 'PGlite (embedded)', mlflow: 'SQLite', results: summarize(pairs.embedded) };
  const result = {
    benchmark: 'tracking',
    command: `npx tsx bench/tracking/run.ts ${process.argv.slice(2).join(' ')}`.trim(),
    date: new Date().toISOString(),
    machine: { cores: cpus().length, cpu: cpus()[0]?.model ?? 'unknown', ram_gib: Math.round((totalmem() / 2 ** 30) * 10) / 10, load_average_1m: Math.round(loadavg()[0]! * 10) / 10 },
    versions: versions(b),
    settings: s,
    backends,
    // Per-request latencies of the timed phases (seeding is summarized above, not listed).
    raw: Object.fromEntries(Object.entries(pairs).map(([k, v]) => [k, withoutSeedLatencies(v)])),
  };
  const outDir = join(root, 'bench/results');
  mkdirSync(outDir, { recursive: true });
  const name = s.only.length ? `tracking-${[...new Set(s.only.map((w) => w.replace('_wire', '')))].join('-')}` : 'tracking';
  writeFileSync(join(outDir, `${name}.json`), JSON.stringify(result, null, 2) + '\n');
  writeFileSync(join(outDir, `${name}.md`), renderMarkdown(result as Parameters<typeof renderMarkdown>[0]));
  process.stdout.write(renderMarkdown(result as Parameters<typeof renderMarkdown>[0]));
}

function withoutSeedLatencies(pair: Record<string, Record<Workload, WorkloadResult>>): unknown {
  return Object.fromEntries(
    Object.entries(pair).map(([sys, ws]) => [sys, Object.fromEntries(Object.entries(ws).map(([w, r]) => [w, { ...r, seed: r.seed ? { wall_s: r.seed.wall_s } : undefined }]))]),
  );
}

function versions(b: Bootstrap): Record<string, string> {
  const v = (cmd: string, args: string[]) => spawnSync(cmd, args, { encoding: 'utf8' }).stdout.trim();
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string };
  return {
    hanzo_ml: pkg.version,
    node: process.version,
    mlflow: v(b.mlflow_python, ['-c', 'import mlflow; print(mlflow.__version__)']),
    python: v(b.mlflow_python, ['--version']).replace('Python ', ''),
    postgres: v(join(b.pg_bin, 'postgres'), ['--version']).replace(/^postgres \(PostgreSQL\) /, ''),
    pglite: (JSON.parse(readFileSync(join(root, 'node_modules/@electric-sql/pglite/package.json'), 'utf8')) as { version: string }).version,
  };
}

async function main(): Promise<void> {
  const s = parseArgs(process.argv.slice(2));
  const b = bootstrap();
  const work = mkdtempSync(join(tmpdir(), 'hanzo-ml-bench-tracking-'));
  let pg: TestPostgres | null = null;
  let finished = false;
  try {
    // startPostgres finds the binaries through HANZO_ML_PG_BIN, which is no configuration key of the server.
    process.env.HANZO_ML_PG_BIN = b.pg_bin;
    pg = await startPostgres();
    delete process.env.HANZO_ML_PG_BIN;
    const hanzoDb = await pg.createDatabase('hanzo');
    // SQLAlchemy 2.1 would pick psycopg 3 for postgresql://; the pinned driver is psycopg2.
    const mlflowDb = (await pg.createDatabase('mlflow')).replace('postgres://', 'postgresql+psycopg2://');
    const dir = (name: string) => {
      const d = join(work, name);
      mkdirSync(d, { recursive: true });
      return d;
    };
    const postgres = await benchPair(b, s, 'postgres', {
      hanzo: () => startHanzo(dir('hanzo-pg'), hanzoDb, s.workers),
      mlflow: () => startMlflow(b, dir('mlflow-pg'), mlflowDb, s.workers),
    });
    await pg.stop();
    pg = null;
    writeResults(s, b, { postgres });
    const embedded = await benchPair(b, s, 'embedded', {
      hanzo: () => startHanzo(dir('hanzo-pglite'), null, 1),
      mlflow: () => startMlflow(b, dir('mlflow-sqlite'), `sqlite:///${join(dir('mlflow-sqlite'), 'mlflow.db')}`, 1),
    });
    writeResults(s, b, { postgres, embedded });
    const problems = [postgres, embedded].flatMap((p) => Object.values(p).flatMap((sys) => Object.values(sys).flatMap((r) => r.problems)));
    if (problems.length) {
      process.stderr.write(`read-back check failed:\n${problems.join('\n')}\n`);
      process.exitCode = 1;
    }
    finished = true;
  } finally {
    await pg?.stop();
    // On failure the servers' logs stay for reading.
    if (finished) rmSync(work, { recursive: true, force: true });
    else process.stderr.write(`server logs kept in ${work}\n`);
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`error: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});

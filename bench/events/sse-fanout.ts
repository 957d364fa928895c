// SSE fan-out: --streams GET /v1/events streams (spread over --orgs organizations, one token each) held open on one
// API process over real HTTP, with a real Postgres catalogue, while --rate job events per second are committed to
// the outbox for --seconds. It measures events delivered per second over all streams, the commit -> delivery
// latency, and the catalogue queries per second the streams cost, for
//   shared:      the product's route (api/routes/events.ts): one outbox listener per process;
//   per-stream:  the route as it was before it, kept here only: each stream polls the outbox every 250 ms.
// Queries are counted twice: at the database handle the API uses (every query it builds), and by Postgres itself
// (pg_stat_user_tables: index and sequential scans of the outbox; Postgres flushes these counters about once a
// second, so a window's count is good to about a second's worth).
// Writes bench/results/sse-fanout.json and sse-fanout.md.
//
//   npx tsx bench/events/sse-fanout.ts [--streams 1000] [--orgs 10] [--rate 50] [--seconds 20]
import { writeFileSync } from 'node:fs';
import http from 'node:http';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { serve, type ServerType } from '@hono/node-server';
import { Hono } from 'hono';
import { streamSSE } from 'hono/streaming';
import pg from 'pg';
import type { ApiDeps, AppEnv } from '../../api/deps.js';
import { authenticate } from '../../api/auth.js';
import { eventRoutes } from '../../api/routes/events.js';
import { ConfigSchema } from '../../contracts/config.js';
import { openCatalogue, type Db } from '../../db/client.js';
import { seedDevOrganization } from '../../db/repo/auth.js';
import { emitEvent, eventsAfter } from '../../db/repo/outbox.js';
import { envelopeOf } from '../../events/relay.js';
import { repoRoot } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { startPostgres } from '../../test/support/postgres.js';

const arg = (flag: string, fallback: number): number => {
  const i = process.argv.indexOf(flag);
  return i < 0 ? fallback : Number(process.argv[i + 1]);
};
const STREAMS = arg('--streams', 1000);
const ORGS = arg('--orgs', 10);
const RATE = arg('--rate', 50);
const SECONDS = arg('--seconds', 20);
/** a further run of the shared listener alone at this rate, for its ceiling on this machine (0: none) */
const HIGH_RATE = arg('--high-rate', 250);
const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]! : NaN;
};
const round = (x: number, d = 1): number => Math.round(x * 10 ** d) / 10 ** d;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The catalogue handle, counting each query built on it. */
function counting(db: Db, counter: { n: number }): Db {
  const counted = new Set(['select', 'selectDistinct', 'insert', 'update', 'delete', 'execute']);
  return new Proxy(db, {
    get(target, prop, receiver) {
      if (typeof prop === 'string' && counted.has(prop)) counter.n++;
      const value = Reflect.get(target, prop, receiver) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** The route before the shared listener, for comparison only: every stream polls its organization's rows. */
function perStreamRoutes(db: Db): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  app.get('/', (c) => {
    const p = c.get('principal');
    let cursor = Number(c.req.query('after') ?? 0);
    return streamSSE(c, async (stream) => {
      let closed = false;
      stream.onAbort(() => void (closed = true));
      while (!closed) {
        const rows = await eventsAfter(db, p.organizationId, cursor, 500, ['jobs']);
        for (const r of rows) {
          await stream.writeSSE({ id: String(r.id), event: r.topic, data: JSON.stringify(envelopeOf(r)) });
          cursor = r.id;
        }
        if (rows.length === 0) await stream.sleep(250);
      }
    });
  });
  return app;
}

interface Received {
  delivered: number;
  latencies: number[];
}

/** One SSE client on a raw HTTP request: counts events and their commit -> delivery latency. */
function connect(port: number, agent: http.Agent, token: string, after: number, into: Received): Promise<http.ClientRequest> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, agent, path: `/v1/events?topics=jobs&after=${after}`, headers: { authorization: `Bearer ${token}` } }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`stream answered ${res.statusCode}`));
      res.setEncoding('utf8');
      let buffer = '';
      res.on('data', (chunk: string) => {
        buffer += chunk;
        for (let cut = buffer.indexOf('\n\n'); cut >= 0; cut = buffer.indexOf('\n\n')) {
          const data = buffer
            .slice(0, cut)
            .split('\n')
            .find((l) => l.startsWith('data:'));
          buffer = buffer.slice(cut + 2);
          if (!data) continue;
          const env = JSON.parse(data.slice(5)) as { data: { timestamp: string } };
          into.delivered++;
          into.latencies.push(Date.now() - Date.parse(env.data.timestamp));
        }
      });
      res.on('error', () => undefined);
      resolve(req);
    });
    req.on('error', (err) => (req.destroyed ? undefined : reject(err)));
  });
}

async function outboxScans(client: pg.Client): Promise<number> {
  const { rows } = await client.query<{ n: string }>("select coalesce(seq_scan, 0) + coalesce(idx_scan, 0) as n from pg_stat_user_tables where relname = 'outbox'");
  return Number(rows[0]?.n ?? 0);
}

async function runMode(mode: 'shared' | 'per-stream', rate: number, db: Db, stats: pg.Client, tokens: string[]) {
  const counter = { n: 0 };
  const served = counting(db, counter);
  const config = ConfigSchema.parse({ limits: { event_streams_per_token: STREAMS } });
  const log = createLogger({ level: 'error', format: 'text' });
  const app = new Hono<AppEnv>();
  app.use('/v1/*', authenticate(served));
  app.route('/v1/events', mode === 'shared' ? eventRoutes({ db: served, config, log } as ApiDeps) : perStreamRoutes(served));
  const server = await new Promise<ServerType>((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
  });
  const port = (server.address() as { port: number }).port;
  const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
  const head = Number((await stats.query<{ m: string | null }>('select max(id) as m from outbox')).rows[0]?.m ?? 0);
  const received: Received = { delivered: 0, latencies: [] };
  const connectStart = performance.now();
  const requests: http.ClientRequest[] = [];
  for (let i = 0; i < STREAMS; i += 50)
    requests.push(...(await Promise.all(Array.from({ length: Math.min(50, STREAMS - i) }, (_, k) => connect(port, agent, tokens[(i + k) % ORGS]!, head, received)))));
  const connectSecs = (performance.now() - connectStart) / 1000;
  await sleep(2000);

  // Idle: streams open, nothing committed.
  let q0 = counter.n;
  let s0 = await outboxScans(stats);
  await sleep(5000);
  const idle = { queries_per_s: round((counter.n - q0) / 5), outbox_scans_per_s: round(((await outboxScans(stats)) - s0) / 5) };

  // Load: RATE job events per second, round-robin over the organizations.
  q0 = counter.n;
  s0 = await outboxScans(stats);
  received.delivered = 0;
  received.latencies = [];
  const start = performance.now();
  let committed = 0;
  for (let tick = 0; tick < SECONDS * 10; tick++) {
    const wait = start + tick * 100 - performance.now();
    if (wait > 0) await sleep(wait);
    for (let k = 0; k < rate / 10; k++) {
      await emitEvent(db, `org-${committed % ORGS}`, 'jobs', `job-${committed}`, { job_id: `job-${committed}`, state: 'running' });
      committed++;
    }
  }
  const loadSecs = (performance.now() - start) / 1000;
  const queries = counter.n - q0;
  const scans = (await outboxScans(stats)) - s0;
  const expected = committed * (STREAMS / ORGS);
  const deadline = Date.now() + 30_000;
  while (received.delivered < expected && Date.now() < deadline) await sleep(100);
  const drainSecs = (performance.now() - start) / 1000 - loadSecs;

  for (const r of requests) r.destroy();
  await sleep(500);
  await new Promise((r) => server.close(r));
  agent.destroy();
  return {
    mode,
    offered_events_per_s: rate,
    streams: STREAMS,
    connect_s: round(connectSecs, 2),
    idle,
    load: {
      events_committed: committed,
      committed_per_s: round(committed / loadSecs),
      deliveries_expected: expected,
      delivered: received.delivered,
      delivered_per_s: round(received.delivered / loadSecs),
      drain_after_load_s: round(drainSecs, 2),
      latency_ms: { p50: pct(received.latencies, 50), p95: pct(received.latencies, 95), p99: pct(received.latencies, 99), max: pct(received.latencies, 100) },
      queries_per_s: round(queries / loadSecs),
      outbox_scans_per_s: round(scans / loadSecs),
    },
  };
}

async function main(): Promise<void> {
  const pgServer = await startPostgres();
  const url = await pgServer.createDatabase('sse_fanout');
  const cat = await openCatalogue({ url });
  const stats = new pg.Client({ connectionString: url });
  await stats.connect();
  try {
    const tokens = Array.from({ length: ORGS }, (_, i) => `bench-token-${i}`);
    for (let i = 0; i < ORGS; i++) await seedDevOrganization(cat.db, `org-${i}`, tokens[i]!);
    const loadBefore = loadavg().map((x) => round(x, 2));
    const results = [];
    const runs: ['shared' | 'per-stream', number][] = [['shared', RATE], ['per-stream', RATE], ...(HIGH_RATE ? [['shared', HIGH_RATE] as ['shared', number]] : [])];
    for (const [mode, rate] of runs) {
      results.push(await runMode(mode, rate, cat.db, stats, tokens));
      process.stderr.write(`${mode}: ${JSON.stringify(results.at(-1))}\n`);
    }
    const result = {
      date: new Date().toISOString(),
      machine: { cpus: cpus().length, cpu: cpus()[0]?.model ?? '', memory_gib: Math.round(totalmem() / 2 ** 30), node: process.version },
      load_average_before: loadBefore,
      load_average_after: loadavg().map((x) => round(x, 2)),
      setup: { streams: STREAMS, organizations: ORGS, events_per_s: RATE, high_rate: HIGH_RATE, seconds: SECONDS },
      results,
    };
    const out = join(repoRoot, 'bench/results');
    writeFileSync(join(out, 'sse-fanout.json'), JSON.stringify(result, null, 2) + '\n');
    writeFileSync(join(out, 'sse-fanout.md'), markdown(result));
    process.stdout.write(markdown(result));
  } finally {
    await stats.end();
    await cat.close();
    await pgServer.stop();
  }
}

type Result = Awaited<ReturnType<typeof runMode>>;
function markdown(r: { date: string; machine: Record<string, unknown>; load_average_before: number[]; load_average_after: number[]; setup: { streams: number; organizations: number; events_per_s: number; high_rate: number; seconds: number }; results: Result[] }): string {
  const row = (x: Result) =>
    `| ${x.mode} | ${x.offered_events_per_s} | ${x.connect_s} | ${x.idle.queries_per_s} | ${x.idle.outbox_scans_per_s} | ${x.load.committed_per_s} | ${x.load.delivered} / ${x.load.deliveries_expected} | ${x.load.delivered_per_s} | ${x.load.latency_ms.p50} / ${x.load.latency_ms.p99} | ${x.load.queries_per_s} | ${x.load.outbox_scans_per_s} |`;
  return [
    `# SSE fan-out (${r.date})`,
    '',
    `${r.setup.streams} GET /v1/events streams over real HTTP on one API process, ${r.setup.organizations} organizations (${r.setup.streams / r.setup.organizations} streams each), ` +
      `a Postgres catalogue; ${r.setup.events_per_s} job events/s offered for ${r.setup.seconds} s (and ${r.setup.high_rate}/s to the shared listener alone), each delivered to its organization's ${r.setup.streams / r.setup.organizations} streams. ` +
      `Clients, server and Postgres share the machine: ${JSON.stringify(r.machine)}; load average (1/5/15 min) ${r.load_average_before.join(' / ')} before, ${r.load_average_after.join(' / ')} after.`,
    '',
    '`shared` is the product (one outbox listener per process); `per-stream` is the route as it was (each stream polls every 250 ms), kept only in the bench. ' +
      'Queries: counted at the API\'s database handle; outbox scans: counted by Postgres (pg_stat_user_tables; a query may scan more than one index, and the counters are flushed about once a second). ' +
      'Events are committed through the API\'s own connection pool (10 connections), as the API\'s writes are: under per-stream polling the pollers hold the pool, so fewer events than offered get committed at all, and deliveries per second fall with them. ' +
      'Latency is from the commit-time stamp in the event to its arrival at the client; the shared listener polls every 250 ms.',
    '',
    '| mode | offered events/s | connect s | idle queries/s | idle outbox scans/s | committed events/s | delivered / expected | delivered events/s | latency p50 / p99 ms | queries/s under load | outbox scans/s under load |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
    ...r.results.map(row),
    '',
  ].join('\n');
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});

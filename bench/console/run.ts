// The console's data calls at catalogue scale, over real HTTP against the product's app (createApp) on a real
// Postgres catalogue (or PGlite with --engine pglite). Seeded: 10,000 runs in one experiment (params and latest
// metrics each), 100 of them with 10 metrics of --steps steps (the compare set), the widest run with 5,000 metric
// keys, one 1,000,000-step series, and 200 synthetic running jobs whose runs log metrics and whose events are
// appended while their pages stream. Measured, median of --passes after one warm-up, with the load average:
//   runs table:  the first page (100 rows, 4 columns) sorted by start time, and by a metric;
//   compare:     POST /v1/runs/series, 100 runs x 10 keys (500 points each);
//   zoom:        the 1,000,000-step series in full (2,000 points), then a 1% step range of it;
//   estimate:    POST /v1/estimates/memory (one trainer Python process per call);
//   stream:      200 page streams (GET /v1/stream, a job and its run's metrics each) while the jobs write: events
//                delivered per second and the commit -> delivery latency.
// The seed is written with SQL (generate_series), not through the API: what is measured is reading.
// Then the pages in headless Chromium (browser.ts): the runs table's first paint, compare, zoom and the heap.
// Writes bench/results/console.json and console.md; --only browser measures the browser alone and keeps the
// server-side figures of the last full run in the files, --only server the reverse.
//
//   npx tsx bench/console/run.ts [--engine postgres|pglite] [--passes 7] [--steps 1000] [--streams 200] [--seconds 20] [--only server|browser] [--console DIR --save-as before|previous --label TEXT] [--explain]
// (--save-as writes console.<name>.{json,md}: `before` is what the console build before issue 26's change measured,
// `previous` the build and server before the latest change; console.md compares with both.)
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { serve } from '@hono/node-server';
import type { Client } from '@temporalio/client';
import { sql } from 'drizzle-orm';
import { createApp } from '../../api/app.js';
import { openCatalogue, type Db } from '../../db/client.js';
import { seedDevOrganization } from '../../db/repo/auth.js';
import { createExperiment } from '../../db/repo/experiments.js';
import { appendJobEvents } from '../../db/repo/job-events.js';
import { insertJob } from '../../db/repo/jobs.js';
import { logMetrics } from '../../db/repo/metrics.js';
import { downsampledSeries, seriesJson, seriesQuery, statementParts, type SeriesRequest } from '../../db/repo/series.js';
import { loadConfig, repoRoot } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { FileObjectStore } from '../../lib/object-store.js';
import { startPostgres, type TestPostgres } from '../../test/support/postgres.js';
import { browserMarkdown, measureBrowser, type BrowserResult, type RestBreakdown } from './browser.js';

const arg = (flag: string, fallback: string): string => {
  const i = process.argv.indexOf(flag);
  return i < 0 ? fallback : process.argv[i + 1]!;
};
const ENGINE = arg('--engine', 'postgres');
const PASSES = Number(arg('--passes', '7'));
const STEPS = Number(arg('--steps', '1000'));
const STREAMS = Number(arg('--streams', '200'));
const SECONDS = Number(arg('--seconds', '20'));
const ONLY = arg('--only', 'all');
/** another console build to serve (a previous version's, to compare with); default the bootstrap's */
const CONSOLE = arg('--console', '');
/** `before`: write console.before.{json,md}, the figures the next run's markdown compares with */
const SAVE_AS = arg('--save-as', '');
const RUNS = 10_000;
const WIDE_KEYS = 5_000;
const LONG_STEPS = 1_000_000;
const TOKEN = 'bench-console-token';
/** What the compare page asks first in the browser half's viewport (1400 px: two 650 px charts a row, three rows
 * on screen): the six charts in view in one call, a bucket per two plot pixels (console/src/pages/compare.tsx). */
const SCREEN_KEYS = 6;
const SCREEN_POINTS = 296;

const round = (x: number, d = 1): number => Math.round(x * 10 ** d) / 10 ** d;
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]! : NaN;
};
const load = () => round(loadavg()[0]!);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const runId = (i: number) => `r${String(i).padStart(5, '0')}`;

/** The catalogue at scale, by SQL. Runs r00001..r10000; r00001 holds the long series, r00002 the 5,000 keys. */
async function seed(db: Db): Promise<void> {
  await seedDevOrganization(db, 'dev', TOKEN);
  await createExperiment(db, { id: 'bench', organizationId: 'dev', name: 'bench', artifactLocation: 'file:///tmp/bench', tags: [] });
  await db.execute(sql`insert into runs (id, organization_id, experiment_id, name, status, user_id, artifact_uri, start_time)
    select 'r' || lpad(g::text, 5, '0'), 'dev', 'bench', 'run-' || g, case when g % 10 = 0 then 'running' else 'completed' end, 'dev',
      'file:///tmp/bench/r' || g, timestamptz '2026-01-01' + g * interval '1 minute'
    from generate_series(1, ${RUNS}) g`);
  await db.execute(sql`insert into run_params (run_id, key, value)
    select 'r' || lpad(g::text, 5, '0'), k, case k when 'lr' then (g % 97 / 1000.0)::text when 'method' then (array['lora', 'qlora', 'full'])[g % 3 + 1] else (2 ^ (g % 6))::int::text end
    from generate_series(1, ${RUNS}) g cross join unnest(array['lr', 'method', 'batch_size']) k`);
  await db.execute(sql`insert into latest_metrics (run_id, key, step, timestamp, value)
    select 'r' || lpad(g::text, 5, '0'), k, 1000, 0, case k when 'loss' then 1 + sin(g) else random() end
    from generate_series(1, ${RUNS}) g cross join unnest(array['loss', 'acc', 'tokens_per_second']) k`);
  // The compare set: runs 1..100, keys k0..k9, STEPS steps each.
  await db.execute(sql`insert into metrics (run_id, key, step, timestamp, value)
    select 'r' || lpad(g::text, 5, '0'), 'k' || k, s, s, exp(-s / 300.0) + k + random() * 0.05
    from generate_series(1, 100) g cross join generate_series(0, 9) k cross join generate_series(0, ${STEPS - 1}) s`);
  // The widest run: 5,000 keys, 20 steps each, and their latest values.
  await db.execute(sql`insert into metrics (run_id, key, step, timestamp, value)
    select 'r00002', 'layer/' || k || '/grad_norm', s, s, random() from generate_series(0, ${WIDE_KEYS - 1}) k cross join generate_series(0, 19) s`);
  await db.execute(sql`insert into latest_metrics (run_id, key, step, timestamp, value)
    select 'r00002', 'layer/' || k || '/grad_norm', 19, 19, random() from generate_series(0, ${WIDE_KEYS - 1}) k`);
  // The long series, with a planted spike.
  await db.execute(sql`insert into metrics (run_id, key, step, timestamp, value)
    select 'r00001', 'train/loss', s, s, case when s = 777777 then 50 else 2 * exp(-s / 200000.0) + random() * 0.01 end from generate_series(0, ${LONG_STEPS - 1}) s`);
  // A settled catalogue: vacuum sets the visibility map as autovacuum's insert-triggered pass does (the metrics table
  // is vacuumed after 1% growth, migration 0022), so the series read the index alone, as they do in service.
  await db.execute(sql`vacuum analyze`);
}

/** Median wall time of a call (request to whole body read) over the passes after one warm-up; also the body size. */
async function timed(name: string, call: () => Promise<Response>): Promise<{ name: string; median_ms: number; min_ms: number; max_ms: number; bytes: number; load_1m: number }> {
  let bytes = 0;
  const times: number[] = [];
  for (let i = 0; i <= PASSES; i++) {
    const t = performance.now();
    const res = await call();
    const body = await res.text();
    const ms = performance.now() - t;
    if (res.status !== 200) throw new Error(`${name}: ${res.status} ${body.slice(0, 300)}`);
    bytes = body.length;
    if (i > 0) times.push(ms);
  }
  const out = { name, median_ms: round(median(times)), min_ms: round(Math.min(...times)), max_ms: round(Math.max(...times)), bytes, load_1m: load() };
  console.log(JSON.stringify(out));
  return out;
}

/** One series call taken apart on the server (medians over the passes after one warm-up). */
interface SplitResult {
  name: string;
  /** Postgres' own execution time of the call's statements (EXPLAIN ANALYZE, timing off), the slowest of those run side by side */
  sql_ms: number;
  /** Postgres' planning of them, the slowest */
  plan_ms: number;
  /** the statements as Node sees them: sent, planned, run, rows read and decoded (downsampledSeries) */
  statements_ms: number;
  /** the answer's JSON written from the rows (seriesJson) */
  json_ms: number;
  bytes: number;
  load_1m: number;
}

/**
 * Where a series call's server time goes: the SQL inside Postgres, the rest of the statements' round trip (wire
 * and row decoding: statements_ms - sql_ms - plan_ms) and the JSON. The HTTP call's own median is in the calls
 * table; what it adds beyond these is authentication, the run check and the transfer.
 */
async function splitCall(db: Db, name: string, q: SeriesRequest): Promise<SplitResult> {
  const sqlMs: number[] = [];
  const planMs: number[] = [];
  const statementsMs: number[] = [];
  const jsonMs: number[] = [];
  let bytes = 0;
  for (let i = 0; i <= PASSES; i++) {
    const plans = await Promise.all(statementParts(q).map((part) => db.execute(sql`explain (analyze, timing off, format json) ${seriesQuery(part)}`)));
    const stats = plans.map((p) => (p as unknown as { rows: { 'QUERY PLAN': { 'Execution Time': number; 'Planning Time': number }[] }[] }).rows[0]!['QUERY PLAN'][0]!);
    const t0 = performance.now();
    const series = await downsampledSeries(db, q);
    const t1 = performance.now();
    const body = `{"series":[${series.map(seriesJson).join(',')}]}`;
    const t2 = performance.now();
    bytes = body.length;
    if (i === 0) continue;
    sqlMs.push(Math.max(...stats.map((s) => s['Execution Time'])));
    planMs.push(Math.max(...stats.map((s) => s['Planning Time'])));
    statementsMs.push(t1 - t0);
    jsonMs.push(t2 - t1);
  }
  const out = { name, sql_ms: round(median(sqlMs)), plan_ms: round(median(planMs)), statements_ms: round(median(statementsMs)), json_ms: round(median(jsonMs), 2), bytes, load_1m: load() };
  console.log(JSON.stringify(out));
  if (process.argv.includes('--explain')) {
    const plan = await db.execute(sql`explain (analyze, buffers) ${seriesQuery(statementParts(q)[0]!)}`);
    console.log((plan as unknown as { rows: { 'QUERY PLAN': string }[] }).rows.map((r) => r['QUERY PLAN']).join('\n'));
  }
  return out;
}

interface StreamResult {
  streams: number;
  subjects_per_stream: number;
  seconds: number;
  /** job events and metric steps committed while measuring (each has exactly one stream following it) */
  events_written: number;
  events_delivered: number;
  events_per_second: number;
  latency_ms_p50: number;
  latency_ms_p90: number;
  latency_ms_p99: number;
  load_1m: number;
}

/**
 * 200 running jobs, each with a run: every second each job appends an event (data.t: its commit time) and its run
 * logs a step of 5 metrics (the outbox event's own timestamp). Each page stream follows one job and its run.
 */
async function streamFanOut(db: Db, base: string): Promise<StreamResult> {
  const jobs = Array.from({ length: STREAMS }, (_, i) => ({ job: `bench-job-${i}`, run: runId(1000 + i) }));
  for (const j of jobs) await insertJob(db, { id: j.job, organizationId: 'dev', name: j.job, submittedBy: 'dev', type: 'training', kind: 'command', spec: {}, status: 'running', workflowId: `job:${j.job}` });
  const latencies: number[] = [];
  let delivered = 0;
  let measuring = false;
  let started = Infinity;
  const controllers: AbortController[] = [];
  const readers = jobs.map(async (j) => {
    const ctl = new AbortController();
    controllers.push(ctl);
    const res = await fetch(`${base}/v1/stream?topics=job:${j.job},run:${j.run}:metrics`, { headers: { authorization: `Bearer ${TOKEN}` }, signal: ctl.signal });
    if (res.status !== 200) throw new Error(`stream: ${res.status} ${await res.text()}`);
    const reader = res.body!.getReader();
    let buffer = '';
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        buffer += new TextDecoder().decode(value);
        for (let cut = buffer.indexOf('\n\n'); cut >= 0; cut = buffer.indexOf('\n\n')) {
          const data = buffer.slice(0, cut).split('\n').find((l) => l.startsWith('data:'));
          buffer = buffer.slice(cut + 2);
          if (!data || !measuring) continue;
          const e = JSON.parse(data.slice(5)) as { type: string; timestamp?: string; event?: { data?: { t?: number } } };
          const sent = e.type === 'run.metrics' ? Date.parse(e.timestamp!) : e.event?.data?.t;
          // Only what was written while measuring: a stream still catching up on a job's history counts not.
          if (!sent || sent < started) continue;
          latencies.push(Date.now() - sent);
          delivered++;
        }
      }
    } catch {
      // aborted at the end
    }
  });
  await sleep(2000); // every stream open and caught up
  started = Date.now();
  measuring = true;
  let step = 0;
  let written = 0;
  while (Date.now() - started < SECONDS * 1000) {
    const tick = Date.now();
    step++;
    await appendJobEvents(db, jobs.map((j) => ({ organizationId: 'dev', jobId: j.job, level: 'info' as const, type: 'metrics' as const, message: `step ${step}`, data: { t: Date.now() } })));
    // The runs log as training does, each its own batch; 20 at a time so that a second's writes fit in a second.
    for (let i = 0; i < jobs.length; i += 20)
      await Promise.all(jobs.slice(i, i + 20).map((j) => logMetrics(db, j.run, ['loss', 'lr', 'grad_norm', 'tokens_per_second', 'gpu_util'].map((key) => ({ key, step, timestamp: Date.now(), value: Math.random() })))));
    written += jobs.length * 2;
    await sleep(Math.max(0, 1000 - (Date.now() - tick)));
  }
  await sleep(1500); // the last events arrive
  measuring = false;
  const seconds = (Date.now() - started) / 1000;
  controllers.forEach((c) => c.abort());
  await Promise.allSettled(readers);
  return {
    streams: STREAMS,
    subjects_per_stream: 2,
    seconds: round(seconds),
    events_written: written,
    events_delivered: delivered,
    events_per_second: round(delivered / seconds),
    latency_ms_p50: round(pct(latencies, 50)),
    latency_ms_p90: round(pct(latencies, 90)),
    latency_ms_p99: round(pct(latencies, 99)),
    load_1m: load(),
  };
}

type Result = Record<string, unknown> & { calls: Awaited<ReturnType<typeof timed>>[]; split?: SplitResult[]; before?: Result; previous?: Result; stream: StreamResult; goals: Record<string, number>; browser: BrowserResult | string };

function markdown(r: Result): string {
  const rows = r.calls.map((c) => `| ${c.name} | ${c.median_ms} | ${c.min_ms} - ${c.max_ms} | ${round(c.bytes / 1024)} | ${c.load_1m} |`);
  const s = r.stream;
  const splitRows = (r.split ?? []).map((c) => `| ${c.name} | ${c.sql_ms} | ${c.plan_ms} | ${round(c.statements_ms - c.sql_ms - c.plan_ms)} | ${c.json_ms} | ${round(c.bytes / 1024)} | ${c.load_1m} |`);
  return `# Console data calls at scale

${String(r.note)}

Machine: ${JSON.stringify(r.machine)}; catalogue: ${String(r.engine)}; seed ${String(r.seed_seconds)} s.
Seeded: ${RUNS} runs in one experiment (3 params, 3 latest metrics each), 100 runs x 10 metrics x ${STEPS} steps (compare set),
one run with ${WIDE_KEYS} metric keys, one ${LONG_STEPS}-step series, ${STREAMS} running jobs.

| call | median ms (${PASSES} passes) | range ms | response KiB | load 1m |
|---|---|---|---|---|
${rows.join('\n')}

Goals (issue 26, measured in the browser below; these are the server's share): runs table <= ${r.goals.runs_table_ms} ms,
compare <= ${r.goals.compare_ms} ms, zoom <= ${r.goals.zoom_ms} ms.
${splitRows.length ? `
Where a series call's server time goes (medians of ${PASSES} passes): the SQL inside Postgres (EXPLAIN ANALYZE's execution
time, timing off; a call of more than 50 series runs as statements side by side, the slowest counted), its planning,
the rest of the statements' round trip as Node sees it (wire, row decoding: a difference of medians, which noise can
make negative), and writing the JSON answer. The HTTP call
(table above) adds authentication, the run check and the transfer.

| call | SQL ms | plan ms | wire + decode ms | JSON ms | answer KiB | load 1m |
|---|---|---|---|---|---|---|
${splitRows.join('\n')}
` : ''}
Stream fan-out: ${s.streams} page streams (a job and its run's metrics each, one connection), ${s.seconds} s of
writes (each job an event a second, each run a step of 5 metrics a second): ${s.events_written} events written, ${s.events_delivered} delivered,
${s.events_per_second}/s; commit -> delivery latency p50 ${s.latency_ms_p50} ms, p90 ${s.latency_ms_p90} ms, p99 ${s.latency_ms_p99} ms
(load ${s.load_1m}).


${typeof r.browser === 'string' ? `Browser: ${r.browser}\n` : browserMarkdown(r.browser)}${r.before && typeof r.browser !== 'string' && typeof r.before.browser !== 'string' ? beforeMarkdown(r.before, r.browser) : ''}${r.previous && typeof r.browser !== 'string' && typeof r.previous.browser !== 'string' ? previousMarkdown(r.previous, r.browser) : ''}`;
}

/** The "all drawn" pass beside that of console.previous.json (the build and server before the latest change). */
function previousMarkdown(previous: Result, now: BrowserResult): string {
  const was = previous.browser as BrowserResult;
  const rows = now.timings.flatMap((t) => {
    const b = was.timings.find((x) => x.name === t.name);
    return b && t.name.startsWith('compare') ? [`| ${t.name} | ${b.median_ms} | ${b.load_1m} | ${t.median_ms} | ${t.load_1m} | ${round(t.median_ms / b.median_ms, 2)} |`] : [];
  });
  const d0 = was.compare_rest_breakdown;
  const d1 = now.compare_rest_breakdown;
  const parts: [string, keyof RestBreakdown][] = [
    ['first screen drawn', 'screen_drawn_ms'],
    ['the other keys\' call sent', 'rest_sent_ms'],
    ['its first byte', 'rest_first_byte_ms'],
    ['its last byte', 'rest_answered_ms'],
    ['parsed', 'rest_parsed_ms'],
    ['scrolled to the end', 'scrolled_ms'],
    ['the last of those charts given its points', 'data_ms'],
    ['all 10 drawn', 'drawn_ms'],
    ['longest animation frame, ms', 'longest_frame_ms'],
  ];
  return `
## The "all drawn" pass: ${String(previous.label ?? 'the previous build')}

console.previous.json (measured ${String(previous.measured_at ?? '')}) is the same bench against the build and server
before the latest change, medians of ${was.passes} passes each; each row has its load. Before: the other keys were
asked once the first screen was drawn, and its painting (a hundred 1.5 px lines a chart, outlined and filled by the
rasterizer) held the main thread for about a second after the charts' draw marks, so the call left that much later;
each series' points were read from the heap (the key lacked is_nan) and every series' rows sorted together.

| measure | before ms | load 1m | now ms | load 1m | now / before |
|---|---|---|---|---|---|
${rows.join('\n')}
${d0 && d1 ? `
The pass taken apart (medians, ms since navigation start unless named):

| | before | now |
|---|---|---|
${parts.map(([name, k]) => `| ${name} | ${d0[k] ?? ''} | ${d1[k]} |`).join('\n')}
` : ''}`;
}

/** The browser figures beside those of console.before.json (a previous console build measured by --save-as before). */
function beforeMarkdown(before: Result, now: BrowserResult): string {
  const was = before.browser as BrowserResult;
  const rows = now.timings.flatMap((t) => {
    const b = was.timings.find((x) => x.name === t.name);
    return b ? [`| ${t.name} | ${b.median_ms} | ${b.load_1m} | ${t.median_ms} | ${t.load_1m} | ${round(t.median_ms / b.median_ms, 2)} |`] : [];
  });
  const d0 = was.compare_breakdown;
  const d1 = now.compare_breakdown;
  const parts: [string, (d: NonNullable<typeof d0>) => number | string][] = [
    ['first series call sent', (d) => d.first_call_ms],
    ['last answer in time arrived', (d) => d.answered_ms],
    ['charts in view drawn', (d) => d.drawn_ms],
    ['series calls answered by then', (d) => d.calls],
    ['points per series', (d) => d.points],
    ['answers, KiB', (d) => round(d.bytes / 1024)],
    ['parsing, ms', (d) => d.parse_ms],
    ['aligning, ms', (d) => d.align_ms],
    ['drawing, ms', (d) => d.draw_ms],
  ];
  return `
## Before and after: ${String(before.label ?? 'the previous console build')}

The same bench against the console build before the change (console.before.json, measured ${String(before.measured_at ?? '')}),
medians of ${was.passes} passes each; the machine is shared and loaded by others, so each row has its load. Both builds
set the compare marks the same way (uPlot's draw hook, once the canvas is drawn; the figures in the first table of
earlier runs were marked right after the chart was built, before uPlot drew it in a microtask, so they are not
comparable to these). Before: a call per chart (8 at first paint, 500 points a series, each bucket's last value
drawn). Now: the 6 charts in view in one call, a bucket per two plot pixels (296 at this viewport), each line drawn
with its buckets' extremes (a spike inside a bucket shows), the 4 other keys in one call sent as soon as the first
answer arrives (before its charts are drawn), a hundred lines a chart drawn one device pixel wide (a hairline to the
rasterizer). The server's share is the SQL (the split table above): each series is read from the metrics primary key
alone (it carries is_nan since migration 0022; the seed is vacuumed, as autovacuum leaves a settled catalogue) and
bucketed on its own; fewer charts first and fewer buckets shorten it further.

| measure | before ms | load 1m | now ms | load 1m | now / before |
|---|---|---|---|---|---|
${rows.join('\n')}
${d0 && d1 ? `
Compare's first screen taken apart (medians, ms since navigation start unless named):

| | before | now |
|---|---|---|
${parts.map(([name, f]) => `| ${name} | ${f(d0)} | ${f(d1)} |`).join('\n')}
` : ''}`;
}

async function main(): Promise<void> {
  let pg: TestPostgres | null = null;
  if (ENGINE === 'postgres') pg = await startPostgres();
  const home = mkdtempSync(join(tmpdir(), 'bench-console-'));
  const url = pg ? await pg.createDatabase('console') : undefined;
  const loaded = loadConfig({ HANZO_ML_HOME: home, HANZO_ML_LOGGING_LEVEL: 'error', HANZO_ML_METRICS_PORT: '0', HANZO_ML_LIMITS_EVENT_STREAMS_PER_TOKEN: String(STREAMS + 10), ...(url ? { HANZO_ML_DATABASE_URL: url } : {}) });
  const catalogue = await openCatalogue({ url, pgliteDir: url ? undefined : join(home, 'pg') });
  try {
    const seedStart = performance.now();
    await seed(catalogue.db);
    const seedSeconds = round((performance.now() - seedStart) / 1000);
    console.log(`seeded in ${seedSeconds} s`);
    const app = createApp({
      db: catalogue.db,
      store: new FileObjectStore(join(home, 'objects')),
      config: loaded.config,
      home,
      bootstrap: CONSOLE ? { ...loaded.bootstrap, console: CONSOLE } : loaded.bootstrap,
      temporal: {} as Client, // no route measured here uses Temporal
      log: createLogger({ level: 'error', format: 'text' }),
      temporalUiUrl: null,
      metrics: null,
    });
    const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
    await new Promise((r) => server.once('listening', r));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const get = (path: string) => () => fetch(base + path, { headers: { authorization: `Bearer ${TOKEN}` } });
    const post = (path: string, body: unknown) => () => fetch(base + path, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const columns = 'columns=metrics.loss,metrics.acc,params.lr,params.method';
    const compareBody = { run_ids: Array.from({ length: 100 }, (_, i) => runId(i + 1)), keys: Array.from({ length: 10 }, (_, k) => `k${k}`), points: 500 };
    const screenBody = { ...compareBody, keys: compareBody.keys.slice(0, SCREEN_KEYS), points: SCREEN_POINTS, precision: 'float32' };
    const calls = ONLY === 'browser' ? [] : [
      await timed('runs table, first page by start time', get(`/v1/experiments/bench/runs?limit=100&${columns}`)),
      await timed('runs table, first page by metrics.loss', get(`/v1/experiments/bench/runs?limit=100&order_by=${encodeURIComponent('metrics.loss ASC')}&${columns}`)),
      await timed('runs table, the page at offset 9,000 by start time (a jump)', get(`/v1/experiments/bench/runs?limit=100&offset=9000&${columns}`)),
      await timed('runs table, the page at offset 9,000 by metrics.loss (a jump)', get(`/v1/experiments/bench/runs?limit=100&offset=9000&order_by=${encodeURIComponent('metrics.loss ASC')}&${columns}`)),
      await timed('runs table, first page filtered (params.method = lora) by metrics.loss', get(`/v1/experiments/bench/runs?limit=100&filter=${encodeURIComponent("params.method = 'lora'")}&order_by=${encodeURIComponent('metrics.loss ASC')}&${columns}`)),
      await timed('widest run: 100 of its 5,000 latest metrics as columns', get(`/v1/experiments/bench/runs?limit=100&columns=${Array.from({ length: 100 }, (_, k) => `metrics.layer/${k}/grad_norm`).join(',')}`)),
      await timed(`compare: 100 runs x 10 keys x ${STEPS} steps, 500 points each`, post('/v1/runs/series', compareBody)),
      await timed(`compare, values as float32 (what the console asks)`, post('/v1/runs/series', { ...compareBody, precision: 'float32' })),
      await timed(`compare, one chart's call: 100 runs x 1 key, float32`, post('/v1/runs/series', { ...compareBody, keys: ['k0'], precision: 'float32' })),
      await timed(`compare, the console's first screen: 100 runs x ${SCREEN_KEYS} keys, ${SCREEN_POINTS} points, float32`, post('/v1/runs/series', screenBody)),
      await timed('1,000,000-step series in full, 2,000 points', get('/v1/runs/r00001/metrics/train/loss/series?points=2000')),
      await timed('zoom: 10,000 steps of it, 2,000 points', get('/v1/runs/r00001/metrics/train/loss/series?points=2000&from_step=770000&to_step=779999')),
      await timed('memory estimate (zen-7b lora on nvidia-h100-80gb)', post('/v1/estimates/memory', { base_model: 'zen-7b', gpu: { name: 'nvidia-h100-80gb' } })),
    ];
    const seriesOf = (keys: string[], points: number): SeriesRequest => ({ series: compareBody.run_ids.flatMap((runId) => keys.map((key) => ({ runId, key }))), points, precision: 'float32' });
    const split = ONLY === 'browser' ? [] : [
      await splitCall(catalogue.db, "one chart's call: 100 runs x 1 key, 500 points", seriesOf(['k0'], 500)),
      await splitCall(catalogue.db, `one chart's key at the console's width: 100 runs x 1 key, ${SCREEN_POINTS} points`, seriesOf(['k0'], SCREEN_POINTS)),
      await splitCall(catalogue.db, `the console's first screen: 100 runs x ${SCREEN_KEYS} keys, ${SCREEN_POINTS} points`, seriesOf(screenBody.keys, SCREEN_POINTS)),
    ];
    const browser = ONLY === 'server' ? 'not measured in this run (--only server)' : await measureBrowser(base, TOKEN, PASSES);
    const stream = ONLY === 'browser' ? null : await streamFanOut(catalogue.db, base);
    if (stream) console.log(JSON.stringify(stream));
    server.close();
    const outDir = join(repoRoot, 'bench', 'results');
    const previous = existsSync(join(outDir, 'console.json')) ? (JSON.parse(readFileSync(join(outDir, 'console.json'), 'utf8')) as Result) : null;
    const before = SAVE_AS !== 'before' && existsSync(join(outDir, 'console.before.json')) ? (JSON.parse(readFileSync(join(outDir, 'console.before.json'), 'utf8')) as Result) : null;
    const earlier = SAVE_AS === '' && existsSync(join(outDir, 'console.previous.json')) ? (JSON.parse(readFileSync(join(outDir, 'console.previous.json'), 'utf8')) as Result) : null;
    const result: Result = {
      bench: 'console',
      note: 'Server side of the console\'s calls over HTTP on one API process (client in the same process), medians after one warm-up.',
      engine: ENGINE,
      machine: { cores: cpus().length, cpu: cpus()[0]?.model ?? 'unknown', ram_gib: round(totalmem() / 2 ** 30), load_average_1m: load() },
      seed_seconds: seedSeconds,
      passes: PASSES,
      steps_per_compare_series: STEPS,
      goals: { runs_table_ms: 1000, compare_ms: 2000, zoom_ms: 300, heap_mb: 500 },
      // One half measured alone keeps the other half of the last run.
      calls: ONLY === 'browser' && previous ? previous.calls : calls,
      split: ONLY === 'browser' && previous ? previous.split : split,
      stream: stream ?? previous!.stream,
      browser: ONLY === 'server' && previous ? previous.browser : browser,
      measured_at: new Date().toISOString(),
      ...(SAVE_AS ? { label: arg('--label', 'the previous console build') } : {}),
    };
    if (ONLY !== 'all') result.note = `${String(result.note)} Measured alone in the latest run: the ${ONLY === 'browser' ? 'browser' : 'server'} half; the other half is the previous run's.`;
    const name = SAVE_AS ? `console.${SAVE_AS}` : 'console';
    writeFileSync(join(outDir, `${name}.json`), JSON.stringify(result, null, 2) + '\n');
    writeFileSync(join(outDir, `${name}.md`), markdown({ ...result, ...(before ? { before } : {}), ...(earlier ? { previous: earlier } : {}) }));
  } finally {
    await catalogue.close();
    await pg?.stop();
  }
  process.exit(0);
}

await main();

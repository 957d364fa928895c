// The console's data routes on the real app (createApp) over PGlite and Postgres: downsampled series keep a planted
// spike in at most `points` buckets and zoom narrows; the runs table pages by cursor, stably while runs are added;
// one page stream carries two subjects' events in order and resumes from its Last-Event-ID, as one stream of the
// caller's limit; the memory estimate is the trainer's; another organization's ids are 404; bad input is a 400
// naming the parameter. Temporal is not used by these routes and stands in as an empty client.
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appWithoutTemporal } from './support/api-app.js';
import type { Series } from '../contracts/console.js';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { createExperiment } from '../db/repo/experiments.js';
import { appendJobEvents, listJobEvents } from '../db/repo/job-events.js';
import { insertJob, setJobStatus } from '../db/repo/jobs.js';
import { logMetrics, type MetricPoint } from '../db/repo/metrics.js';
import { seriesQuery } from '../db/repo/series.js';
import { createRun } from '../db/repo/runs.js';
import { FileObjectStore } from '../lib/object-store.js';
import { JobFiles } from '../lib/job-files.js';
import { attemptJobName, jobLogNames } from '../lib/job-log.js';
import { testConfig, DEV_TOKEN } from './support/config.js';
import { startPostgres, type TestPostgres } from './support/postgres.js';
import { readSse } from './support/sse.js';

const OTHER = 'token-of-another-org';
const STREAM_CAP = 2;
/** A node of EXPLAIN's JSON plan, the fields read here. */
interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Heap Fetches'?: number;
  'Actual Rows': number;
  Plans?: PlanNode[];
}

describe.each(['pglite', 'postgres'] as const)('console API on %s', (engine) => {
  let pg: TestPostgres | null = null;
  let catalogue: Catalogue;
  let app: ReturnType<typeof appWithoutTemporal>;
  let store: FileObjectStore;
  let loadedConfig: ReturnType<typeof testConfig>['config'];
  let seq = 0;

  const call = async <T = Record<string, unknown>>(method: string, path: string, body?: unknown, token = DEV_TOKEN) => {
    const res = await app.request(path, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as T };
  };

  async function experiment(name: string): Promise<string> {
    const id = `exp-${name}`;
    await createExperiment(catalogue.db, { id, organizationId: 'dev', name, artifactLocation: `file:///tmp/${id}`, tags: [] });
    return id;
  }

  async function run(experimentId: string, p: { startTime?: number; params?: Record<string, string> } = {}): Promise<string> {
    const id = `run-${++seq}`;
    await createRun(catalogue.db, { id, organizationId: 'dev', experimentId, name: id, userId: 'dev', artifactUri: `file:///tmp/${id}`, ...p });
    return id;
  }

  /** Logs points in batches of 1,000, as training logs them. */
  async function log(runId: string, points: MetricPoint[]): Promise<void> {
    for (let i = 0; i < points.length; i += 1000) await logMetrics(catalogue.db, runId, points.slice(i, i + 1000), { events: false });
  }

  beforeAll(async () => {
    if (engine === 'postgres') pg = await startPostgres();
    const loaded = testConfig({ HANZO_ML_LIMITS_EVENT_STREAMS_PER_TOKEN: String(STREAM_CAP) });
    catalogue = await openCatalogue({ url: pg ? await pg.createDatabase('console') : undefined });
    await seedDevOrganization(catalogue.db, 'dev', DEV_TOKEN);
    await seedDevOrganization(catalogue.db, 'other-org', OTHER);
    store = new FileObjectStore(join(loaded.home, 'objects'));
    loadedConfig = loaded.config;
    app = appWithoutTemporal(catalogue.db, loaded, { store });
  }, 120_000);
  afterAll(async () => {
    await catalogue?.close();
    await pg?.stop();
  });

  describe('downsampled series', () => {
    let runId: string;
    const SPIKE = 5431;
    beforeAll(async () => {
      runId = await run(await experiment('series'));
      const points = Array.from({ length: 10_000 }, (_, step) => ({ key: 'eval/loss', step, timestamp: 1000 + step, value: step === SPIKE ? 1000 : 1 / (1 + step) }));
      points.push({ key: 'eval/loss', step: 9999, timestamp: 99_999, value: 0.5 }); // a later point at the last step: the last value
      await log(runId, points);
      await log(runId, [{ key: 'nan', step: 1, timestamp: 1, value: 1 }, { key: 'nan', step: 2, timestamp: 2, value: NaN }]);
    });

    it('keeps a one-step spike in at most `points` buckets, with the last value at the end of each', async () => {
      const res = await call<Series>('GET', `/v1/runs/${runId}/metrics/eval/loss/series?points=100`);
      expect(res.status).toBe(200);
      const s = res.body;
      expect(s).toMatchObject({ run_id: runId, key: 'eval/loss', count: 10_001, from_step: 0, to_step: 9999 });
      expect(s.step_first.length).toBeLessThanOrEqual(100);
      expect(s.step_first.length).toBeGreaterThan(90);
      for (const col of [s.step_last, s.min, s.max, s.last]) expect(col).toHaveLength(s.step_first.length);
      const spiked = s.max.findIndex((v) => v === 1000);
      expect(s.step_first[spiked]).toBeLessThanOrEqual(SPIKE);
      expect(s.step_last[spiked]).toBeGreaterThanOrEqual(SPIKE);
      expect(s.max.filter((v) => v === 1000)).toHaveLength(1);
      expect(s.last.at(-1)).toBe(0.5);
      expect(s.min[0]).toBeCloseTo(1 / (1 + s.step_last[0]!), 12);
      // Buckets are consecutive and cover the whole series.
      expect(s.step_first[0]).toBe(0);
      expect(s.step_last.at(-1)).toBe(9999);
      for (let i = 1; i < s.step_first.length; i++) expect(s.step_first[i]).toBe(s.step_last[i - 1]! + 1);
    });

    it('zooms: a narrower step range answers buckets inside it, one per step once there are fewer steps than points', async () => {
      const res = await call<Series>('GET', `/v1/runs/${runId}/metrics/eval/loss/series?from_step=5000&to_step=5999&points=2000`);
      expect(res.body).toMatchObject({ count: 1000, from_step: 5000, to_step: 5999 });
      expect(res.body.step_first).toHaveLength(1000);
      expect(res.body.step_first).toEqual(res.body.step_last);
      const at = res.body.step_first.indexOf(SPIKE);
      expect([res.body.min[at], res.body.max[at], res.body.last[at]]).toEqual([1000, 1000, 1000]);
    });

    it('answers NaN as MLflow writes it, and a key the run never logged as an empty series', async () => {
      const nan = await call<Series>('GET', `/v1/runs/${runId}/metrics/nan/series`);
      expect(nan.body).toMatchObject({ count: 2, step_first: [1, 2], min: [1, null], max: [1, null], last: [1, 'NaN'] });
      const none = await call<Series>('GET', `/v1/runs/${runId}/metrics/never/series`);
      expect(none.body).toMatchObject({ count: 0, from_step: null, to_step: null, step_first: [], min: [], last: [] });
    });

    it('answers a batch of runs x keys in the order asked, each series bucketed alone', async () => {
      const other = await run(await experiment('series-b'));
      await log(other, Array.from({ length: 50 }, (_, step) => ({ key: 'eval/loss', step, timestamp: step, value: step })));
      const res = await call<{ series: Series[] }>('POST', '/v1/runs/series', { run_ids: [other, runId], keys: ['eval/loss', 'nan'], points: 10 });
      expect(res.status).toBe(200);
      expect(res.body.series.map((s) => [s.run_id, s.key, s.count])).toEqual([
        [other, 'eval/loss', 50],
        [other, 'nan', 0],
        [runId, 'eval/loss', 10_001],
        [runId, 'nan', 2],
      ]);
      expect(res.body.series[0]!.max).toEqual([4, 9, 14, 19, 24, 29, 34, 39, 44, 49]);
      const zoom = await call<{ series: Series[] }>('POST', '/v1/runs/series', { run_ids: [runId], keys: ['eval/loss'], from_step: SPIKE, to_step: SPIKE, points: 10 });
      expect(zoom.body.series[0]).toMatchObject({ count: 1, step_first: [SPIKE], max: [1000] });
    });

    it('reads a settled series from the metrics key alone: an index-only scan, no heap fetch (the key carries is_nan)', async () => {
      await catalogue.db.execute(sql`vacuum analyze metrics`);
      const query = seriesQuery({ series: [{ runId, key: 'eval/loss' }], points: 100, precision: 'float32' });
      const explained = (await catalogue.db.execute(sql`explain (analyze, format json) ${query}`)) as unknown as { rows: { 'QUERY PLAN': { Plan: PlanNode }[] }[] };
      const plan = explained.rows[0]!['QUERY PLAN'][0]!;
      const scans: PlanNode[] = [];
      const walk = (n: PlanNode): void => {
        if (n['Relation Name'] === 'metrics') scans.push(n);
        n.Plans?.forEach(walk);
      };
      walk(plan.Plan);
      expect(scans.length).toBeGreaterThan(0);
      for (const scan of scans) expect([scan['Node Type'], scan['Heap Fetches']]).toEqual(['Index Only Scan', 0]);
      // The scan that buckets the series read its 10,001 points.
      expect(Math.max(...scans.map((n) => n['Actual Rows']))).toBe(10_001);
    });

    it('writes float32 values when asked: shorter text, the same float32, NaN and values beyond its range as before', async () => {
      const odd = await run(await experiment('series-f32'));
      const values = [1 / 3, 1e300, -Infinity, 0, 2.5e-45];
      await log(odd, [...values.map((value, step) => ({ key: 'v', step, timestamp: step, value })), { key: 'v', step: 5, timestamp: 5, value: NaN }]);
      const exact = await call<{ series: Series[] }>('POST', '/v1/runs/series', { run_ids: [odd], keys: ['v'], points: 10 });
      const short = await call<{ series: Series[] }>('POST', '/v1/runs/series', { run_ids: [odd], keys: ['v'], points: 10, precision: 'float32' });
      expect(short.status).toBe(200);
      expect(exact.body.series[0]!.last).toEqual([1 / 3, 1e300, '-Infinity', 0, 2.5e-45, 'NaN']);
      const [third, ...rest] = short.body.series[0]!.last;
      expect(Math.fround(third as number)).toBe(Math.fround(1 / 3));
      expect(String(third).length).toBeLessThan(String(1 / 3).length);
      expect(rest).toEqual([1e300, '-Infinity', 0, 2.5e-45, 'NaN']);
      const single = await call<Series>('GET', `/v1/runs/${odd}/metrics/v/series?precision=float32`);
      expect(single.body.max).toEqual(short.body.series[0]!.max);
      expect((await call('GET', `/v1/runs/${odd}/metrics/v/series?precision=half`)).status).toBe(400);
    });

    it("answers 404 for another organization's run, alone or in a batch", async () => {
      expect((await call('GET', `/v1/runs/${runId}/metrics/eval/loss/series`, undefined, OTHER)).status).toBe(404);
      const batch = await call<{ message: string }>('POST', '/v1/runs/series', { run_ids: [runId], keys: ['eval/loss'] }, OTHER);
      expect(batch.status).toBe(404);
      expect(batch.body.message).toContain(`run_ids: run ${runId}`);
    });

    it('refuses a bad query or body with 400 naming the parameter', async () => {
      const cases: [string, string, unknown, RegExp][] = [
        ['GET', `/v1/runs/${runId}/metrics/eval/loss/series?points=0`, undefined, /points/],
        ['GET', `/v1/runs/${runId}/metrics/eval/loss/series?from_step=10&to_step=5`, undefined, /to_step/],
        ['GET', `/v1/runs/${runId}/metrics/eval/loss/series?from_step=x`, undefined, /from_step/],
        ['GET', `/v1/runs/${runId}/metrics/eval/loss/series?pionts=5`, undefined, /pionts/],
        ['POST', '/v1/runs/series', { run_ids: [], keys: ['a'] }, /run_ids/],
        ['POST', '/v1/runs/series', { run_ids: Array.from({ length: 101 }, (_, i) => `r${i}`), keys: ['a'] }, /run_ids/],
        ['POST', '/v1/runs/series', { run_ids: Array.from({ length: 100 }, (_, i) => `r${i}`), keys: Array.from({ length: 20 }, (_, i) => `k${i}`), points: 1000 }, /points/],
      ];
      for (const [method, path, body, message] of cases) {
        const res = await call<{ message: string }>(method, path, body);
        expect(res.status, path).toBe(400);
        expect(res.body.message).toMatch(message);
      }
    });
  });

  describe('the runs table', () => {
    let exp: string;
    const t0 = Date.parse('2026-01-01T00:00:00Z');
    beforeAll(async () => {
      exp = await experiment('table');
      for (let i = 0; i < 25; i++) {
        const id = await run(exp, { startTime: t0 + i * 1000, params: { lr: String(i / 100), method: i % 2 ? 'lora' : 'qlora' } });
        await log(id, [{ key: 'loss', step: 1, timestamp: 1, value: i }, { key: 'acc', step: 1, timestamp: 1, value: -i }]);
      }
    });

    type Page = { runs: { id: string; name: string; params: Record<string, string>; metrics: Record<string, number>; tags: Record<string, string> }[]; total: number; next_cursor: string | null };
    const page = (q: string, token = DEV_TOKEN) => call<Page>('GET', `/v1/experiments/${exp}/runs?${q}`, undefined, token);

    it('sorts by a metric on the server and answers the total and only the columns asked for', async () => {
      const first = await page('order_by=metrics.loss%20DESC&limit=5&columns=metrics.loss,params.lr');
      expect(first.status).toBe(200);
      expect(first.body.total).toBe(25);
      expect(first.body.runs.map((r) => r.metrics.loss)).toEqual([24, 23, 22, 21, 20]);
      expect(first.body.runs[0]).toMatchObject({ params: { lr: '0.24' }, metrics: { loss: 24 } });
      expect(Object.keys(first.body.runs[0]!.metrics)).toEqual(['loss']);
      expect(Object.keys(first.body.runs[0]!.params)).toEqual(['lr']);
      // Params or tags alone, without a metric column, land in their own kind.
      const paramsOnly = await page('order_by=metrics.loss%20DESC&limit=2&columns=params.lr');
      expect(paramsOnly.body.runs[0]).toMatchObject({ params: { lr: '0.24' }, metrics: {}, tags: {} });
      const filtered = await page(`filter=${encodeURIComponent("params.method = 'lora'")}&order_by=params.lr&limit=3&columns=`);
      expect(filtered.body.total).toBe(12);
      expect(filtered.body.runs[0]).toMatchObject({ params: {}, metrics: {} });
    });

    it('pages by cursor without repeating or skipping a run while runs are added between pages', async () => {
      for (const order of ['', 'order_by=metrics.loss%20ASC&']) {
        const seen: string[] = [];
        let cursor: string | null = null;
        let added = 0;
        do {
          const res: { body: Page } = await page(`${order}limit=7&columns=metrics.loss${cursor ? `&cursor=${cursor}` : ''}`);
          seen.push(...res.body.runs.map((r) => r.name));
          cursor = res.body.next_cursor;
          // A newer run (the default order's front) with the lowest loss (the metric order's front) after each page.
          const id = await run(exp, { startTime: t0 + 100_000 + seq * 1000 });
          await log(id, [{ key: 'loss', step: 1, timestamp: 1, value: -100 - seq }]);
          added++;
        } while (cursor);
        expect(new Set(seen).size).toBe(seen.length);
        expect(seen.length).toBeGreaterThanOrEqual(25);
        expect(added).toBeGreaterThan(3);
      }
    });

    it('answers the page at an offset of the order and filter: the same runs as walking the cursor to it', async () => {
      const filter = `filter=${encodeURIComponent("params.method = 'lora'")}&`;
      for (const order of ['', 'order_by=metrics.loss%20ASC&', `${filter}order_by=params.lr%20DESC&`]) {
        const walked: string[] = [];
        let cursor: string | null = null;
        do {
          const res: { body: Page } = await page(`${order}limit=4&columns=metrics.loss${cursor ? `&cursor=${cursor}` : ''}`);
          walked.push(...res.body.runs.map((r) => r.id));
          cursor = res.body.next_cursor;
        } while (cursor);
        for (const [offset, limit] of [[0, 5], [5, 5], [9, 3], [walked.length - 2, 5], [walked.length + 10, 5]] as const) {
          const res = await page(`${order}offset=${offset}&limit=${limit}&columns=metrics.loss`);
          expect(res.status, `${order} offset ${offset}`).toBe(200);
          expect(res.body.runs.map((r) => r.id), `${order} offset ${offset}`).toEqual(walked.slice(offset, offset + limit));
          expect(res.body.total).toBe(walked.length);
        }
        // A jump's page also answers the cursor after it: reading on from there goes by keyset.
        const jumped = await page(`${order}offset=3&limit=3&columns=`);
        const after = await page(`${order}limit=3&columns=&cursor=${jumped.body.next_cursor!}`);
        expect(after.body.runs.map((r) => r.id)).toEqual(walked.slice(6, 9));
      }
    });

    it("answers 404 for another organization's experiment and 400 naming a bad order_by, filter, columns or cursor", async () => {
      expect((await page('limit=5', OTHER)).status).toBe(404);
      const cursor = (await page('limit=2')).body.next_cursor!;
      const cases: [string, RegExp][] = [
        ['order_by=metrics.loss%20SIDEWAYS', /order_by/],
        ['filter=loss%20%3C', /filter/],
        ['columns=loss', /columns/],
        ['cursor=not-a-cursor', /cursor/],
        [`cursor=${cursor}&order_by=metrics.loss`, /cursor: it was made for another order_by/],
        [`cursor=${cursor}&offset=5`, /offset/],
        ['offset=-1', /offset/],
        ['offset=ten', /offset/],
        ['offset=2.5', /offset/],
        ['limit=0', /limit/],
      ];
      for (const [q, message] of cases) {
        const res = await call<{ message: string }>('GET', `/v1/experiments/${exp}/runs?${q}`);
        expect(res.status, q).toBe(400);
        expect(res.body.message).toMatch(message);
      }
    });
  });

  describe('one stream per page', () => {
    interface Frame {
      event: string;
      id: string;
      data: { type: string; topic: string; step?: number; event?: { id: number; type: string } };
    }

    /** Opens GET /v1/stream and collects its frames until `until` says so (or 15 s pass). */
    async function stream(query: string, o: { lastEventId?: string; token?: string } = {}) {
      const headers: Record<string, string> = { authorization: `Bearer ${o.token ?? DEV_TOKEN}`, ...(o.lastEventId ? { 'last-event-id': o.lastEventId } : {}) };
      const res = await app.request(`/v1/stream?${query}`, { headers });
      const frames: Frame[] = [];
      if (res.status !== 200) return { status: res.status, body: (await res.json()) as { message: string }, frames, waitFor: async () => {}, close: async () => {} };
      const sse = readSse(res, (f) => (f.data ? { event: f.event!, id: f.id!, data: JSON.parse(f.data) as Frame['data'] } : undefined), 15_000);
      return { status: res.status, body: null, frames: sse.items, waitFor: sse.waitFor, close: sse.close };
    }

    it("carries a job's events and a run's new metric points on one connection, each subject in order, and resumes from Last-Event-ID", async () => {
      const runId = await run(await experiment('stream'));
      await insertJob(catalogue.db, { id: 'job-s', organizationId: 'dev', name: 'job-s', submittedBy: 'dev', type: 'training', kind: 'command', spec: {}, status: 'queued', workflowId: 'job:job-s' });
      await appendJobEvents(catalogue.db, [{ organizationId: 'dev', jobId: 'job-s', level: 'info', type: 'message', message: 'validated', data: {} }]);
      const s = await stream(`topics=job:job-s,run:${runId}:metrics`);
      expect(s.status).toBe(200);
      await s.waitFor(1); // the job's history
      await setJobStatus(catalogue.db, 'job-s', 'running');
      await logMetrics(catalogue.db, runId, [{ key: 'loss', step: 1, timestamp: 1, value: 2 }]);
      await logMetrics(catalogue.db, runId, [{ key: 'loss', step: 2, timestamp: 2, value: 1.5 }]);
      await setJobStatus(catalogue.db, 'job-s', 'succeeded');
      await logMetrics(catalogue.db, runId, [{ key: 'loss', step: 3, timestamp: 3, value: 1 }]);
      const expected = (await listJobEvents(catalogue.db, 'dev', 'job-s', { limit: 100 })).map((e) => e.seq);
      await s.waitFor(expected.length + 1 + 3); // the job's events and its end, 3 metric steps
      await s.close();
      const job = s.frames.filter((f) => f.data.topic === 'job:job-s');
      const metrics = s.frames.filter((f) => f.data.topic === `run:${runId}:metrics`);
      expect(job.map((f) => f.data.event?.id ?? f.event)).toEqual([...expected, 'job.end']);
      expect(job.map((f) => f.data.event?.type).slice(-3, -1)).toEqual(['status', 'status']);
      expect(metrics.map((f) => f.data.step)).toEqual([1, 2, 3]);
      // Resumed after the second frame: the rest, and nothing sent before it.
      const resumed = await stream(`topics=job:job-s,run:${runId}:metrics&limit=${s.frames.length - 2}`, { lastEventId: s.frames[1]!.id });
      await resumed.waitFor(s.frames.length - 2);
      await resumed.close();
      const key = (f: Frame) => `${f.data.topic}|${f.event}|${f.data.event?.id ?? ''}|${f.data.step ?? ''}`;
      expect(resumed.frames.map(key).sort()).toEqual(s.frames.slice(2).map(key).sort());
    });

    it("carries a job's log as whole lines beside its events, ends with the job, and resumes mid-log", async () => {
      const row = await insertJob(catalogue.db, { id: 'job-l', organizationId: 'dev', name: 'job-l', submittedBy: 'dev', type: 'training', kind: 'command', spec: {}, status: 'running', workflowId: 'job:job-l' });
      const logUri = JobFiles.of(store, loadedConfig, 'dev', attemptJobName(jobLogNames(row)[0]!, 1)).file('job.log');
      await store.putText(logUri, 'step 1 loss 2.0\nstep 2 lo');
      const s = await stream('topics=job:job-l:logs');
      await s.waitFor(1);
      expect(s.frames[0]!.data).toMatchObject({ type: 'job.log', topic: 'job:job-l:logs', text: 'step 1 loss 2.0\n' });
      await store.putText(logUri, 'step 1 loss 2.0\nstep 2 loss 1.5\ndone');
      await setJobStatus(catalogue.db, 'job-l', 'succeeded');
      await s.waitFor(4);
      await s.close();
      expect(s.frames.map((f) => (f.data as { text?: string }).text ?? f.event)).toEqual(['step 1 loss 2.0\n', 'step 2 loss 1.5\n', 'done', 'job.end']);
      const resumed = await stream('topics=job:job-l:logs', { lastEventId: s.frames[0]!.id });
      await resumed.waitFor(3);
      await resumed.close();
      expect(resumed.frames.map((f) => (f.data as { text?: string }).text ?? f.event)).toEqual(['step 2 loss 1.5\n', 'done', 'job.end']);
    });

    it('counts as one stream of the caller however many subjects it follows', async () => {
      const runs = [await run(await experiment('streams-a')), await run(await experiment('streams-b'))];
      const topics = `topics=${runs.map((r) => `run:${r}:metrics`).join(',')}`;
      const open = [await stream(topics), await stream(topics)];
      expect(open.map((o) => o.status)).toEqual([200, 200]);
      const third = await stream(topics);
      expect(third.status).toBe(429);
      expect(third.body!.message).toContain(`already holds ${STREAM_CAP} event streams`);
      await Promise.all(open.map((o) => o.close()));
    });

    it("answers 404 for another organization's subject and 400 naming a bad topic or Last-Event-ID", async () => {
      const runId = await run(await experiment('stream-tenancy'));
      const other = await stream(`topics=run:${runId}:metrics`, { token: OTHER });
      expect(other.status).toBe(404);
      expect(other.body!.message).toContain(`topics: run ${runId}`);
      const bad = await stream('topics=jobs:x');
      expect(bad.status).toBe(400);
      expect(bad.body!.message).toMatch(/topics/);
      const badId = await stream(`topics=run:${runId}:metrics`, { lastEventId: 'garbage' });
      expect(badId.status).toBe(400);
      expect(badId.body!.message).toMatch(/Last-Event-ID/);
    });
  });

  describe.runIf(engine === 'pglite')('the memory estimate', () => {
    type Estimate = { fits: boolean; total_bytes: number; device_memory_bytes: number; max_micro_batch: number; trainable_params: number; verdict: string; breakdown: Record<string, number> };

    it("answers the trainer's estimate and whether it fits the chosen GPU", async () => {
      const lora = await call<Estimate>('POST', '/v1/estimates/memory', { base_model: 'zen-7b', method: 'lora', hyperparameters: { batch_size: 4, max_seq_length: 1024 }, gpu: { name: 'nvidia-h100-80gb' } });
      expect(lora.status).toBe(200);
      expect(lora.body).toMatchObject({ fits: true, device_memory_bytes: 80 * 2 ** 30 });
      // LoRA rank 16 on q, k, v, o of a 28-layer, 3584-wide model with 512-wide k and v: 16 x (in + out) per projection.
      expect(lora.body.trainable_params).toBe(28 * 16 * (3584 + 3584 + (3584 + 512) * 2 + 3584 + 3584));
      expect(lora.body.breakdown.weights).toBeGreaterThan(14e9); // 7.6B parameters in bf16
      expect(Object.values(lora.body.breakdown).reduce((a, b) => a + b, 0)).toBe(lora.body.total_bytes);
      const full = await call<Estimate>('POST', '/v1/estimates/memory', { base_model: 'zen-72b', method: 'full', hyperparameters: { batch_size: 1 }, gpu: { name: 'nvidia-t4' } });
      expect(full.body).toMatchObject({ fits: false, max_micro_batch: 0 });
      expect(full.body.verdict).toMatch(/does not fit/);
      const ownMemory = await call<Estimate>('POST', '/v1/estimates/memory', { base_model: 'hanzo-tiny-llama', gpu: { memory_gb: 1 } });
      expect(ownMemory.body).toMatchObject({ fits: true, device_memory_bytes: 2 ** 30 });
    });

    it('refuses bad input with 400 naming the field', async () => {
      const cases: [unknown, RegExp][] = [
        [{ base_model: 'zen-7b', gpu: { name: 'nvidia-x' } }, /gpu\.name/],
        [{ base_model: 'zen-7b', gpu: {} }, /gpu\.name: give name or memory_gb/],
        [{ base_model: 'zen-7b', gpu: { name: 'nvidia-l4' }, hyperparameters: { batch_size: 0 } }, /hyperparameters\.batch_size/],
        [{ base_model: 'zen-7b', gpu: { name: 'nvidia-l4' }, method: 'magic' }, /method/],
        [{ base_model: 'no-such-model', gpu: { name: 'nvidia-l4' } }, /base_model: base model "no-such-model" not found/],
        [{ base_model: '/etc', gpu: { name: 'nvidia-l4' } }, /base_model: "\/etc": give a base model's name/],
      ];
      for (const [body, message] of cases) {
        const res = await call<{ message: string }>('POST', '/v1/estimates/memory', body);
        expect(res.status, JSON.stringify(body)).toBe(400);
        expect(res.body.message).toMatch(message);
      }
    });
  });
});

// Concurrent metric batches to one run on Postgres (several connections, real row locks): no deadlock, no lost
// or doubled point, and the latest value per key is the newest point whichever batch commits last. Also the
// history and search cursors: paging a long series or a large search visits every row once, in order.
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { getOrCreateExperiment } from '../db/repo/experiments.js';
import { searchRuns, type RunCursor } from '../db/repo/run-search.js';
import { createRun } from '../db/repo/runs.js';
import { startPostgres, type TestPostgres } from './support/postgres.js';
import { type HistoryCursor, type MetricPoint, latestMetricsOf, logMetrics, metricHistory } from '../db/repo/metrics.js';
import { historyPoints } from './support/history.js';

const ORG = 'org-concurrency';
const KEYS = Array.from({ length: 40 }, (_, i) => `metric/${String(i).padStart(2, '0')}`);

/** A deterministic shuffle, so each batch visits the keys in its own order. */
function shuffled<T>(xs: T[], seed: number): T[] {
  const out = [...xs];
  let s = seed;
  for (let i = out.length - 1; i > 0; i--) {
    s = (s * 1103515245 + 12345) % 2 ** 31;
    const j = s % (i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** Batch b writes steps b*25 .. b*25+24 of every key, the keys in a shuffled order. */
function batch(b: number): MetricPoint[] {
  return shuffled(KEYS, b + 1).flatMap((key) => Array.from({ length: 25 }, (_, i) => ({ key, step: b * 25 + i, timestamp: 1_000 + b, value: b * 1000 + i + KEYS.indexOf(key) / 100 })));
}

describe('metric batches and cursors on Postgres', () => {
  let pg: TestPostgres;
  let cat: Catalogue;
  let experimentId: string;

  beforeAll(async () => {
    pg = await startPostgres();
    cat = await openCatalogue({ url: await pg.createDatabase('concurrency') });
    await seedDevOrganization(cat.db, ORG, 'token-of-concurrency');
    experimentId = await getOrCreateExperiment(cat.db, ORG, 'concurrency', 'file:///tmp/artifacts');
  });
  afterAll(async () => {
    await cat.close();
    await pg.stop();
  });

  const newRun = async (): Promise<string> => {
    const id = randomUUID().replace(/-/g, '');
    await createRun(cat.db, { id, organizationId: ORG, experimentId, name: id, userId: 'test', artifactRoot: 'file:///tmp/artifacts', config: {}, params: {} });
    return id;
  };

  it('refuses points for a run that does not exist and stores none of them', async () => {
    const ghost = 'no-such-run';
    const err = (await logMetrics(cat.db, ghost, batch(0)).catch((e: unknown) => e)) as { cause?: { constraint?: string } } | undefined;
    expect(err?.cause?.constraint).toBe('latest_metrics_run_id_runs_id_fk');
    const left = await cat.db.execute(sql`select count(*)::int as n from metrics where run_id = ${ghost}`);
    expect((left as unknown as { rows: { n: number }[] }).rows[0]!.n).toBe(0);
  });

  it('takes 24 concurrent batches (each twice) to one run without deadlock, keeping every point once and the newest per key', async () => {
    const runId = await newRun();
    const batches = Array.from({ length: 24 }, (_, b) => batch(b));
    // Every batch is sent twice at once (a client retry racing its original), all 48 in parallel over the pool.
    const results = await Promise.allSettled([...batches, ...batches].map((points) => logMetrics(cat.db, runId, points)));
    expect(results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason))).toEqual([]);

    const latest = await latestMetricsOf(cat.db, runId);
    for (const [k, key] of KEYS.entries()) expect(latest[key]).toEqual({ step: 23 * 25 + 24, value: 23_000 + 24 + k / 100 });

    const history = await historyPoints(cat.db, runId, KEYS[7]!, null, 100_000);
    expect(history.points.map((p) => p.step)).toEqual(Array.from({ length: 24 * 25 }, (_, i) => i));
    expect(history.points.every((p) => p.value === Math.floor(p.step / 25) * 1000 + (p.step % 25) + 0.07)).toBe(true);
  });

  it('keeps the latest value right when an older batch commits after a newer one', async () => {
    const runId = await newRun();
    await logMetrics(cat.db, runId, [{ key: 'loss', step: 10, timestamp: 5, value: 0.1 }]);
    await logMetrics(cat.db, runId, [{ key: 'loss', step: 9, timestamp: 9, value: 0.9 }]);
    await logMetrics(cat.db, runId, [{ key: 'loss', step: 10, timestamp: 6, value: Infinity }]);
    expect(await latestMetricsOf(cat.db, runId)).toEqual({ loss: { step: 10, value: Infinity } });
  });

  it('pages a long history by cursor: every point once, in (step, timestamp, value) order, NaN and infinities intact', async () => {
    const runId = await newRun();
    const points: MetricPoint[] = Array.from({ length: 2_500 }, (_, i) => ({ key: 'loss', step: Math.floor(i / 2), timestamp: 100 + (i % 2), value: i === 7 ? NaN : i === 8 ? -Infinity : i / 3 }));
    for (let i = 0; i < points.length; i += 1000) await logMetrics(cat.db, runId, points.slice(i, i + 1000));
    const seen: { step: number; timestamp: number; value: number }[] = [];
    let cursor: HistoryCursor | null = null;
    let pages = 0;
    do {
      const page: Awaited<ReturnType<typeof historyPoints>> = await historyPoints(cat.db, runId, 'loss', cursor, 300);
      seen.push(...page.points);
      cursor = page.next;
      pages++;
    } while (cursor);
    expect(pages).toBe(9);
    expect(seen).toEqual(points.map(({ step, timestamp, value }) => ({ step, timestamp, value })));
  });

  it("pages the MLflow wire form of a history in key order, with MLflow's NaN and infinity strings, JSON-escaped keys and run ids on request", async () => {
    const runId = await newRun();
    const key = 'a "quoted" key';
    const values = [0.1, 1 / 3, 1e-7, -2.5e21, NaN, Infinity, -Infinity, 0, -0.0001, 123456789.123];
    const points: MetricPoint[] = Array.from({ length: 1_030 }, (_, i) => ({ key, step: i % 500, timestamp: 1_000 + Math.floor(i / 500), value: values[i % values.length]! }));
    await logMetrics(cat.db, runId, points);
    const wire = (v: number) => (Number.isNaN(v) ? 'NaN' : v === Infinity ? 'Infinity' : v === -Infinity ? '-Infinity' : v);
    // Key order: (step, timestamp, stored value), NaN stored as 0.
    const stored = (v: number) => (Number.isNaN(v) ? 0 : v);
    const expected = [...points]
      .sort((a, b) => a.step - b.step || a.timestamp - b.timestamp || stored(a.value) - stored(b.value))
      .map((p) => ({ key, value: wire(p.value), timestamp: p.timestamp, step: p.step }));
    const seen: unknown[] = [];
    let cursor: HistoryCursor | null = null;
    let pages = 0;
    do {
      const page: Awaited<ReturnType<typeof metricHistory>> = await metricHistory(cat.db, runId, key, { after: cursor, limit: 250 });
      const parsed = JSON.parse(`[${page.json}]`) as unknown[];
      expect(parsed.length).toBe(page.count);
      seen.push(...parsed);
      cursor = page.next;
      pages++;
    } while (cursor);
    expect(pages).toBe(5);
    expect(seen).toEqual(expected);
    expect(await metricHistory(cat.db, runId, 'no such key', { after: null, limit: 10 })).toEqual({ json: '', count: 0, next: null });
    // get-history-bulk's form: the first points in key order, then by time, each with its run id.
    const bulk = await metricHistory(cat.db, runId, key, { after: null, limit: 3, withRunId: true, byTime: true });
    expect(JSON.parse(`[${bulk.json}]`)).toEqual(expected.slice(0, 3).map((p) => ({ ...p, run_id: runId })));
  });

  it.each([false, true])('pages a run search ordered by a metric (ascending: %s) by cursor: every matching run once, in order, ties broken by id', async (ascending) => {
    const exp = await getOrCreateExperiment(cat.db, ORG, `search-paging-${ascending}`, 'file:///tmp/artifacts');
    const made: { id: string; acc: number }[] = [];
    for (let i = 0; i < 60; i++) {
      const id = randomUUID().replace(/-/g, '');
      await createRun(cat.db, { id, organizationId: ORG, experimentId: exp, name: `r${i}`, userId: 'test', artifactRoot: 'file:///tmp/artifacts', config: {}, params: {} });
      // Duplicate accuracies (i % 20) make the later sort keys decide; run 0 has no accuracy at all.
      if (i > 0) await logMetrics(cat.db, id, [{ key: 'acc', step: 0, timestamp: 1, value: (i % 20) / 20 }]);
      made.push({ id, acc: i > 0 ? (i % 20) / 20 : NaN });
    }
    const filter = [{ entity: 'metric' as const, key: 'acc', op: '>=' as const, value: 0.25 }];
    const orderBy = [{ entity: 'metric' as const, key: 'acc', ascending }];
    const all = await searchRuns(cat.db, ORG, { experimentIds: [exp], filter, orderBy, view: 'ACTIVE_ONLY', limit: 1000 });
    const paged: string[] = [];
    let after: RunCursor | null = null;
    do {
      const page = await searchRuns(cat.db, ORG, { experimentIds: [exp], filter, orderBy, view: 'ACTIVE_ONLY', after, limit: 7 });
      paged.push(...page.rows.map((r) => r.id));
      after = page.next;
    } while (after);
    expect(all.rows.length).toBe(made.filter((m) => m.acc >= 0.25).length);
    expect(paged).toEqual(all.rows.map((r) => r.id));
    const accOf = new Map(made.map((m) => [m.id, m.acc]));
    const accs = paged.map((id) => accOf.get(id)!);
    expect(accs).toEqual([...accs].sort((a, b) => (ascending ? a - b : b - a)));
  });
});

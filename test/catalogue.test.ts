// The catalogue on both engines: the same drizzle migrations and the same assertions on PGlite and Postgres.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCatalogue, pgliteMaintenance, type Catalogue } from '../db/client.js';
import { seedDevOrganization, principalForToken } from '../db/repo/auth.js';
import { insertDatasetVersion, findDatasetVersion, getDataset } from '../db/repo/datasets.js';
import { getOrCreateExperiment } from '../db/repo/experiments.js';
import { createRun } from '../db/repo/runs.js';
import { registerModelVersion, transitionStage, listVersions } from '../db/repo/models.js';
import { outbox } from '../db/schema/index.js';
import { eq } from 'drizzle-orm';
import { PAYLOAD_SCHEMAS } from '../contracts/events.js';
import { startPostgres, type TestPostgres } from './support/postgres.js';
import { latestMetricsOf, logMetrics, type HistoryCursor } from '../db/repo/metrics.js';
import { historyPoints } from './support/history.js';

const engines = ['pglite', 'postgres'] as const;

describe.each(engines)('catalogue on %s', (engine) => {
  let pgServer: TestPostgres | null = null;
  let cat: Catalogue;

  beforeAll(async () => {
    if (engine === 'postgres') {
      pgServer = await startPostgres();
      cat = await openCatalogue({ url: await pgServer.createDatabase('catalogue') });
    } else {
      cat = await openCatalogue({});
    }
    await seedDevOrganization(cat.db, 'org-a', 'token-of-org-a');
    await seedDevOrganization(cat.db, 'org-b', 'token-of-org-b');
  });
  afterAll(async () => {
    await cat.close();
    await pgServer?.stop();
  });

  const dataset = (org: string, name: string) => ({
    id: randomUUID(),
    organizationId: org,
    name,
    format: 'jsonl' as const,
    storagePath: 'file:///x/',
    sizeBytes: 10,
    numRecords: 1,
    sha256: 'a'.repeat(64),
    schema: {},
    splits: {},
    metadata: {},
    tags: [],
    lineage: { parent_datasets: [], transform: 'test' },
    createdBy: 'dev',
  });

  it('seeds an organization and a token idempotently, and resolves the token to its organization', async () => {
    await seedDevOrganization(cat.db, 'org-a', 'token-of-org-a');
    expect(await principalForToken(cat.db, 'token-of-org-a')).toMatchObject({ organizationId: 'org-a', role: 'admin' });
    expect(await principalForToken(cat.db, 'nope')).toBeNull();
  });

  it('numbers dataset versions per organization and name, and emits an event in the same transaction', async () => {
    const v1 = await insertDatasetVersion(cat.db, dataset('org-a', 'ds'));
    const v2 = await insertDatasetVersion(cat.db, dataset('org-a', 'ds'));
    const other = await insertDatasetVersion(cat.db, dataset('org-b', 'ds'));
    expect([v1.version, v2.version, other.version]).toEqual([1, 2, 1]);
    expect((await findDatasetVersion(cat.db, 'org-a', 'ds', 'latest'))!.id).toBe(v2.id);
    const events = await cat.db.select().from(outbox);
    expect(events.filter((e) => e.key === v1.id || e.key === v2.id)).toHaveLength(2);
  });

  it('never shows one organization another organization\'s dataset', async () => {
    const mine = await insertDatasetVersion(cat.db, dataset('org-a', 'private'));
    expect(await getDataset(cat.db, 'org-b', mine.id)).toBeNull();
    expect(await getDataset(cat.db, 'org-a', mine.id)).not.toBeNull();
  });

  it('stores metric batches idempotently, keeps the latest value per key, and pages history by cursor', async () => {
    const exp = await getOrCreateExperiment(cat.db, 'org-a', 'exp', 'file:///a');
    const runId = randomUUID();
    await createRun(cat.db, { id: runId, organizationId: 'org-a', experimentId: exp, name: 'r', userId: 'dev', artifactRoot: 'file:///a', config: {}, params: { lr: '0.1' } });
    const points = Array.from({ length: 2500 }, (_, i) => ({ key: 'train/loss', value: 1 / (i + 1), step: i, timestamp: 1000 + i }));
    await logMetrics(cat.db, runId, points);
    await logMetrics(cat.db, runId, points.slice(0, 10)); // a replayed batch changes nothing
    await logMetrics(cat.db, runId, [{ key: 'train/loss', value: NaN, step: 3000, timestamp: 5000 }]);
    const latest = await latestMetricsOf(cat.db, runId);
    expect(latest['train/loss']!.step).toBe(3000);
    let after: HistoryCursor | null = null;
    let total = 0;
    let pages = 0;
    for (;;) {
      const page: Awaited<ReturnType<typeof historyPoints>> = await historyPoints(cat.db, runId, 'train/loss', after, 1000);
      total += page.points.length;
      pages++;
      if (!page.next) {
        expect(Number.isNaN(page.points.at(-1)!.value)).toBe(true);
        break;
      }
      after = page.next;
    }
    expect([total, pages]).toEqual([2501, 3]);
  });

  it("turns the trainer's GPU system metrics into hanzo.ml.gpu events, one per node, GPU and step, in the batch's statement", async () => {
    const exp = await getOrCreateExperiment(cat.db, 'org-a', 'exp-gpu', 'file:///a');
    const runId = randomUUID();
    await createRun(cat.db, { id: runId, organizationId: 'org-a', experimentId: exp, name: 'r', userId: 'dev', artifactRoot: 'file:///a', config: {}, params: {} });
    const at = (key: string, value: number, step: number) => ({ key, value, step, timestamp: 1000 + step });
    await logMetrics(cat.db, runId, [
      at('train/loss', 0.5, 10),
      ...['node-a/gpu_0', 'node-a/gpu_1'].flatMap((g, i) => [at(`system/${g}_utilization_percentage`, 80 + i, 10), at(`system/${g}_memory_usage_megabytes`, 31245, 10), at(`system/${g}_temperature_celsius`, 60 + i, 10)]),
      // An incomplete sample (no temperature) is no event: the contract needs all three.
      at('system/node-a/gpu_2_utilization_percentage', 5, 10),
      at('system/node-a/gpu_2_memory_usage_megabytes', 5, 10),
    ]);
    const rows = (await cat.db.select().from(outbox).where(eq(outbox.topic, 'gpu'))).filter((r) => (r.payload as { run_id?: string }).run_id === runId);
    expect(rows.map((r) => r.key).sort()).toEqual(['node-a/0', 'node-a/1']);
    for (const r of rows) expect(PAYLOAD_SCHEMAS.gpu.safeParse(r.payload).success).toBe(true);
    expect(rows.find((r) => r.key === 'node-a/1')!.payload).toMatchObject({ node_id: 'node-a', gpu_id: '1', utilization: 81, memory_used: 31245, temperature: 61, step: 10 });
  });

  it('keeps one production version per model: promoting archives the previous one', async () => {
    const base = { organizationId: 'org-a', modelName: 'm', stage: 'staging' as const, architecture: 'LlamaForCausalLM', baseModel: 'b', method: 'lora', artifacts: {}, metrics: {}, trainingConfig: {}, lineage: {}, createdBy: 'dev' };
    const v1 = await registerModelVersion(cat.db, { ...base, sourcePipeline: randomUUID() });
    const v2 = await registerModelVersion(cat.db, { ...base, sourcePipeline: randomUUID() });
    const again = await registerModelVersion(cat.db, { ...base, sourcePipeline: v2.sourcePipeline });
    expect(again.id).toBe(v2.id); // a retried registration returns the version it made
    await transitionStage(cat.db, { organizationId: 'org-a', modelName: 'm', version: v1.version, stage: 'production', actor: 'alice', reason: 'first', requireGate: false });
    const { archived } = await transitionStage(cat.db, { organizationId: 'org-a', modelName: 'm', version: v2.version, stage: 'production', actor: 'bob', reason: 'better', requireGate: false });
    expect(archived).toEqual([v1.version]);
    const stages = Object.fromEntries((await listVersions(cat.db, 'org-a', 'm'))!.map((v) => [v.version, v.stage]));
    expect(stages).toEqual({ [v1.version]: 'archived', [v2.version]: 'production' });
    await expect(transitionStage(cat.db, { organizationId: 'org-b', modelName: 'm', version: 1, stage: 'production', actor: 'eve', reason: 'x' })).rejects.toThrow(/does not exist/);
  });
});

describe('PGlite maintenance (autovacuum is not running in single-user mode)', () => {
  it('vacuums and analyzes a table past autovacuum thresholds, so the planner has statistics, then leaves it alone', async () => {
    const { PGlite } = await import('@electric-sql/pglite');
    const client = await PGlite.create();
    const maintenance = pgliteMaintenance(client, 3_600_000);
    try {
      await client.exec('create table t (id int primary key, v int); create table quiet (id int primary key)');
      await client.exec('insert into t select g, g from generate_series(1, 5000) g; insert into quiet values (1)');
      await client.exec('update t set v = v + 1 where id <= 2000'); // 2,000 dead rows: past 50 + 20% of 5,000
      const stats = async () => (await client.query<{ n_dead_tup: number; last_vacuum: Date | null; last_analyze: Date | null }>("select n_dead_tup::int, last_vacuum, last_analyze from pg_stat_user_tables where relname = 't'")).rows[0]!;
      // Table counters reach pg_stat_user_tables once a second at most.
      const deadline = Date.now() + 10_000;
      while ((await stats()).n_dead_tup === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
      expect((await stats()).n_dead_tup).toBe(2000);
      expect((await client.query("select 1 from pg_stats where tablename = 't'")).rows).toHaveLength(0);

      expect(await maintenance.tick()).toEqual(['vacuum t']);
      const after = await stats();
      expect(after.last_vacuum).not.toBeNull();
      expect(after.last_analyze).not.toBeNull();
      expect((await client.query("select 1 from pg_stats where tablename = 't'")).rows.length).toBeGreaterThan(0);
      expect(await maintenance.tick()).toEqual([]);
    } finally {
      await maintenance.stop();
      await client.close();
    }
  });
});

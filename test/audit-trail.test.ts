// The audit trail against a real embedded API (PGlite catalogue, Temporal dev server, no worker), through
// app.request(): every change commits with its audit row or not at all, shown by a failure injected at commit
// time after all of the change's writes (a deferred constraint trigger), for catalogue-only routes, a logged
// metric batch, uploads and a route that calls Temporal; and 401s are audited with source address and request
// id, aggregated per source address, reason and minute so that a flood adds rows by address and minute, not by
// request.
import { randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { and, eq, sql } from 'drizzle-orm';
import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTemporalDevServer, type DevServer } from '../lib/temporal-dev-server.js';
import { startRuntime, type Runtime } from '../runtime/embedded.js';
import { auth, testConfig } from './support/config.js';
import { withWorker } from './support/stack.js';
import { artifactObjects, auditLog, datasets, experiments, metrics, pipelines, registeredModels, schedules } from '../db/schema/index.js';
import { auditTrail } from '../api/audit.js';
import { ApiError, errorResponse } from '../api/errors.js';
import type { AppEnv } from '../api/deps.js';
import { createLogger } from '../lib/log.js';
import { scheduleId } from '../contracts/pipeline.js';

let temporal: DevServer;
let runtime: Runtime;
type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const chat = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }] });

async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const init: RequestInit = { method, headers: { ...auth, 'content-type': 'application/json', ...headers } };
  if (body !== undefined) init.body = typeof body === 'string' ? body : JSON.stringify(body);
  const res = await runtime.app.request(path, init);
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : {}) as Json };
}

const auditRows = (requestId: string) => runtime.catalogue.db.select().from(auditLog).where(eq(auditLog.requestId, requestId));

beforeAll(async () => {
  const loaded = testConfig();
  mkdirSync(join(loaded.home, 'logs'), { recursive: true });
  temporal = await startTemporalDevServer({ binary: loaded.bootstrap.temporal, home: loaded.home, port: 0, uiPort: null, namespace: 'default' });
  runtime = await startRuntime({ ...loaded, temporalAddress: temporal.address, temporalUiUrl: null, worker: false, listen: false });
  // The injected failure: an audit row of a request whose id starts with "inject-" violates a constraint when
  // its transaction commits, i.e. after every write of the change it records.
  const db = runtime.catalogue.db;
  await db.execute(
    sql.raw(`create function test_fail_injected() returns trigger language plpgsql as $$
      begin
        if new.request_id like 'inject-%' then raise exception 'injected failure for %', new.request_id using errcode = '23514'; end if;
        return null;
      end $$`),
  );
  await db.execute(sql.raw('create constraint trigger test_fail_injected after insert on audit_log deferrable initially deferred for each row execute function test_fail_injected()'));
  // The pipelines below need the version ready: its preparation job runs on a worker that stops once it is.
  const host = { ...loaded, log: runtime.log, catalogue: runtime.catalogue, store: runtime.store, temporalAddress: temporal.address };
  const ds = await withWorker(host, () => call('POST', '/v1/datasets?name=ds-audit&format=jsonl&wait=true', `${chat}\n${chat}\n`, { 'content-type': 'application/x-ndjson' }));
  expect(ds.status, JSON.stringify(ds.body)).toBe(201);
}, 180_000);

afterAll(async () => {
  await runtime?.stop();
  await temporal?.stop();
});

describe('a change and its audit row', () => {
  /** Runs `attempt` once with an injected failure and once without; `exists` says whether its change is there. */
  async function atomically(name: string, attempt: (requestId: string, n: string) => Promise<{ status: number; body: Json }>, exists: (n: string) => Promise<boolean>) {
    const failed = await attempt(`inject-${name}`, `${name}-failed`);
    expect([name, failed.status, failed.body.message]).toEqual([name, 500, expect.stringMatching(/injected failure/)]);
    expect([name, await exists(`${name}-failed`), (await auditRows(`inject-${name}`)).length]).toEqual([name, false, 0]);
    const rid = `ok-${name}-${randomUUID()}`;
    const ok = await attempt(rid, `${name}-ok`);
    expect([name, ok.status]).toEqual([name, expect.toSatisfy((s: number) => s >= 200 && s < 300)]);
    expect([name, await exists(`${name}-ok`)]).toEqual([name, true]);
    const rows = await auditRows(rid);
    expect(rows.length, name).toBeGreaterThan(0);
    expect(rows[0]).toMatchObject({ organizationId: 'dev', actor: 'dev', outcome: 'ok' });
    return { ok, rows };
  }
  const db = () => runtime.catalogue.db;
  const rid = (id: string) => ({ 'x-request-id': id });

  it('commit together on the catalogue-only routes (/v1 and the MLflow API), or not at all', async () => {
    await atomically(
      'model',
      (id, n) => call('POST', '/v1/models', { name: n }, rid(id)),
      async (n) => (await db().select().from(registeredModels).where(eq(registeredModels.name, n))).length > 0,
    );
    const { rows } = await atomically(
      'mlflow-exp',
      (id, n) => call('POST', '/api/2.0/mlflow/experiments/create', { name: n }, rid(id)),
      async (n) => (await db().select().from(experiments).where(eq(experiments.name, n))).length > 0,
    );
    expect(rows.map((r) => r.action)).toContain('POST /api/2.0/mlflow/experiments/create');
    await atomically(
      'v1-exp',
      (id, n) => call('POST', '/v1/experiments', { name: n }, rid(id)),
      async (n) => (await db().select().from(experiments).where(eq(experiments.name, n))).length > 0,
    );
  });

  it('commit together for a logged batch, metrics alone (one statement) or with params (a transaction), or not at all', async () => {
    const created = await call('POST', '/api/2.0/mlflow/runs/create', { experiment_id: '0' });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    const runId = created.body.run.info.run_id as string;
    const metricStored = async (key: string) => (await db().select().from(metrics).where(and(eq(metrics.runId, runId), eq(metrics.key, key)))).length > 0;
    const point = (key: string) => ({ key, value: 0.5, timestamp: 1, step: 1 });
    for (const [name, body] of [
      ['batch-metrics', (n: string) => ({ run_id: runId, metrics: [point(n), point(`${n}-b`)] })],
      ['batch-params', (n: string) => ({ run_id: runId, metrics: [point(n)], params: [{ key: n, value: '1' }] })],
    ] as const) {
      const { rows } = await atomically(name, (id, n) => call('POST', '/api/2.0/mlflow/runs/log-batch', body(n), rid(id)), metricStored);
      expect(rows.map((r) => [r.action, r.target])).toEqual([['POST /api/2.0/mlflow/runs/log-batch', '/api/2.0/mlflow/runs/log-batch']]);
    }
    // A refused batch (an unknown run, a deleted run) writes neither points nor an audit row; another
    // organization's run is probed in identity.test.ts.
    const other = await call('POST', '/api/2.0/mlflow/runs/log-batch', { run_id: 'no-such-run', metrics: [point('ghost')] }, rid('refused-missing'));
    expect([other.status, other.body.error_code]).toEqual([404, 'RESOURCE_DOES_NOT_EXIST']);
    expect((await call('POST', '/api/2.0/mlflow/runs/delete', { run_id: runId })).status).toBe(200);
    const deleted = await call('POST', '/api/2.0/mlflow/runs/log-batch', { run_id: runId, metrics: [point('after-delete')] }, rid('refused-deleted'));
    expect([deleted.status, deleted.body.message]).toEqual([400, `The run ${runId} must be in the 'active' state. Current state is deleted.`]);
    expect(await metricStored('after-delete')).toBe(false);
    expect([(await auditRows('refused-missing')).length, (await auditRows('refused-deleted')).length]).toEqual([0, 0]);
  });

  it('commit together for uploads: a dataset version and a run artifact', async () => {
    await atomically(
      'dataset',
      (id, n) => call('POST', `/v1/datasets?name=${n}&format=jsonl`, `${chat}\n${chat}\n`, { ...rid(id), 'content-type': 'application/x-ndjson' }),
      async (n) => (await db().select().from(datasets).where(eq(datasets.name, n))).length > 0,
    );
    const run = await call('POST', '/v1/runs', { experiment_name: 'audit-artifacts' });
    expect(run.status).toBe(201);
    const { rows } = await atomically(
      'artifact',
      (id, n) => call('POST', `/v1/runs/${run.body.id}/artifacts?path=${n}.txt`, 'bytes', { ...rid(id), 'content-type': 'application/octet-stream' }),
      async (n) => (await db().select().from(artifactObjects).where(sql`${artifactObjects.key} like ${`%/${n}.txt`}`)).length > 0,
    );
    expect(rows[0]).toMatchObject({ action: 'artifact.upload' });
  });

  it('commit together with the catalogue row of a Temporal call, and a schedule whose row failed to commit is deleted from Temporal', async () => {
    const pipeline = { model_name: 'audited', base_model: 'hanzo-tiny-llama', dataset: { name: 'ds-audit', version: 'latest' } };
    let scheduleIds: Record<string, string> = {};
    await atomically(
      'schedule',
      async (id, n) => {
        const r = await call('POST', '/v1/schedules', { name: n, every: '24h', paused: true, pipeline }, rid(id));
        return r;
      },
      async (n) => {
        const [row] = await db().select().from(schedules).where(eq(schedules.name, n));
        if (row) scheduleIds = { ...scheduleIds, [n]: row.id };
        return row !== undefined;
      },
    );
    // The failed attempt's Temporal schedule was deleted again: only the committed one is left.
    const listed: string[] = [];
    for await (const s of runtime.client.schedule.list()) listed.push(s.scheduleId);
    expect(listed).toEqual([scheduleId(scheduleIds['schedule-ok']!)]);

    const rid2 = `ok-pipeline-${randomUUID()}`;
    const started = await call('POST', '/v1/pipelines', pipeline, rid(rid2));
    expect(started.status, JSON.stringify(started.body)).toBe(201);
    const [row] = await db().select().from(pipelines).where(eq(pipelines.id, started.body.id as string));
    expect(row).toMatchObject({ stage: 'queued', createdBy: 'dev' });
    expect(await auditRows(rid2)).toEqual([expect.objectContaining({ action: 'pipeline.start', target: started.body.id })]);
  });
});

describe('reads of dataset metadata', () => {
  it('are audit rows naming the reader and the dataset, from the /v1 list and record and from MLflow\'s dataset search', async () => {
    const list = await call('GET', '/v1/datasets?name=ds-audit', undefined, { 'x-request-id': 'ds-read-list' });
    expect(list.status).toBe(200);
    const id = (list.body.datasets as Json[])[0]!.id as string;
    expect((await call('GET', `/v1/datasets/${id}`, undefined, { 'x-request-id': 'ds-read-one' })).status).toBe(200);
    const exp = await call('POST', '/api/2.0/mlflow/experiments/create', { name: `ds-read-${randomUUID()}` });
    const search = await call('POST', '/api/2.0/mlflow/experiments/search-datasets', { experiment_ids: [exp.body.experiment_id] }, { 'x-request-id': 'ds-read-search' });
    expect(search.status).toBe(200);
    for (const [requestId, target] of [['ds-read-list', '/v1/datasets'], ['ds-read-one', `/v1/datasets/${id}`], ['ds-read-search', '/api/2.0/mlflow/experiments/search-datasets']] as const)
      expect(await auditRows(requestId), requestId).toEqual([expect.objectContaining({ action: 'dataset.read', target, actor: 'dev', organizationId: 'dev', outcome: 'ok' })]);
  });

  it('are audit rows from the /v1/files list and record too (the same dataset versions in OpenAI\'s shape)', async () => {
    const files = await call('GET', '/v1/files', undefined, { 'x-request-id': 'ds-read-files' });
    expect(files.status).toBe(200);
    const id = (files.body.data as Json[])[0]!.id as string;
    expect((await call('GET', `/v1/files/${id}`, undefined, { 'x-request-id': 'ds-read-file' })).status).toBe(200);
    for (const [requestId, target] of [['ds-read-files', '/v1/files'], ['ds-read-file', `/v1/files/${id}`]] as const)
      expect(await auditRows(requestId), requestId).toEqual([expect.objectContaining({ action: 'dataset.read', target, actor: 'dev', organizationId: 'dev', outcome: 'ok' })]);
  });

  it('that find nothing write no read row (a probe of another id is not a read of anything)', async () => {
    expect((await call('GET', `/v1/datasets/${randomUUID()}`, undefined, { 'x-request-id': 'ds-read-missing' })).status).toBe(404);
    expect(await auditRows('ds-read-missing')).toEqual([]);
  });
});

describe('401s', () => {
  it('are audited with source address, reason and request id, one row per address, reason and minute', async () => {
    const bad = { authorization: 'Bearer not-a-token' };
    for (let i = 0; i < 5; i++) expect((await call('GET', '/v1/models', undefined, { ...bad, 'x-forwarded-for': '203.0.113.7', 'x-request-id': `flood-${i}` })).status).toBe(401);
    for (let i = 0; i < 2; i++) {
      const res = await runtime.app.request('/v1/models', { headers: { 'x-forwarded-for': '203.0.113.8', 'x-request-id': `bare-${i}` } });
      expect(res.status).toBe(401);
    }
    const rows = await runtime.catalogue.db.select().from(auditLog).where(and(eq(auditLog.actor, 'unauthenticated'), eq(auditLog.sourceAddress, '203.0.113.7')));
    // A minute may turn during the loop: then the attempts are split over two rows, still all counted.
    expect(rows.length).toBeGreaterThanOrEqual(1);
    expect(rows.length).toBeLessThanOrEqual(2);
    expect(rows.reduce((n, r) => n + r.repeatCount, 0)).toBe(5);
    expect(rows[0]).toMatchObject({ organizationId: 'dev', outcome: 'denied', requestId: 'flood-0', action: 'unauthenticated GET /v1/models' });
    expect(JSON.parse(rows[0]!.detail)).toMatchObject({ status: 401, reason: 'unknown, expired or revoked token' });
    const bare = await runtime.catalogue.db.select().from(auditLog).where(eq(auditLog.sourceAddress, '203.0.113.8'));
    expect(bare.reduce((n, r) => n + r.repeatCount, 0)).toBe(2);
    expect(JSON.parse(bare[0]!.detail).reason).toMatch(/missing "Authorization: Bearer <token>" header/);
    // The admin reads them in the trail, with their count.
    const trail = (await call('GET', '/v1/audit?limit=1000')).body.entries as Json[];
    expect(trail.filter((e) => e.source_address === '203.0.113.7').reduce((n, e) => n + (e.repeat_count as number), 0)).toBe(5);
  });

  it('from more source addresses than the per-minute cap fold into one row, so a flood cannot grow the table by address', async () => {
    const db = runtime.catalogue.db;
    const app = new Hono<AppEnv>();
    app.use('*', async (c, next) => {
      c.set('requestId', c.req.header('x-request-id') ?? randomUUID());
      await next();
    });
    app.use('*', auditTrail({ db, log: createLogger({ level: 'error', format: 'text' }), config: testConfig().config }, null, { keysPerMinute: 3 }));
    app.get('/probe', () => {
      throw new ApiError('UNAUTHENTICATED', 'capped probe');
    });
    app.onError((err, c) => errorResponse(c, (err as ApiError).code, err.message));
    for (let i = 0; i < 20; i++) expect((await app.request('/probe', { headers: { 'x-forwarded-for': `198.51.100.${i}` } })).status).toBe(401);
    const rows = await db.select().from(auditLog).where(eq(auditLog.action, 'unauthenticated GET /probe'));
    expect(rows.reduce((n, r) => n + r.repeatCount, 0)).toBe(20);
    // 3 addresses get rows of their own, the other 17 one shared row (two of each if a minute turned).
    expect(rows.length).toBeLessThanOrEqual(8);
    expect(rows.some((r) => r.aggregateKey!.includes('|many|') && r.repeatCount >= 8)).toBe(true);
  });
});

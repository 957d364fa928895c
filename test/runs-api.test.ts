// /v1/runs writes against a real stack on PGlite, through app.request(): creating runs (by experiment id or
// name), immutable parameters, status changes, the run as GET returns it, roles, tenancy and bad input.
import { randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTemporalDevServer, type DevServer } from '../lib/temporal-dev-server.js';
import { startRuntime, type Runtime } from '../runtime/embedded.js';
import { auth, testConfig } from './support/config.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { recordArtifact } from '../db/repo/run-artifacts.js';
import { apiTokens } from '../db/schema/index.js';
import { sha256Text } from '../lib/hash.js';

let temporal: DevServer;
let runtime: Runtime;
type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const VIEWER = { authorization: 'Bearer viewer-token' };
const OTHER = { authorization: 'Bearer token-of-another-org' };

async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = auth) {
  const init: RequestInit = { method, headers: { ...headers, 'content-type': 'application/json' } };
  if (body !== undefined) init.body = typeof body === 'string' ? body : JSON.stringify(body);
  const res = await runtime.app.request(`/v1${path}`, init);
  return { status: res.status, body: (await res.json()) as Json };
}

async function newRun(body: Json = {}): Promise<Json> {
  const res = await call('POST', '/runs', { experiment_name: 'runs-api', ...body });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body;
}

describe('/v1/runs writes', () => {
  beforeAll(async () => {
    // API only: no worker, no listening server (the routes never reach Temporal, but the app holds a client).
    const loaded = testConfig();
    mkdirSync(join(loaded.home, 'logs'), { recursive: true });
    temporal = await startTemporalDevServer({ binary: loaded.bootstrap.temporal, home: loaded.home, port: 0, uiPort: null, namespace: 'default' });
    runtime = await startRuntime({ ...loaded, temporalAddress: temporal.address, temporalUiUrl: null, worker: false, listen: false });
    const db = runtime.catalogue.db;
    await seedDevOrganization(db, 'other-org', 'token-of-another-org');
    await db.insert(apiTokens).values({ id: randomUUID(), organizationId: 'dev', subject: 'reader', role: 'viewer', tokenSha256: sha256Text('viewer-token') });
  }, 120_000);
  afterAll(async () => {
    await runtime?.stop();
    await temporal?.stop();
  });

  it('creates a run in an experiment named on the fly, with tags and params, and reads it back', async () => {
    const run = await newRun({ experiment_name: 'fresh-experiment', run_name: 'qlora-lr2e5', tags: { team: 'nlp' }, params: { lr: 2e-5, rank: 64, bf16: true } });
    expect(run).toMatchObject({ name: 'qlora-lr2e5', status: 'running', end_time: null, user_id: 'dev', organization: 'dev', lifecycle_stage: 'active' });
    expect(run.id).toMatch(/^[0-9a-f]{32}$/);
    expect(run.params).toEqual({ lr: '0.00002', rank: '64', bf16: 'true' });
    expect(run.tags).toEqual({ team: 'nlp', 'mlflow.runName': 'qlora-lr2e5' });
    expect(run.artifact_uri).toMatch(new RegExp(`/experiments/${run.experiment_id}/${run.id}/artifacts$`));
    const experiments = await call('GET', '/experiments');
    expect(experiments.body.experiments).toContainEqual(expect.objectContaining({ id: run.experiment_id, name: 'fresh-experiment' }));
    // The same name again finds the same experiment.
    expect((await newRun({ experiment_name: 'fresh-experiment' })).experiment_id).toBe(run.experiment_id);
    // And the MLflow API sees the same run.
    const mlflow = await runtime.app.request(`/api/2.0/mlflow/runs/get?run_id=${run.id}`, { headers: auth });
    const info = ((await mlflow.json()) as Json).run;
    expect(info.info).toMatchObject({ run_name: 'qlora-lr2e5', status: 'RUNNING', experiment_id: run.experiment_id });
    expect(info.data.params).toContainEqual({ key: 'rank', value: '64' });
  });

  it('creates runs by experiment id, in the Default experiment without one, and refuses an unknown experiment', async () => {
    const exp = await call('POST', '/experiments', { name: 'by-id' });
    const run = await newRun({ experiment_name: undefined, experiment_id: exp.body.id });
    expect(run.experiment_id).toBe(exp.body.id);
    expect(run.name).toMatch(/^run-[0-9a-f]{8}$/);
    // "0" is the Default experiment, as in MLflow; /v1 shows its stored id.
    const plain = await call('POST', '/runs', {});
    expect(plain).toMatchObject({ status: 201, body: { experiment_id: 'default-dev' } });
    expect((await call('POST', '/runs', { experiment_id: '0' })).body.experiment_id).toBe('default-dev');
    expect((await call('POST', '/runs', { experiment_id: 'default-dev' })).body.experiment_id).toBe('default-dev');
    const missing = await call('POST', '/runs', { experiment_id: 'no-such-experiment' });
    expect(missing).toMatchObject({ status: 404, body: { error_code: 'RESOURCE_DOES_NOT_EXIST' } });
    expect(missing.body.message).toMatch(/experiment_id/);
  });

  it('logs params as a batch; the same value again is a no-op and a different value is a 400 naming the key', async () => {
    const run = await newRun({ params: { model: 'tiny' } });
    const first = await call('POST', `/runs/${run.id}/params`, { params: { lr: '0.001', epochs: 3 } });
    expect(first).toMatchObject({ status: 200, body: { params: { lr: '0.001', epochs: '3' } } });
    expect((await call('POST', `/runs/${run.id}/params`, { params: { lr: '0.001', model: 'tiny' } })).status).toBe(200);
    const changed = await call('POST', `/runs/${run.id}/params`, { params: { lr: '0.01', batch: 8 } });
    expect(changed).toMatchObject({ status: 400, body: { error_code: 'INVALID_PARAMETER_VALUE' } });
    expect(changed.body.message).toContain("params.lr: parameters are immutable and run");
    expect(changed.body.message).toContain("'lr' (logged '0.001', now '0.01')");
    // Nothing of the refused batch was written.
    expect((await call('GET', `/runs/${run.id}`)).body.params).toEqual({ model: 'tiny', lr: '0.001', epochs: '3' });
  });

  it('sets the status: a terminal status ends the run now or at the given time, RUNNING reopens it', async () => {
    const run = await newRun();
    const before = Date.now();
    const done = await call('PATCH', `/runs/${run.id}/status`, { status: 'FINISHED' });
    expect(done).toMatchObject({ status: 200, body: { status: 'completed' } });
    expect(Date.parse(done.body.end_time)).toBeGreaterThanOrEqual(before - 5);
    const reopened = await call('PATCH', `/runs/${run.id}/status`, { status: 'RUNNING' });
    expect(reopened.body).toMatchObject({ status: 'running', end_time: null });
    const failed = await call('PATCH', `/runs/${run.id}/status`, { status: 'FAILED', end_time: 1_800_000_000_000 });
    expect(failed.body).toMatchObject({ status: 'failed', end_time: new Date(1_800_000_000_000).toISOString() });
    const killed = await call('PATCH', `/runs/${run.id}/status`, { status: 'cancelled', end_time: '2027-01-02T03:04:05Z' });
    expect(killed.body).toMatchObject({ status: 'cancelled', end_time: '2027-01-02T03:04:05.000Z' });
    const mlflow = await runtime.app.request(`/api/2.0/mlflow/runs/get?run_id=${run.id}`, { headers: auth });
    expect(((await mlflow.json()) as Json).run.info).toMatchObject({ status: 'KILLED', end_time: Date.parse('2027-01-02T03:04:05Z') });
  });

  it('returns the run with config, params, tags, latest metrics and artifacts', async () => {
    const run = await newRun({ params: { lr: '0.1' } });
    const metrics = [
      { key: 'train/loss', value: 2.0, step: 1, timestamp: 1000 },
      { key: 'train/loss', value: 1.5, step: 2, timestamp: 1001 },
      { key: 'eval/loss', value: 1.7, step: 2, timestamp: 1002 },
      { key: 'grad_norm', value: 'NaN', step: 2, timestamp: 1002 },
    ];
    expect((await call('POST', `/runs/${run.id}/metrics`, { metrics })).status).toBe(200);
    await recordArtifact(runtime.catalogue.db, { runId: run.id, path: 'config.yaml', uri: `${run.artifact_uri}/config.yaml`, sizeBytes: 12, sha256: 'a'.repeat(64) });
    const upload = await runtime.app.request(`/v1/runs/${run.id}/artifacts?path=eval/results.json`, { method: 'POST', headers: auth, body: '{"accuracy": 0.9}' });
    expect(upload.status).toBe(201);
    const got = await call('GET', `/runs/${run.id}`);
    expect(got.body.artifacts[1]).toMatchObject({ key: 'eval/results.json', size_bytes: 17, path: `${run.artifact_uri}/eval/results.json` });
    expect(got.body).toMatchObject({
      config: {},
      params: { lr: '0.1' },
      metrics: {
        'train/loss': { value: 1.5, step: 2, timestamp: 1001 },
        'eval/loss': { value: 1.7, step: 2, timestamp: 1002 },
        grad_norm: { value: 'NaN', step: 2, timestamp: 1002 },
      },
      artifacts: [{ key: 'config.yaml', path: `${run.artifact_uri}/config.yaml`, size_bytes: 12, sha256: 'a'.repeat(64), metadata: {} }, expect.anything()],
    });
  });

  it('documents the run writes in the OpenAPI document', async () => {
    const doc = (await (await runtime.app.request('/openapi.json')).json()) as Json;
    expect(Object.keys(doc.paths['/v1/runs'])).toContain('post');
    expect(Object.keys(doc.paths['/v1/runs/{id}/params'])).toContain('post');
    expect(Object.keys(doc.paths['/v1/runs/{id}/status'])).toContain('patch');
    expect(Object.keys(doc.paths['/v1/runs'].post.requestBody.content['application/json'].schema.properties)).toEqual(
      expect.arrayContaining(['experiment_id', 'experiment_name', 'run_name', 'tags', 'params']),
    );
  });

  it('rejects bad input with a 400 that names the field, never a 500', async () => {
    const run = await newRun();
    const cases: [string, string, unknown, RegExp][] = [
      ['POST', '/runs', { experiment_id: 'x', experiment_name: 'y' }, /experiment_name: give experiment_id or experiment_name, not both/],
      ['POST', '/runs', { run_name: 42 }, /run_name/],
      ['POST', '/runs', { tags: { 'bad key?': 'v' } }, /tags\.bad key\?.*Names may only contain/],
      ['POST', '/runs', { params: { '../up': '1' } }, /params\.\.\.\/up/],
      ['POST', '/runs', { params: { lr: { nested: 1 } } }, /params\.lr/],
      ['POST', '/runs', { start_time: 'yesterday' }, /start_time/],
      ['POST', '/runs', { surprise: 1 }, /surprise/],
      ['POST', '/runs', { run_name: 'a', tags: { 'mlflow.runName': 'b' } }, /run_name: "a" differs from the mlflow.runName tag "b"/],
      ['POST', '/runs', { run_name: 'nul\u0000name' }, /run_name: strings may not contain NUL/],
      ['POST', `/runs/${run.id}/params`, { params: {} }, /params: at least one parameter/],
      ['POST', `/runs/${run.id}/params`, { params: Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`p${i}`, i])) }, /params: at most 100 parameters/],
      ['POST', `/runs/${run.id}/params`, { params: { long: 'x'.repeat(6001) } }, /params\.long: a parameter value is at most 6000 characters/],
      ['POST', `/runs/${run.id}/params`, '{not json', /not valid JSON/],
      ['POST', `/runs/${run.id}/metrics`, { metrics: [{ key: 'loss (train)', value: 1 }] }, /metrics\.0\.key.*Names may only contain/],
      ['POST', `/runs/${run.id}/metrics`, { metrics: [{ key: 'loss', value: 'lots' }] }, /metrics\.0\.value/],
      ['PATCH', `/runs/${run.id}/status`, { status: 'DONE' }, /status/],
      ['PATCH', `/runs/${run.id}/status`, {}, /status/],
      ['PATCH', `/runs/${run.id}/status`, { status: 'FINISHED', end_time: -1 }, /end_time/],
      ['PATCH', `/runs/${run.id}/status`, { status: 'RUNNING', end_time: 5 }, /end_time: a running run has no end time/],
    ];
    for (const [method, path, body, message] of cases) {
      const res = await call(method, path, body);
      expect(res.status, `${method} ${path} ${JSON.stringify(body)}: ${JSON.stringify(res.body)}`).toBe(400);
      expect(res.body.message).toMatch(message);
      expect(res.body.request_id).toEqual(expect.any(String));
    }
  });

  it('lets a viewer read runs but not write them, and hides runs from other organizations', async () => {
    const run = await newRun();
    expect((await call('GET', `/runs/${run.id}`, undefined, VIEWER)).status).toBe(200);
    for (const [method, path, body] of [
      ['POST', '/runs', {}],
      ['POST', `/runs/${run.id}/params`, { params: { a: 1 } }],
      ['PATCH', `/runs/${run.id}/status`, { status: 'FINISHED' }],
    ] as const)
      expect(await call(method, path, body, VIEWER)).toMatchObject({ status: 403, body: { error_code: 'PERMISSION_DENIED' } });
    expect((await call('GET', `/runs/${run.id}`, undefined, OTHER)).status).toBe(404);
    expect((await call('POST', `/runs/${run.id}/params`, { params: { a: 1 } }, OTHER)).status).toBe(404);
    expect((await call('PATCH', `/runs/${run.id}/status`, { status: 'FINISHED' }, OTHER)).status).toBe(404);
    expect((await call('PATCH', '/runs/no-such-run/status', { status: 'FINISHED' })).body).toMatchObject({ error_code: 'RESOURCE_DOES_NOT_EXIST' });
  });

  it('refuses writes to a deleted run', async () => {
    const run = await newRun();
    const del = await runtime.app.request('/api/2.0/mlflow/runs/delete', { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ run_id: run.id }) });
    expect(del.status).toBe(200);
    for (const [method, path, body] of [
      ['POST', `/runs/${run.id}/params`, { params: { a: 1 } }],
      ['PATCH', `/runs/${run.id}/status`, { status: 'FINISHED' }],
      ['POST', `/runs/${run.id}/metrics`, { metrics: [{ key: 'a', value: 1 }] }],
    ] as const) {
      const res = await call(method, path, body);
      expect(res.status).toBe(400);
      expect(res.body.message).toBe(`run ${run.id} is deleted and takes no more writes`);
    }
  });
  it('returns a metric history page by page, NaN and infinities as written, points that share a step intact', async () => {
    const run = await newRun();
    const points = [
      { key: 'loss', value: 'NaN', step: 0, timestamp: 5 },
      { key: 'loss', value: 1.5, step: 1, timestamp: 5 },
      { key: 'loss', value: 0.5, step: 1, timestamp: 5 }, // same step and time, another value: a distinct point
      { key: 'loss', value: 'Infinity', step: 2, timestamp: 5 },
    ];
    expect((await call('POST', `/runs/${run.id}/metrics`, { metrics: points })).status).toBe(200);
    const seen: Json[] = [];
    let token: string | null = null;
    do {
      const query: string = `key=loss&limit=2${token ? `&page_token=${token}` : ''}`;
      const page = await call('GET', `/runs/${run.id}/metrics?${query}`);
      expect(page.status, JSON.stringify(page.body)).toBe(200);
      seen.push(...page.body.metrics);
      token = page.body.next_page_token;
    } while (token);
    expect(seen.map((p) => [p.step, p.value])).toEqual([[0, 'NaN'], [1, 0.5], [1, 1.5], [2, 'Infinity']]);
    const bad = await call('GET', `/runs/${run.id}/metrics?key=loss&page_token=nonsense`);
    expect(bad.status).toBe(400);
    expect(bad.body.error_code).toBe('INVALID_PARAMETER_VALUE');
  });
});

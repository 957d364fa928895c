// The HTTP API against a real embedded stack: authentication, tenancy (404 for another organization), the
// error shape, bad input always 4xx, dataset upload (good files and every kind of bad file), OpenAPI.
import { readdirSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { openApiPath } from '../api/openapi.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, withWorker, type TestStack } from './support/stack.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { datasets } from '../db/schema/index.js';
import { startPostgres, type TestPostgres } from './support/postgres.js';

let stack: TestStack;
const OTHER = { authorization: 'Bearer token-of-another-org' };

/** An upload waited on (wait=true) while a worker beside the API runs its preparation job. */
async function upload(name: string, content: string | Buffer, format = 'jsonl', headers: Record<string, string> = { authorization: 'Bearer hanzo-ml-dev-token' }) {
  const res = await withWorker(stack, () => fetch(`${stack.runtime.apiUrl}/v1/datasets?name=${name}&format=${format}&wait=true`, { method: 'POST', headers, body: typeof content === 'string' ? content : new Uint8Array(content) }));
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

const chat = (q: string, a: string) => JSON.stringify({ messages: [{ role: 'user', content: q }, { role: 'assistant', content: a }] });

describe.each(['pglite', 'postgres'])('API on %s', (engine) => {
  let pgServer: TestPostgres | null = null;
  beforeAll(async () => {
    if (engine === 'postgres') pgServer = await startPostgres();
    const env: Record<string, string> = pgServer ? { HANZO_ML_DATABASE_URL: await pgServer.createDatabase('api') } : {};
    stack = await startTestStack(env, { worker: false });
    await seedDevOrganization(stack.runtime.catalogue.db, 'other-org', 'token-of-another-org');
  });
  afterAll(async () => {
    await stack?.stop();
    await pgServer?.stop();
  });

  it('answers /alive and /ready, and serves an OpenAPI document generated from the contracts', async () => {
    expect((await stack.runtime.app.request('/alive')).status).toBe(200);
    const ready = await stack.runtime.app.request('/ready');
    expect(await ready.json()).toMatchObject({ status: 'ready', checks: { catalogue: 'ok', temporal: 'ok' } });
    const doc = (await (await stack.runtime.app.request('/openapi.json')).json()) as { paths: Record<string, Record<string, { requestBody?: { content: Record<string, { schema: { properties?: Record<string, unknown> } }> } }>> };
    expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(['/v1/pipelines', '/v1/datasets', '/v1/models/{name}/versions', '/v1/schedules']));
    expect(Object.keys(doc.paths['/v1/pipelines']!.post!.requestBody!.content['application/json']!.schema.properties!)).toEqual(expect.arrayContaining(['model_name', 'base_model', 'dataset', 'hyperparameters']));
  });

  it('documents exactly the routes the app serves in the OpenAPI document, with the MLflow request schemas', async () => {
    const doc = (await (await stack.runtime.app.request('/openapi.json')).json()) as { paths: Record<string, Record<string, { requestBody?: { content: Record<string, { schema: { properties?: Record<string, unknown> } }> } }>> };
    const served = new Set(stack.runtime.app.routes.filter((r) => r.method !== 'ALL').map((r) => `${r.method.toLowerCase()} ${openApiPath(r.path)}`));
    const documented = new Set(Object.entries(doc.paths).flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m} ${path}`)));
    expect([...served].filter((r) => !documented.has(r))).toEqual([]);
    expect([...documented].filter((r) => !served.has(r))).toEqual([]);
    // Routes the hand-kept list used to omit, and a request schema taken from the contracts.
    for (const route of ['post /api/2.0/mlflow/experiments/delete-experiment-tag', 'get /ajax-api/2.0/mlflow/metrics/get-history-bulk', 'post /api/2.0/mlflow/model-versions/create', 'get /get-artifact'])
      expect(documented).toContain(route);
    const createVersion = doc.paths['/api/2.0/mlflow/model-versions/create']!.post!.requestBody!.content['application/json']!.schema.properties!;
    expect(Object.keys(createVersion)).toEqual(expect.arrayContaining(['name', 'source', 'run_id', 'model_id']));
  });

  it('requires a bearer token and answers in the one error shape', async () => {
    const res = await stack.runtime.app.request('/v1/models');
    expect(res.status).toBe(401);
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ error_code: 'UNAUTHENTICATED' });
    expect(body.request_id).toEqual(expect.any(String));
    expect((await stack.runtime.app.request('/v1/models', { headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
    expect((await stack.api('GET', '/v1/nothing-here')).status).toBe(404);
  });

  it('rejects bad pipeline requests with 400 naming the field, never 500', async () => {
    const cases: [unknown, RegExp][] = [
      [{}, /model_name/],
      [{ model_name: 'm', base_model: 'hanzo-tiny-llama', dataset: { name: 'x', version: 'latest' }, hyperparameters: { learning_rate: -1, max_steps: 10, batch_size: 1 } }, /hyperparameters\.learning_rate/],
      [{ model_name: 'bad name!', base_model: 'hanzo-tiny-llama', dataset: { name: 'x', version: 1 } }, /model_name/],
      [{ model_name: 'm', base_model: 'no-such-model', dataset: { name: 'x', version: 1 } }, /base_model: base model "no-such-model" not found/],
      [{ model_name: 'm', base_model: 'hanzo-tiny-llama', dataset: { name: 'never-uploaded', version: 'latest' } }, /dataset: "never-uploaded" has no version latest/],
      [{ model_name: 'm', base_model: 'hanzo-tiny-llama', dataset: { name: 'x', source_uri: 'file:///does/not/exist.jsonl' } }, /source_uri: file:\/\/\/does\/not\/exist.jsonl does not exist/],
    ];
    for (const [body, message] of cases) {
      const res = await stack.api('POST', '/v1/pipelines', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(String(res.body.message)).toMatch(message);
    }
    const raw = await fetch(`${stack.runtime.apiUrl}/v1/pipelines`, { method: 'POST', headers: { authorization: 'Bearer hanzo-ml-dev-token' }, body: '{not json' });
    expect(raw.status).toBe(400);
  });

  it('creates immutable dataset versions from uploads, counting tokens and removing duplicates', async () => {
    const lines = Array.from({ length: 40 }, (_, i) => chat(`question ${i}?`, `answer ${i}`));
    const first = await upload('qa', [...lines, lines[0], lines[1]].join('\n') + '\n');
    expect(first.status).toBe(201);
    expect(first.body).toMatchObject({ name: 'qa', version: 1, num_records: 40, format: 'jsonl', status: 'ready' });
    const meta = first.body.metadata as { report: { records_in: number; records_out: number; token_counts: Record<string, number> } };
    expect(meta.report).toMatchObject({ records_in: 42, records_out: 40 });
    expect((first.body.lineage as { operations: unknown[] }).operations).toEqual([expect.objectContaining({ op: 'dedup_exact', removed: 2 })]);
    expect(meta.report.token_counts.train).toBeGreaterThan(0);
    const second = await upload('qa', lines.slice(0, 20).join('\n'));
    expect(second.body.version).toBe(2);
    const got = await stack.api('GET', `/v1/datasets/${String(first.body.id)}`);
    expect(got.body.sha256).toBe(first.body.sha256);
    expect((await stack.api<{ datasets: unknown[] }>('GET', '/v1/datasets?name=qa')).body.datasets).toHaveLength(2);
  });

  it('shows another organization 404 for a dataset that exists', async () => {
    const mine = await upload('private-ds', [chat('a?', 'b'), chat('c?', 'd')].join('\n'));
    expect(mine.status).toBe(201);
    const res = await fetch(`${stack.runtime.apiUrl}/v1/datasets/${String(mine.body.id)}`, { headers: OTHER });
    expect(res.status).toBe(404);
  });

  it('rejects each bad dataset file with a message naming line and field, and stores nothing', async () => {
    const before = await stack.runtime.catalogue.db.select().from(datasets);
    const objectsBefore = existsSync(join(stack.home, 'objects')) ? readdirSync(join(stack.home, 'objects'), { recursive: true }).length : 0;
    const bad: [string, string | Buffer, RegExp, string?][] = [
      ['malformed', chat('a?', 'b') + '\n{"messages": [', /:2: invalid JSON/],
      ['missing-field', chat('a?', 'b') + '\n{"messages": [{"role": "user"}]}', /:2: field "messages\[0\]\.content"/],
      ['wrong-type', '{"instruction": "x", "response": 5}', /:1: field "response": expected string, got number/],
      ['empty', '', /file is empty/],
      ['garbage', Buffer.from([0x00, 0xff, 0xfe, 0x13, 0x00, 0x9c, 0x0a, 0x01]), /:1: not UTF-8 text|:1: .*NUL/],
      ['huge-line', chat('a?', 'b') + '\n' + '{"messages": "' + 'x'.repeat(2 * 1024 * 1024) + '"}', /:2: line is \d+ bytes, over the 1048576-byte limit/],
      ['csv-missing-column', 'instruction,answer\nhi,there\n', /:1: missing required column "response"/, 'csv'],
    ];
    for (const [name, content, message, format] of bad) {
      const res = await upload(name, content, format);
      expect(res.status, name).toBe(400);
      expect(res.body.error_code).toBe('INVALID_PARAMETER_VALUE');
      expect(String(res.body.message), name).toMatch(message);
    }
    expect(await stack.runtime.catalogue.db.select().from(datasets)).toHaveLength(before.length);
    const objectsAfter = existsSync(join(stack.home, 'objects')) ? readdirSync(join(stack.home, 'objects'), { recursive: true }).length : 0;
    expect(objectsAfter).toBe(objectsBefore);
    expect(readdirSync(join(stack.home, 'tmp'), { recursive: true }).filter((f) => !String(f).startsWith('uploads'))).toEqual([]);
  });

  it('rejects bad dataset query parameters with 400', async () => {
    const res = await fetch(`${stack.runtime.apiUrl}/v1/datasets?name=x&format=hf-datasets`, { method: 'POST', headers: { authorization: 'Bearer hanzo-ml-dev-token' }, body: 'x' });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { message: string }).message).toMatch(/format: .*directory is several files and cannot be one upload/);
  });

  it('creates, lists, pauses and deletes a retraining schedule on Temporal, validating its input', async () => {
    expect((await upload('sched-ds', [chat('a?', 'b'), chat('c?', 'd'), chat('e?', 'f')].join('\n'))).status).toBe(201);
    const pipeline = { model_name: 'sched-model', base_model: 'hanzo-tiny-llama', dataset: { name: 'sched-ds', version: 'latest' } };
    const both = await stack.api('POST', '/v1/schedules', { name: 'x', every: '1d', cron: '0 3 * * *', pipeline });
    expect(both.status).toBe(400);
    const fromFile = await stack.api('POST', '/v1/schedules', { name: 'x', every: '1d', pipeline: { ...pipeline, dataset: { name: 'sched-ds', source_uri: 'file:///tmp/x.jsonl' } } });
    expect(fromFile.status).toBe(400);
    expect(String(fromFile.body.message)).toContain('dataset');
    const created = await stack.api<{ id: string; paused: boolean; next_action_times: string[] }>('POST', '/v1/schedules', { name: 'nightly', every: '1d', pipeline });
    expect(created.status).toBe(201);
    expect(created.body.paused).toBe(false);
    expect(created.body.next_action_times.length).toBeGreaterThan(0);
    expect((await stack.api('POST', '/v1/schedules', { name: 'nightly', every: '1d', pipeline })).status).toBe(400);
    // Triggering the schedule starts a pipeline on the latest dataset version, findable by search attributes.
    await stack.runtime.client.schedule.getHandle(`schedule:${created.body.id}`).trigger();
    let started: string[] = [];
    for (let i = 0; i < 30 && !started.length; i++) {
      started = [];
      for await (const wf of stack.runtime.client.workflow.list({ query: `HanzoModelName = "sched-model" AND HanzoOrganization = "dev"` })) started.push(wf.workflowId);
      if (!started.length) await new Promise((r) => setTimeout(r, 500));
    }
    expect(started[0]).toMatch(new RegExp(`^pipeline:sched-${created.body.id}-`));
    await stack.runtime.client.workflow.getHandle(started[0]!).terminate('test over');
    const paused = await stack.api<{ paused: boolean }>('POST', '/v1/schedules/nightly/pause');
    expect(paused.body.paused).toBe(true);
    const listed = await stack.api<{ schedules: { name: string }[] }>('GET', '/v1/schedules');
    expect(listed.body.schedules.map((s) => s.name)).toContain('nightly');
    const other = await fetch(`${stack.runtime.apiUrl}/v1/schedules/nightly`, { headers: OTHER });
    expect(other.status).toBe(404);
    expect((await stack.api('DELETE', `/v1/schedules/${created.body.id}`)).status).toBe(200);
    expect((await stack.api('GET', '/v1/schedules/nightly')).status).toBe(404);
    await expect(stack.runtime.client.schedule.getHandle(`schedule:${created.body.id}`).describe()).rejects.toThrow();
  });
});

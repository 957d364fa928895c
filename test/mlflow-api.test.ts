// The MLflow tracking REST API against a real stack (PGlite, then Postgres): both path prefixes, GET query strings,
// NaN on the wire, int64 as strings, paging tokens omitted on the last page, idempotent replays, tenancy,
// MLflow's validation messages, and pipeline runs seen through MLflow's status names.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { auth } from './support/config.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { getOrCreateExperiment } from '../db/repo/experiments.js';
import { createRun, setRunStatus } from '../db/repo/runs.js';
import { startPostgres, type TestPostgres } from './support/postgres.js';

let stack: TestStack;
const OTHER = { authorization: 'Bearer token-of-another-org' };
type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

async function call(method: 'GET' | 'POST', path: string, body?: Json, headers: Record<string, string> = auth, prefix = '/api/2.0/mlflow') {
  const init: RequestInit = { method, headers: { ...headers, 'content-type': 'application/json' } };
  let url = prefix + path;
  if (method === 'GET' && body) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(body)) for (const item of Array.isArray(v) ? v : [v]) q.append(k, String(item));
    url += `?${q}`;
  } else if (body) init.body = JSON.stringify(body);
  const res = await stack.runtime.app.request(url, init);
  return { status: res.status, body: (await res.json()) as Json };
}
const post = (path: string, body: Json, headers?: Record<string, string>) => call('POST', path, body, headers);
const get = (path: string, query: Json, headers?: Record<string, string>) => call('GET', path, query, headers);

async function newRun(experimentId: string, name: string): Promise<string> {
  const res = await post('/runs/create', { experiment_id: experimentId, run_name: name, start_time: Date.now(), tags: [] });
  expect(res.status).toBe(200);
  return res.body.run.info.run_id as string;
}

describe.each(['pglite', 'postgres'])('MLflow API on %s', (engine) => {
  let exp = '';
  let pgServer: TestPostgres | null = null;
  beforeAll(async () => {
    if (engine === 'postgres') pgServer = await startPostgres();
    stack = await startTestStack(pgServer ? { HANZO_ML_DATABASE_URL: await pgServer.createDatabase('mlflow') } : {}, { worker: false });
    await seedDevOrganization(stack.runtime.catalogue.db, 'other-org', 'token-of-another-org');
    exp = (await post('/experiments/create', { name: 'api-exp', tags: [{ key: 'team', value: 'ml' }] })).body.experiment_id as string;
  });
  afterAll(async () => {
    await stack?.stop();
    await pgServer?.stop();
  });

  it('has a Default experiment "0" per organization, and answers get-by-name 404 for unknown names', async () => {
    const byName = await get('/experiments/get-by-name', { experiment_name: 'Default' });
    expect(byName.body.experiment).toMatchObject({ experiment_id: '0', name: 'Default', lifecycle_stage: 'active' });
    expect((await get('/experiments/get', { experiment_id: '0' }, OTHER)).body.experiment.name).toBe('Default');
    const missing = await get('/experiments/get-by-name', { experiment_name: 'nope' });
    expect(missing.status).toBe(404);
    expect(missing.body).toMatchObject({ error_code: 'RESOURCE_DOES_NOT_EXIST', request_id: expect.any(String) });
    expect((await post('/experiments/delete', { experiment_id: '0' })).status).toBe(400);
  });

  it('creates, finds, renames, tags, deletes and restores experiments, under both prefixes', async () => {
    expect((await post('/experiments/create', { name: 'api-exp' })).body).toMatchObject({ error_code: 'RESOURCE_ALREADY_EXISTS' });
    expect((await post('/experiments/create', { name: 'api-exp' })).status).toBe(400);
    const other = (await post('/experiments/create', { name: 'api-exp-2' })).body.experiment_id as string;
    expect(await post('/experiments/set-experiment-tag', { experiment_id: other, key: 'team', value: 'ops' })).toMatchObject({ status: 200, body: {} });
    const ajax = await call('GET', '/experiments/get', { experiment_id: other }, auth, '/ajax-api/2.0/mlflow');
    expect(ajax.body.experiment).toMatchObject({ name: 'api-exp-2', tags: [{ key: 'team', value: 'ops' }] });
    const byTag = await post('/experiments/search', { filter: "tags.team = 'ml' AND name LIKE 'api-%'" });
    expect(byTag.body.experiments.map((e: Json) => e.name)).toEqual(['api-exp']);
    const paged = await get('/experiments/search', { max_results: 1, order_by: ['name DESC'] });
    expect(paged.body.experiments.map((e: Json) => e.name)).toEqual(['api-exp-2']);
    const next = await get('/experiments/search', { max_results: 1, order_by: ['name DESC'], page_token: paged.body.next_page_token });
    expect(next.body.experiments.map((e: Json) => e.name)).toEqual(['api-exp']);
    await post('/experiments/update', { experiment_id: other, new_name: 'api-exp-renamed' });
    await post('/experiments/delete', { experiment_id: other });
    expect((await post('/experiments/search', { view_type: 'DELETED_ONLY' })).body.experiments.map((e: Json) => e.name)).toEqual(['api-exp-renamed']);
    await post('/experiments/restore', { experiment_id: other });
    const all = await post('/experiments/search', { filter: "name ILIKE 'API-EXP%'", order_by: ['name ASC'] });
    expect(all.body.experiments.map((e: Json) => e.name)).toEqual(['api-exp', 'api-exp-renamed']);
    expect(all.body).not.toHaveProperty('next_page_token');
  });

  it('creates runs with 32-hex ids and the mlflow.runName tag, and maps status updates', async () => {
    const created = await post('/runs/create', { experiment_id: exp, start_time: '1700000000000', tags: [{ key: 'mlflow.user', value: 'ada' }] });
    const info = created.body.run.info;
    expect(info.run_id).toMatch(/^[0-9a-f]{32}$/);
    expect(info).toMatchObject({ run_uuid: info.run_id, experiment_id: exp, status: 'RUNNING', start_time: 1700000000000, user_id: 'ada', lifecycle_stage: 'active' });
    expect(created.body.run.data.tags).toContainEqual({ key: 'mlflow.runName', value: info.run_name });
    const updated = await post('/runs/update', { run_id: info.run_id, status: 'FINISHED', end_time: 1700000001000, run_name: 'renamed' });
    expect(updated.body.run_info).toMatchObject({ status: 'FINISHED', end_time: 1700000001000, run_name: 'renamed' });
    const conflict = await post('/runs/create', { experiment_id: exp, run_name: 'a', tags: [{ key: 'mlflow.runName', value: 'b' }] });
    expect(conflict.body.error_code).toBe('INVALID_PARAMETER_VALUE');
  });

  it('logs metrics with NaN and infinities both ways, idempotently, and pages history with an opaque token', async () => {
    const runId = await newRun(exp, 'metrics');
    const batch = { run_id: runId, metrics: Array.from({ length: 5 }, (_, i) => ({ key: 'loss', value: i === 4 ? 'NaN' : 1 / (i + 1), timestamp: String(1000 + i), step: i })) };
    expect(await post('/runs/log-batch', batch)).toMatchObject({ status: 200, body: {} });
    expect((await post('/runs/log-batch', batch)).status).toBe(200); // a replay changes nothing
    await post('/runs/log-metric', { run_id: runId, key: 'inf', value: 'Infinity', timestamp: 1, step: 0 });
    const run = (await get('/runs/get', { run_id: runId })).body.run;
    expect(run.data.metrics).toEqual([
      { key: 'inf', value: 'Infinity', timestamp: 1, step: 0 },
      { key: 'loss', value: 'NaN', timestamp: 1004, step: 4 },
    ]);
    const first = await get('/metrics/get-history', { run_id: runId, metric_key: 'loss', max_results: 3 });
    expect(first.body.metrics.map((m: Json) => m.step)).toEqual([0, 1, 2]);
    const second = await get('/metrics/get-history', { run_id: runId, metric_key: 'loss', max_results: 3, page_token: first.body.next_page_token });
    expect(second.body.metrics.map((m: Json) => m.value)).toEqual([0.25, 'NaN']);
    expect(second.body).not.toHaveProperty('next_page_token');
    expect((await get('/metrics/get-history', { run_id: runId, metric_key: 'loss', page_token: 'garbage' })).status).toBe(400);
  });

  it('keeps params immutable, refuses duplicate keys, bad keys and over-limit batches with MLflow messages', async () => {
    const runId = await newRun(exp, 'params');
    expect((await post('/runs/log-parameter', { run_id: runId, key: 'lr', value: '0.1' })).status).toBe(200);
    expect((await post('/runs/log-parameter', { run_id: runId, key: 'lr', value: '0.1' })).status).toBe(200);
    const changed = await post('/runs/log-parameter', { run_id: runId, key: 'lr', value: '0.2' });
    expect(changed.body).toMatchObject({ error_code: 'INVALID_PARAMETER_VALUE', message: expect.stringMatching(/^Changing param values is not allowed\. Param with key='lr'/) });
    const dupes = await post('/runs/log-batch', { run_id: runId, params: [{ key: 'a', value: '1' }, { key: 'a', value: '2' }] });
    expect(dupes.body.message).toBe("Duplicate parameter keys have been submitted: ['a']. Please ensure the request contains only one param value per param key.");
    const tooMany = await post('/runs/log-batch', { run_id: runId, metrics: Array.from({ length: 1001 }, (_, i) => ({ key: 'm', value: 1, timestamp: 1, step: i })) });
    expect(tooMany).toMatchObject({ status: 400, body: { message: expect.stringMatching(/^A batch logging request can contain at most 1000 metrics\. Got 1001 metrics/) } });
    for (const key of ['bad key!', '../up', '/abs', 'x'.repeat(251)])
      expect((await post('/runs/set-tag', { run_id: runId, key, value: 'v' })).status, key).toBe(400);
    expect((await post('/runs/log-parameter', { run_id: runId, key: 'long', value: 'x'.repeat(6001) })).status).toBe(400);
    const bad: [string, Json][] = [
      ['/runs/log-metric', { run_id: runId, key: 'k', value: 'high', timestamp: 1 }],
      ['/runs/log-metric', { run_id: runId, key: 'k', value: 1 }],
      ['/runs/search', { experiment_ids: [exp], filter: 'metrics.x ~ 1' }],
      ['/runs/search', { experiment_ids: [exp], max_results: 50001 }],
      ['/runs/update', { run_id: runId, status: 'EXPLODED' }],
      ['/runs/update', { run_id: runId, end_time: 1e20 }],
      ['/runs/log-metric', { run_id: runId, key: 'k', value: 1, timestamp: 1e300 }],
      ['/runs/set-tag', { run_id: runId, key: 'k', value: 'nul\u0000' }],
      ['/experiments/create', { name: '' }],
      ['/runs/create', { experiment_id: exp, start_time: -5 }],
    ];
    for (const [path, body] of bad) expect((await post(path, body)).status, `${path} ${JSON.stringify(body)}`).toBe(400);
    const raw = await stack.runtime.app.request('/api/2.0/mlflow/runs/log-batch', { method: 'POST', headers: auth, body: '{nope' });
    expect(raw.status).toBe(400);
  });

  it('sets and deletes tags, refuses writes to a deleted run, and restores it', async () => {
    const runId = await newRun(exp, 'tags');
    await post('/runs/set-tag', { run_id: runId, key: 'k', value: 'v' });
    expect((await post('/runs/delete-tag', { run_id: runId, key: 'k' })).status).toBe(200);
    expect((await post('/runs/delete-tag', { run_id: runId, key: 'k' })).status).toBe(404);
    await post('/runs/delete', { run_id: runId });
    expect((await get('/runs/get', { run_id: runId })).body.run.info.lifecycle_stage).toBe('deleted');
    const refused = await post('/runs/log-metric', { run_id: runId, key: 'k', value: 1, timestamp: 1, step: 0 });
    expect(refused.body).toMatchObject({ error_code: 'INVALID_PARAMETER_VALUE', message: `The run ${runId} must be in the 'active' state. Current state is deleted.` });
    await post('/runs/restore', { run_id: runId });
    expect((await post('/runs/set-tag', { run_id: runId, key: 'k', value: 'w' })).status).toBe(200);
  });

  it('searches runs by metrics, params, tags and attributes, ordered and paged', async () => {
    const e = (await post('/experiments/create', { name: 'search-exp' })).body.experiment_id as string;
    const ids: string[] = [];
    for (const [i, name] of ['r0', 'r1', 'r2', 'r3'].entries()) {
      const id = await newRun(e, name);
      ids.push(id);
      await post('/runs/log-batch', { run_id: id, metrics: [{ key: 'acc', value: i / 10, timestamp: 1, step: 0 }], params: [{ key: 'opt', value: i % 2 ? 'adam' : 'sgd' }], tags: [{ key: 'group', value: `g${i % 2}` }] });
    }
    await post('/runs/update', { run_id: ids[3]!, status: 'KILLED', end_time: Date.now() });
    const names = async (body: Json) => ((await post('/runs/search', { experiment_ids: [e], ...body })).body.runs ?? []).map((r: Json) => r.info.run_name);
    expect(await names({ filter: 'metrics.acc >= 0.1 AND params.opt = \'adam\'', order_by: ['metrics.acc DESC'] })).toEqual(['r3', 'r1']);
    expect(await names({ filter: "tags.group != 'g1'", order_by: ['attributes.run_name ASC'] })).toEqual(['r0', 'r2']);
    expect(await names({ filter: "attributes.status = 'KILLED'" })).toEqual(['r3']);
    expect(await names({ filter: "run_name LIKE 'r%' AND params.opt ILIKE 'SG%'", order_by: ['params.opt ASC', 'run_name DESC'] })).toEqual(['r2', 'r0']);
    const q = new URLSearchParams([['experiment_ids', e], ['max_results', '3'], ['order_by', 'metrics.acc ASC']]);
    const page1 = (await (await stack.runtime.app.request(`/api/2.0/mlflow/runs/search?${q}`, { headers: auth })).json()) as Json;
    expect(page1.runs.map((r: Json) => r.info.run_name)).toEqual(['r0', 'r1', 'r2']);
    const page2 = await post('/runs/search', { experiment_ids: [e], max_results: 3, order_by: ['metrics.acc ASC'], page_token: page1.next_page_token });
    expect(page2.body.runs.map((r: Json) => r.info.run_name)).toEqual(['r3']);
    expect(page2.body).not.toHaveProperty('next_page_token');
  });

  it('pages every order (ties, missing values last, the index-driven metric order) the same as one page', async () => {
    const e = (await post('/experiments/create', { name: 'paging-exp' })).body.experiment_id as string;
    // m: ties, a NaN and one run without it; grp: ties and two runs without it; end_time: set on some runs only.
    const spec: [string, number | string | null, string | null][] = [['a', 0.5, 'x'], ['b', 0.2, null], ['c', 0.5, 'y'], ['d', null, 'x'], ['e', 0.9, null], ['f', 0.2, 'y'], ['g', 0.7, 'x'], ['h', 'NaN', 'y']];
    for (const [i, [name, m, grp]] of spec.entries()) {
      const created = await post('/runs/create', { experiment_id: e, run_name: name, start_time: 1_690_000_000_000 + i * 1000, tags: [] });
      const id = created.body.run.info.run_id as string;
      await post('/runs/log-batch', { run_id: id, metrics: m === null ? [] : [{ key: 'm', value: m, timestamp: 1, step: 0 }], tags: grp === null ? [] : [{ key: 'grp', value: grp }] });
      if (i % 3 === 0) await post('/runs/update', { run_id: id, status: 'FINISHED', end_time: 1_700_000_000_000 + i });
    }
    const search = async (body: Json) => (await post('/runs/search', { experiment_ids: [e], ...body })).body;
    const names = (page: Json) => (page.runs ?? []).map((r: Json) => r.info.run_name as string);
    const paged = async (body: Json) => {
      const out: string[] = [];
      let token: string | undefined;
      do {
        const page = await search({ ...body, max_results: 2, ...(token ? { page_token: token } : {}) });
        out.push(...names(page));
        token = page.next_page_token;
      } while (token);
      return out;
    };
    const cases: [Json, string[] | null][] = [
      [{ order_by: ['tags.grp DESC'] }, null],
      [{ order_by: ['tags.grp ASC', 'metrics.m DESC'] }, ['g', 'a', 'd', 'c', 'f', 'h', 'e', 'b']],
      [{ order_by: ['metrics.m DESC'] }, null],
      [{ filter: 'metrics.m > 0.1', order_by: ['metrics.m DESC'] }, null],
      [{ filter: 'metrics.m > 0.1', order_by: ['metrics.m ASC', 'tags.grp DESC'] }, ['f', 'b', 'c', 'a', 'g', 'e']],
      [{ order_by: ['attributes.start_time ASC'] }, ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h']],
      [{ order_by: ['attributes.end_time DESC'] }, null],
      [{}, ['h', 'g', 'f', 'e', 'd', 'c', 'b', 'a']],
    ];
    for (const [body, expected] of cases) {
      const whole = names(await search({ ...body, max_results: 100 }));
      if (expected) expect(whole, JSON.stringify(body)).toEqual(expected);
      expect(await paged(body), JSON.stringify(body)).toEqual(whole);
    }
    // Missing values sort last whichever the direction; a NaN metric after every number and before them (MLflow).
    expect(names(await search({ order_by: ['tags.grp DESC'] })).slice(-2).sort()).toEqual(['b', 'e']);
    expect(names(await search({ order_by: ['metrics.m ASC'] })).slice(-2)).toEqual(['h', 'd']);
    expect(names(await search({ order_by: ['metrics.m DESC'] }))).toEqual(['e', 'g', 'c', 'a', 'f', 'b', 'h', 'd']);
    // A token whose values do not fit this search's keys (another search's, or an older server's) is a 400.
    const token = (after: unknown[]) => Buffer.from(JSON.stringify({ after })).toString('base64url');
    for (const [body, after] of [[{ order_by: ['metrics.m DESC'] }, ['false', 'not a number', '2023-01-01', 'x']], [{}, ['1690000000000', 'x']]] as const) {
      const refused = await post('/runs/search', { experiment_ids: [e], ...body, page_token: token([...after]) });
      expect(refused.status, JSON.stringify(body)).toBe(400);
      expect(refused.body.error_code).toBe('INVALID_PARAMETER_VALUE');
    }
    expect(names(await search({ order_by: ['attributes.end_time ASC'] })).slice(0, 3)).toEqual(['a', 'd', 'g']);
  });

  it("answers another organization's runs and experiments with RESOURCE_DOES_NOT_EXIST", async () => {
    const runId = await newRun(exp, 'private');
    for (const [method, path, body] of [
      ['GET', '/runs/get', { run_id: runId }],
      ['POST', '/runs/log-batch', { run_id: runId, metrics: [] }],
      ['POST', '/runs/delete', { run_id: runId }],
      ['GET', '/experiments/get', { experiment_id: exp }],
    ] as const)
      expect((await call(method, path, body, OTHER)).body.error_code).toBe('RESOURCE_DOES_NOT_EXIST');
    expect((await post('/runs/search', { experiment_ids: [exp] }, OTHER)).body).toEqual({ runs: [] });
  });

  it('shows pipeline runs with MLflow status names and still takes the trainer\'s log-batch', async () => {
    const db = stack.runtime.catalogue.db;
    const experimentId = await getOrCreateExperiment(db, 'dev', 'pipeline-model', 'file:///tmp/artifacts');
    const id = 'pipeline-run-1';
    await createRun(db, { id, organizationId: 'dev', experimentId, name: 'train', userId: 'pipeline', artifactRoot: 'file:///tmp/artifacts', config: {}, params: { lr: '0.1' } });
    expect((await post('/runs/log-batch', { run_id: id, metrics: [{ key: 'train/loss', value: 2.5, timestamp: 1, step: 1 }] })).status).toBe(200);
    await setRunStatus(db, id, 'completed');
    const run = (await get('/runs/get', { run_id: id })).body.run;
    expect(run.info).toMatchObject({ status: 'FINISHED', run_name: 'train', end_time: expect.any(Number) });
    expect(run.data).toMatchObject({ params: [{ key: 'lr', value: '0.1' }], metrics: [{ key: 'train/loss', value: 2.5, step: 1 }] });
  });
});

// Run artifacts through /v1/runs/{id}/artifacts and the MLflow artifact proxy, on PGlite, Postgres and S3 objects: streamed uploads with a
// SHA-256 checksum, listings, byte-exact downloads, one tree seen by both APIs, unsafe paths refused, tenancy and
// roles, and the logged-model, dataset-input and sampled-history calls' validation.
import { createHash, randomUUID } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { auth, testConfig } from './support/config.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { apiTokens } from '../db/schema/index.js';
import { sha256Text } from '../lib/hash.js';
import { startPostgres, type TestPostgres } from './support/postgres.js';
import { startMoto } from './support/moto.js';

let stack: TestStack;
const OTHER = { authorization: 'Bearer token-of-another-org' };
const VIEWER = { authorization: 'Bearer viewer-token' };
type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

async function req(method: string, path: string, body?: BodyInit | Json, headers: Record<string, string> = auth) {
  const raw = typeof body === 'string' || body instanceof Uint8Array || body === undefined;
  const res = await stack.runtime.app.request(path, {
    method,
    headers: { ...headers, ...(raw ? {} : { 'content-type': 'application/json' }) },
    body: raw ? (body as BodyInit | undefined) : JSON.stringify(body),
  });
  const bytes = Buffer.from(await res.arrayBuffer());
  let json: Json = {};
  try {
    json = JSON.parse(bytes.toString()) as Json;
  } catch {
    // a download: the bytes are the answer
  }
  return { status: res.status, body: json, bytes, headers: res.headers };
}

/** A raw HTTP request to the listening server, with the target sent exactly as written (no URL clean-up). */
function rawRequest(method: string, target: string, body: string): Promise<{ status: number; body: Json }> {
  const url = new URL(stack.runtime.apiUrl);
  return new Promise((resolve, reject) => {
    const r = httpRequest({ host: url.hostname, port: url.port, method, path: target, headers: auth }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as Json }));
    });
    r.on('error', reject);
    r.end(body);
  });
}

describe.each(['pglite', 'postgres', 's3'])('run artifacts on %s', (engine) => {
  let exp = '';
  let run = '';
  let pgServer: TestPostgres | null = null;
  let moto: Awaited<ReturnType<typeof startMoto>> | null = null;
  beforeAll(async () => {
    if (engine === 'postgres') pgServer = await startPostgres();
    if (engine === 's3') moto = await startMoto(testConfig().bootstrap.moto_server);
    stack = await startTestStack({ ...(pgServer ? { HANZO_ML_DATABASE_URL: await pgServer.createDatabase('artifacts') } : {}), ...moto?.env }, { worker: false });
    const db = stack.runtime.catalogue.db;
    await seedDevOrganization(db, 'other-org', 'token-of-another-org');
    await db.insert(apiTokens).values({ id: randomUUID(), organizationId: 'dev', subject: 'watcher', role: 'viewer', tokenSha256: sha256Text('viewer-token') });
    exp = (await req('POST', '/api/2.0/mlflow/experiments/create', { name: 'artifact-tests' })).body.experiment_id as string;
    run = (await req('POST', '/api/2.0/mlflow/runs/create', { experiment_id: exp, run_name: 'r', tags: [] })).body.run.info.run_id as string;
  }, 120_000);
  afterAll(async () => {
    await stack?.stop();
    await pgServer?.stop();
    moto?.stop();
  });

  it('uploads a file with a sha256 checksum, lists it and downloads the same bytes', async () => {
    const content = 'weights\n'.repeat(1000);
    const up = await req('POST', `/v1/runs/${run}/artifacts?path=ckpt/step-1/model.bin`, content);
    expect(up.status).toBe(201);
    expect(up.body).toEqual({ path: 'ckpt/step-1/model.bin', size_bytes: content.length, checksum: `sha256:${createHash('sha256').update(content).digest('hex')}` });
    const root = await req('GET', `/v1/runs/${run}/artifacts`);
    expect(root.body.files).toEqual([{ path: 'ckpt', is_dir: true }]);
    const dir = await req('GET', `/v1/runs/${run}/artifacts?path=ckpt/step-1`);
    expect(dir.body.files).toEqual([{ path: 'ckpt/step-1/model.bin', is_dir: false, file_size: content.length }]);
    const down = await req('GET', `/v1/runs/${run}/artifacts/ckpt/step-1/model.bin`);
    expect(down.status).toBe(200);
    expect(down.bytes.toString()).toBe(content);
    expect(down.headers.get('content-length')).toBe(String(content.length));
  });

  it('streams a multi-megabyte body through intact, and a second upload to the same path replaces the first', async () => {
    const big = Buffer.alloc(6 * 1024 * 1024 + 7);
    for (let i = 0; i < big.length; i++) big[i] = (i * 31 + 7) % 251;
    const up = await req('POST', `/v1/runs/${run}/artifacts?path=big.bin`, new Uint8Array(big));
    expect(up.body).toMatchObject({ size_bytes: big.length, checksum: `sha256:${createHash('sha256').update(big).digest('hex')}` });
    expect((await req('GET', `/v1/runs/${run}/artifacts/big.bin`)).bytes.equals(big)).toBe(true);
    const again = await req('POST', `/v1/runs/${run}/artifacts?path=big.bin`, 'small');
    expect(again.body.size_bytes).toBe(5);
    expect((await req('GET', `/v1/runs/${run}/artifacts/big.bin`)).bytes.toString()).toBe('small');
  });

  it('shows /v1 uploads to MLflow clients under the run artifact URI, and MLflow uploads to /v1', async () => {
    const info = (await req('GET', `/api/2.0/mlflow/runs/get?run_id=${run}`)).body.run.info;
    expect(info.artifact_uri).toBe(`mlflow-artifacts:/${exp}/${run}/artifacts`);
    const listed = await req('GET', `/api/2.0/mlflow/artifacts/list?run_id=${run}&path=ckpt/step-1`);
    expect(listed.body).toEqual({ root_uri: info.artifact_uri, files: [{ path: 'ckpt/step-1/model.bin', is_dir: false, file_size: 8000 }] });
    const proxy = `/api/2.0/mlflow-artifacts/artifacts/${exp}/${run}/artifacts`;
    expect((await req('GET', `${proxy}/ckpt/step-1/model.bin`)).bytes.toString()).toBe('weights\n'.repeat(1000));
    expect((await req('GET', `/get-artifact?run_uuid=${run}&path=ckpt/step-1/model.bin`)).bytes.toString()).toBe('weights\n'.repeat(1000));
    expect((await req('GET', `/get-artifact?run_uuid=${run}&path=ckpt/step-1/model.bin`, undefined, {})).status).toBe(401);
    expect((await req('PUT', `${proxy}/notes/readme.md`, '# hello')).status).toBe(200);
    expect((await req('GET', `/v1/runs/${run}/artifacts/notes/readme.md`)).bytes.toString()).toBe('# hello');
    expect((await req('GET', `/ajax-api/2.0/mlflow-artifacts/artifacts?path=${exp}/${run}/artifacts/notes`)).body).toEqual({ files: [{ path: 'readme.md', is_dir: false, file_size: 7 }] });
    expect((await req('DELETE', `${proxy}/notes`)).status).toBe(200);
    expect((await req('GET', `/v1/runs/${run}/artifacts/notes/readme.md`)).status).toBe(404);
    expect((await req('GET', `/v1/runs/${run}/artifacts?path=notes`)).body.files).toEqual([]);
  });

  it('refuses unsafe and missing paths with INVALID_PARAMETER_VALUE', async () => {
    for (const path of ['../escape.txt', '/etc/passwd', 'a\\b.txt', 'C:/x', 'a/%2e%2e/%2e%2e/b', 'x#y']) {
      const res = await req('POST', `/v1/runs/${run}/artifacts?path=${encodeURIComponent(path)}`, 'x');
      expect(res.status, path).toBe(400);
      expect(res.body).toMatchObject({ error_code: 'INVALID_PARAMETER_VALUE', message: 'Invalid path' });
    }
    const missing = await req('POST', `/v1/runs/${run}/artifacts`, 'x');
    expect(missing.status).toBe(400);
    expect(missing.body.message).toContain('path');
    expect((await req('GET', `/api/2.0/mlflow-artifacts/artifacts?path=../x`)).body).toMatchObject({ error_code: 'INVALID_PARAMETER_VALUE', message: 'Invalid path' });
    expect((await req('GET', `/api/2.0/mlflow/artifacts/list?run_id=${run}&path=/abs`)).status).toBe(400);
    // Percent-encoded parent segments are seen as the client sent them, before any URL clean-up.
    const encoded = await rawRequest('PUT', `/api/2.0/mlflow-artifacts/artifacts/${exp}/${run}/artifacts/%2E%2E/%2E%2E/x.txt`, 'x');
    expect(encoded).toMatchObject({ status: 400, body: { error_code: 'INVALID_PARAMETER_VALUE', message: 'Invalid path' } });
    const raw = await rawRequest('GET', `/v1/runs/${run}/artifacts/x/y/%2E%2E/secret`, '');
    expect(raw).toMatchObject({ status: 400, body: { message: 'Invalid path' } });
  });

  it('answers 404 for unknown runs and files, and 400 for a directory download', async () => {
    expect((await req('POST', `/v1/runs/${'f'.repeat(32)}/artifacts?path=a.txt`, 'x')).status).toBe(404);
    expect((await req('GET', `/v1/runs/${'f'.repeat(32)}/artifacts`)).status).toBe(404);
    const nofile = await req('GET', `/v1/runs/${run}/artifacts/none.txt`);
    expect(nofile).toMatchObject({ status: 404, body: { error_code: 'RESOURCE_DOES_NOT_EXIST', message: "No such artifact: 'none.txt'" } });
    expect((await req('GET', `/v1/runs/${run}/artifacts/ckpt`)).body).toMatchObject({ error_code: 'INVALID_PARAMETER_VALUE' });
    expect((await req('GET', `/api/2.0/mlflow/artifacts/list?run_id=${'e'.repeat(32)}`)).body).toMatchObject({ error_code: 'RESOURCE_DOES_NOT_EXIST', message: `Run with id=${'e'.repeat(32)} not found` });
  });

  it('refuses a file over a directory and a file under a file', async () => {
    const overDir = await req('POST', `/v1/runs/${run}/artifacts?path=ckpt`, 'x');
    expect(overDir).toMatchObject({ status: 400, body: { error_code: 'INVALID_PARAMETER_VALUE' } });
    expect(overDir.body.message).toContain('refers to a directory');
    const underFile = await req('POST', `/v1/runs/${run}/artifacts?path=big.bin/inner.txt`, 'x');
    expect(underFile).toMatchObject({ status: 400, body: { error_code: 'INVALID_PARAMETER_VALUE' } });
    expect(underFile.body.message).toContain('which is a file');
    expect((await req('GET', `/v1/runs/${run}/artifacts?path=ckpt/step-1`)).body.files).toHaveLength(1);
  });

  it('keeps organizations apart and lets a viewer read but not write', async () => {
    expect((await req('GET', `/v1/runs/${run}/artifacts`, undefined, OTHER)).status).toBe(404);
    expect((await req('POST', `/v1/runs/${run}/artifacts?path=x.txt`, 'x', OTHER)).status).toBe(404);
    // The proxy: another organization sees none of our files and cannot write under our experiment.
    expect((await req('GET', `/api/2.0/mlflow-artifacts/artifacts/${exp}/${run}/artifacts/big.bin`, undefined, OTHER)).status).toBe(404);
    expect((await req('GET', `/api/2.0/mlflow-artifacts/artifacts?path=${exp}`, undefined, OTHER)).body).toEqual({});
    expect((await req('PUT', `/api/2.0/mlflow-artifacts/artifacts/${exp}/${run}/artifacts/evil.txt`, 'x', OTHER)).body).toMatchObject({ error_code: 'RESOURCE_DOES_NOT_EXIST' });
    expect((await req('DELETE', `/api/2.0/mlflow-artifacts/artifacts/${exp}/${run}`, undefined, OTHER)).status).toBe(404);
    // The shared Default experiment "0": a path another organization wrote first stays theirs, and is answered to
    // others as one that does not exist.
    expect((await req('PUT', `/api/2.0/mlflow-artifacts/artifacts/0/shared/x.txt`, 'ours')).status).toBe(200);
    expect((await req('PUT', `/api/2.0/mlflow-artifacts/artifacts/0/shared/x.txt`, 'theirs', OTHER)).body).toMatchObject({ error_code: 'RESOURCE_DOES_NOT_EXIST' });
    expect((await req('DELETE', `/api/2.0/mlflow-artifacts/artifacts/0/shared`, undefined, OTHER)).body).toMatchObject({ error_code: 'RESOURCE_DOES_NOT_EXIST' });
    expect((await req('GET', `/api/2.0/mlflow-artifacts/artifacts/0/shared/x.txt`)).bytes.toString()).toBe('ours');
    const viewer = await req('POST', `/v1/runs/${run}/artifacts?path=v.txt`, 'x', VIEWER);
    expect(viewer).toMatchObject({ status: 403, body: { error_code: 'PERMISSION_DENIED' } });
    expect((await req('GET', `/v1/runs/${run}/artifacts/big.bin`, undefined, VIEWER)).status).toBe(200);
    expect((await req('GET', `/v1/runs/${run}/artifacts`, undefined, {})).status).toBe(401);
  });

  it('takes proxy writes anywhere, each file its writer organization\'s, and answers NOT_IMPLEMENTED for multipart uploads', async () => {
    // As with `mlflow server --artifacts-destination`, paths outside an experiment are fine ...
    expect((await req('PUT', '/api/2.0/mlflow-artifacts/artifacts/loose/a.txt', 'x')).status).toBe(200);
    const got = await stack.runtime.app.request('/api/2.0/mlflow-artifacts/artifacts/loose/a.txt', { headers: auth });
    expect(await got.text()).toBe('x');
    // ... with MLflow's download headers: its MIME type, an attachment, and no sniffing.
    expect(Object.fromEntries(['content-type', 'content-disposition', 'x-content-type-options'].map((h) => [h, got.headers.get(h)]))).toEqual({
      'content-type': 'text/plain',
      'content-disposition': 'attachment; filename=a.txt',
      'x-content-type-options': 'nosniff',
    });
    // ... but another organization can neither read, overwrite nor delete them (each answered as a path that does
    // not exist), and an experiment-shaped first segment must be one of the caller's experiments.
    expect((await req('GET', '/api/2.0/mlflow-artifacts/artifacts/loose/a.txt', undefined, OTHER)).status).toBe(404);
    expect((await req('PUT', '/api/2.0/mlflow-artifacts/artifacts/loose/a.txt', 'theirs', OTHER)).body).toMatchObject({ error_code: 'RESOURCE_DOES_NOT_EXIST' });
    expect((await req('DELETE', '/api/2.0/mlflow-artifacts/artifacts/loose', undefined, OTHER)).status).toBe(404);
    expect((await req('GET', '/api/2.0/mlflow-artifacts/artifacts/loose/a.txt')).bytes.toString()).toBe('x');
    const unknownExperiment = 'f'.repeat(32);
    expect((await req('PUT', `/api/2.0/mlflow-artifacts/artifacts/${unknownExperiment}/a.txt`, 'x')).body).toMatchObject({
      error_code: 'RESOURCE_DOES_NOT_EXIST',
      message: `No Experiment with id=${unknownExperiment} exists`,
    });
    const mpu = await req('POST', '/api/2.0/mlflow-artifacts/mpu/create', { path: 'a', num_parts: 2 });
    expect(mpu).toMatchObject({ status: 501, body: { error_code: 'NOT_IMPLEMENTED' } });
  });

  it('answers /health and /version without a token, and server-info with multipart off', async () => {
    expect(await (await stack.runtime.app.request('/health')).text()).toBe('OK');
    expect(await (await stack.runtime.app.request('/version')).text()).toMatch(/^\d+\.\d+\.\d+$/);
    expect(await (await stack.runtime.app.request('/api/3.0/mlflow/server-info')).json()).toMatchObject({ multipart_uploads_enabled: false });
  });

  it('validates logged models: names, finalize status, unknown tags and models, and search filters', async () => {
    const bad = await req('POST', '/api/2.0/mlflow/logged-models', { experiment_id: exp, name: 'a/b' });
    expect(bad).toMatchObject({ status: 400, body: { error_code: 'INVALID_PARAMETER_VALUE' } });
    expect(bad.body.message).toContain("Invalid model name ('a/b')");
    expect((await req('POST', '/api/2.0/mlflow/logged-models', { name: 'x' })).body.message).toBe("Missing value for required parameter 'experiment_id'.");
    expect((await req('POST', '/api/2.0/mlflow/logged-models', { experiment_id: 'nope' })).status).toBe(404);
    const created = await req('POST', '/api/2.0/mlflow/logged-models', { experiment_id: exp, name: 'm1', params: [{ key: 'lr', value: '0.1' }] });
    const model = created.body.model;
    expect(model.info).toMatchObject({ name: 'm1', status: 'LOGGED_MODEL_PENDING', artifact_uri: `mlflow-artifacts:/${exp}/models/${model.info.model_id}/artifacts` });
    expect(model.data).toEqual({ params: [{ key: 'lr', value: '0.1' }] });
    const id = model.info.model_id as string;
    expect((await req('PATCH', `/api/2.0/mlflow/logged-models/${id}`, { model_id: id })).body.message).toBe("Missing value for required parameter 'status'.");
    expect((await req('PATCH', `/api/2.0/mlflow/logged-models/${id}`, { model_id: id, status: 'BOGUS' })).status).toBe(400);
    expect((await req('PATCH', `/api/2.0/mlflow/logged-models/${id}`, { model_id: id, status: 'LOGGED_MODEL_READY' })).body.model.info.status).toBe('LOGGED_MODEL_READY');
    expect((await req('DELETE', `/api/2.0/mlflow/logged-models/${id}/tags/none`)).body).toMatchObject({ error_code: 'RESOURCE_DOES_NOT_EXIST', message: `No tag with key 'none' found for model with ID '${id}'.` });
    const search = (filter: string) => req('POST', '/api/2.0/mlflow/logged-models/search', { experiment_ids: [exp], filter });
    expect((await search("params.lr = '0.1' AND status = 'READY'")).body.models.map((m: Json) => m.info.name)).toEqual(['m1']);
    expect((await search("name = 'other'")).body).toEqual({});
    expect((await search('bogus.x = 1')).status).toBe(400);
    expect((await req('GET', `/api/2.0/mlflow/logged-models/${id}`, undefined, OTHER)).status).toBe(404);
    await req('DELETE', `/api/2.0/mlflow/logged-models/${id}`);
    expect((await req('GET', `/api/2.0/mlflow/logged-models/${id}`)).status).toBe(404);
    expect((await req('GET', `/api/2.0/mlflow/logged-models/${id}?allow_deleted=true`)).status).toBe(200);
  });

  it('records dataset inputs once per name and digest, and model outputs, on runs/get', async () => {
    const dataset = { name: 'train', digest: 'abc123', source_type: 'local', source: '{"uri": "/data/train.csv"}', schema: '{}' };
    const body = { run_id: run, datasets: [{ tags: [{ key: 'mlflow.data.context', value: 'training' }], dataset }] };
    expect((await req('POST', '/api/2.0/mlflow/runs/log-inputs', body)).status).toBe(200);
    expect((await req('POST', '/api/2.0/mlflow/runs/log-inputs', body)).status).toBe(200);
    expect((await req('POST', '/api/2.0/mlflow/runs/outputs', { run_id: run, models: [{ model_id: 'm-1', step: 3 }] })).status).toBe(200);
    const got = (await req('GET', `/api/2.0/mlflow/runs/get?run_id=${run}`)).body.run;
    expect(got.inputs).toEqual({ dataset_inputs: [{ tags: [{ key: 'mlflow.data.context', value: 'training' }], dataset }] });
    expect(got.outputs).toEqual({ model_outputs: [{ model_id: 'm-1', step: 3 }] });
    const tooLong = await req('POST', '/api/2.0/mlflow/runs/log-inputs', { run_id: run, datasets: [{ dataset: { ...dataset, digest: 'x'.repeat(37) } }] });
    expect(tooLong.body).toMatchObject({ error_code: 'INVALID_PARAMETER_VALUE', message: "'digest' exceeds the maximum length of 36 characters" });
    expect((await req('POST', '/api/2.0/mlflow/runs/log-inputs', { run_id: run, datasets: [{ dataset: { name: 'x' } }] })).status).toBe(400);
    expect((await req('POST', '/api/2.0/mlflow/runs/outputs', { run_id: 'f'.repeat(32), models: [] })).status).toBe(404);
  });

  it('samples metric history for charts evenly, keeping the first and last points', async () => {
    const metrics = Array.from({ length: 100 }, (_, i) => ({ key: 'loss', value: 100 - i, timestamp: 1000 + i, step: i }));
    await req('POST', '/api/2.0/mlflow/runs/log-batch', { run_id: run, metrics });
    const bulk = (q: string) => req('GET', `/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval?run_ids=${run}&metric_key=loss&${q}`);
    const ten = (await bulk('max_results=10')).body.metrics as Json[];
    expect(ten).toHaveLength(10);
    expect(ten.map((m) => m.step)).toEqual([0, 10, 20, 30, 40, 50, 60, 70, 80, 99]);
    expect(ten[0]).toEqual({ key: 'loss', value: 100, timestamp: 1000, step: 0, run_id: run });
    const windowed = (await bulk('start_step=20&end_step=29&max_results=100')).body.metrics as Json[];
    expect(windowed.map((m) => m.step)).toEqual([20, 21, 22, 23, 24, 25, 26, 27, 28, 29]);
    expect((await bulk('start_step=5')).body.message).toBe('If either start step or end step are specified, both must be specified.');
    expect((await bulk('start_step=9&end_step=1')).body.message).toBe('end_step must be greater than start_step. Found start_step=9 and end_step=1.');
    expect((await bulk('max_results=2501')).body.message).toBe('max_results must be between 1 and 2500.');
    const otherOrg = await req('GET', `/api/2.0/mlflow/metrics/get-history-bulk-interval?run_ids=${run}&metric_key=loss`, undefined, OTHER);
    expect(otherOrg.body).toEqual({});
  });
});

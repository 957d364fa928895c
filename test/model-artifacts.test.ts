// Artifacts of record, on the file store and on a real S3 server (moto_server): the register stage copies every
// format of a version under {org}/{name}/v{version}/{format}/ with a SHA-256 manifest; an MLflow registration
// from runs:/ copies its source so a later overwrite of the run artifact changes nothing; `hanzo-ml model pull`
// verifies every file and refuses, naming the file, when one was tampered with in the store.
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { and, eq } from 'drizzle-orm';
import { ApplicationFailure } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTemporalDevServer, type DevServer } from '../lib/temporal-dev-server.js';
import { startRuntime, type Runtime } from '../runtime/embedded.js';
import { auth, DEV_TOKEN, testConfig } from './support/config.js';
import { freePort } from './support/ports.js';
import { offlineActivityDeps } from './support/deps.js';
import { createRegistryActivities } from '../activities/registry.js';
import { objectUri, type ObjectStore } from '../lib/object-store.js';
import { sha256Text } from '../lib/hash.js';
import { createApiClient, type ApiClient } from '../cli/api-client.js';
import { pullModel, VerificationError } from '../cli/pull.js';
import { registerModelVersion } from '../cli/register.js';
import { auditLog } from '../db/schema/index.js';
import { repoRoot, type LoadedConfig } from '../lib/config.js';
import { DEFAULT_BASE_MODEL } from '../lib/base-models.js';
import { ModelManifestSchema } from '../contracts/models.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { bundleWorkflows } from '../workers/worker.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

let temporal: DevServer;
let bundle: Awaited<ReturnType<typeof bundleWorkflows>> | undefined;
let moto: ChildProcess | null = null;
let motoEndpoint = '';
const work = mkdtempSync(join(tmpdir(), 'hanzo-ml-model-artifacts-'));

beforeAll(async () => {
  const loaded = testConfig();
  mkdirSync(join(loaded.home, 'logs'), { recursive: true });
  temporal = await startTemporalDevServer({ binary: loaded.bootstrap.temporal, home: loaded.home, port: 0, uiPort: null, namespace: 'default' });
  const bin = loaded.bootstrap.moto_server;
  if (!bin || !existsSync(bin)) throw new Error('moto_server is missing: run scripts/bootstrap.sh --tests');
  const port = await freePort();
  moto = spawn(bin, ['-H', '127.0.0.1', '-p', String(port)], { stdio: 'ignore' });
  motoEndpoint = `http://127.0.0.1:${port}`;
  for (let i = 0; !(await fetch(motoEndpoint).then(() => true, () => false)); i++) {
    if (i > 100) throw new Error('moto_server did not start');
    await new Promise((r) => setTimeout(r, 200));
  }
}, 120_000);
afterAll(async () => {
  moto?.kill();
  await temporal?.stop();
});

describe.each(['file', 's3'] as const)('model artifacts of record on the %s store', (kind) => {
  let runtime: Runtime;
  let loaded: LoadedConfig;
  let store: ObjectStore;
  let api: ApiClient;
  const shards = { 'model-00001-of-00002.safetensors': randomBytes(300_000), 'model-00002-of-00002.safetensors': randomBytes(200_000) };
  const gguf = randomBytes(150_000);

  async function call(method: string, path: string, body?: unknown) {
    const res = await runtime.app.request(path, { method, headers: { ...auth, 'content-type': 'application/json' }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
    return { status: res.status, body: (await res.json()) as Json };
  }

  /** MLflow's model-versions/get until the version is no longer PENDING_REGISTRATION, as the stock client polls. */
  async function whenRegistered(name: string, version: string): Promise<Json> {
    for (let i = 0; ; i++) {
      const got = await call('GET', `/api/2.0/mlflow/model-versions/get?name=${name}&version=${version}`);
      if (got.body.model_version.status !== 'PENDING_REGISTRATION') return got.body.model_version as Json;
      if (i > 300) throw new Error(`version ${version} of ${name} is still PENDING_REGISTRATION`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Job outputs as the trainer and the Candle tool leave them in the object store. */
  async function jobOutputs(job: string, adapterConfig: Record<string, unknown>) {
    const bucket = loaded.config.storage.buckets.checkpoints;
    const put = async (key: string, bytes: Buffer | string) => {
      const file = join(work, `${kind}-${job}-${key.replace(/\//g, '_')}`);
      writeFileSync(file, bytes);
      return (await store.putFile(bucket, `jobs/${job}/${key}`, file)).uri;
    };
    await put('merged/config.json', JSON.stringify({ architectures: ['LlamaForCausalLM'], model_type: 'llama' }));
    await put('merged/tokenizer.json', '{"version":"1.0"}');
    for (const [name, bytes] of Object.entries(shards)) await put(`merged/${name}`, bytes);
    await put('adapter/adapter_config.json', JSON.stringify(adapterConfig));
    await put('adapter/adapter_model.safetensors', randomBytes(4096));
    const ggufUri = await put('gguf/model-q8_0.gguf', gguf);
    return { merged: objectUri(store, bucket, `jobs/${job}/merged`), adapter: objectUri(store, bucket, `jobs/${job}/adapter`), gguf: ggufUri };
  }

  /** The register stage's input with what it reads; eval numbers and lineage are not what these tests are about. */
  async function register(modelName: string, job: string, adapterConfig: Record<string, unknown> = { peft_type: 'LORA', base_model_name_or_path: '/job/inputs/base' }) {
    const out = await jobOutputs(job, adapterConfig);
    const run = await call('POST', '/api/2.0/mlflow/runs/create', { experiment_id: '0', run_name: job });
    const activities = createRegistryActivities({ ...offlineActivityDeps(runtime.catalogue.db, loaded, loaded.home), store });
    const scores = { loss: 1, perplexity: 2, exact_match: 0.5 };
    return activities.registerModelVersion({
      pipelineId: `pipeline-${kind}-${job}`,
      runId: run.body.run.info.run_id,
      input: { organization_id: 'dev', model_name: modelName, base_model: DEFAULT_BASE_MODEL, method: 'lora', requested_by: 'dev', hyperparameters: {}, checkpoint: {}, validate: { max_perplexity: 10, max_general_perplexity: null, quantized_max_perplexity: 10 } } as never,
      dataset: { id: null, name: 'd', version: 1, sha256: 'a'.repeat(64), splits: {} } as never,
      train: { final_metrics: {}, steps: 1, tokens_seen: 1, resumed_from_step: null, adapter_path: out.adapter, job_uri: '' } as never,
      evalReport: { gate: { passed: true, suite: 'default', reason: 'ok', comparisons: [], confidence: 0.95 }, base: scores, tuned: scores, production: null } as never,
      merge: { merged_dir: out.merged, num_tokens: 1, general_num_tokens: null, base_general_perplexity: null, reference_perplexity: 2 } as never,
      candle: { validate: { general_perplexity: null, perplexity: { candle: 2 } }, quantize: { quantization: { perplexity: 2 } }, gguf: { path: out.gguf, size_bytes: gguf.length, sha256: sha(gguf), dtype: 'q8_0' } } as never,
    });
  }

  beforeAll(async () => {
    const port = await freePort();
    const s3: Record<string, string> = kind === 's3' ? { HANZO_ML_STORAGE_ENDPOINT: motoEndpoint, HANZO_ML_STORAGE_ACCESS_KEY: 'test', HANZO_ML_STORAGE_SECRET_KEY: 'test' } : {};
    loaded = testConfig({ HANZO_ML_SERVER_PORT: String(port), ...s3 });
    mkdirSync(join(loaded.home, 'logs'), { recursive: true });
    // The worker copies the files of MLflow registrations (modelRegistrationWorkflow) after the API answers.
    runtime = await startRuntime({ ...loaded, temporalAddress: temporal.address, temporalUiUrl: null, workflowBundle: (bundle ??= await bundleWorkflows()) });
    store = runtime.store;
    api = createApiClient(runtime.apiUrl, DEV_TOKEN);
  }, 120_000);
  afterAll(async () => {
    await runtime?.stop();
  });

  it('writes every format under {org}/{name}/v{version}/{format}/ with a manifest whose SHA-256 is the checksum', async () => {
    const registered = await register('artifacts-a', 'job-a');
    expect(registered.version).toBe(1);
    const { status, body: v } = await call('GET', '/v1/models/artifacts-a/versions/1');
    expect(status).toBe(200);
    expect(v).toMatchObject({ status: 'ready', formats: ['safetensors', 'lora', 'gguf-q8_0'], architecture: 'LlamaForCausalLM', base_model: DEFAULT_BASE_MODEL, method: 'lora' });
    expect(v.checksum).toBe(v.artifacts.safetensors.checksum);
    for (const format of v.formats as string[]) {
      const a = v.artifacts[format];
      expect(a.path).toMatch(new RegExp(`/dev/artifacts-a/v1/${format}/$`));
      const text = (await store.readText(a.manifest))!;
      expect(a.checksum).toBe(`sha256:${sha256Text(text)}`);
      const manifest = ModelManifestSchema.parse(JSON.parse(text));
      expect(manifest).toMatchObject({ model: 'artifacts-a', version: 1, format, architecture: 'LlamaForCausalLM', method: 'lora' });
      expect(a.files).toBe(manifest.files.length);
    }
    const weights = ModelManifestSchema.parse(JSON.parse((await store.readText(v.artifacts.safetensors.manifest))!));
    expect(weights.files.map((f) => f.path)).toEqual(['config.json', 'model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', 'tokenizer.json']);
    // Every shard is covered, not only the first one.
    for (const [name, bytes] of Object.entries(shards)) expect(weights.files.find((f) => f.path === name)).toEqual({ path: name, size_bytes: bytes.length, sha256: sha(bytes) });
    const lora = ModelManifestSchema.parse(JSON.parse((await store.readText(v.artifacts.lora.manifest))!));
    expect(lora.files.map((f) => f.path)).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
    const q8 = ModelManifestSchema.parse(JSON.parse((await store.readText(v.artifacts['gguf-q8_0'].manifest))!));
    expect(q8.files).toEqual([{ path: 'model-q8_0.gguf', size_bytes: gguf.length, sha256: sha(gguf) }]);
  });

  it('pulls a format by stage, verifying every file, and audits each download', async () => {
    const dest = join(work, `${kind}-pulled-staging`);
    const pulled = await pullModel(api, { name: 'artifacts-a', stage: 'staging', format: 'safetensors', dest });
    expect(pulled).toMatchObject({ version: 1, format: 'safetensors', files: 4 });
    for (const [name, bytes] of Object.entries(shards)) expect(readFileSync(join(dest, name)).equals(bytes)).toBe(true);
    expect(sha256Text(readFileSync(join(dest, 'manifest.json'), 'utf8'))).toBe(pulled.checksum.slice('sha256:'.length));
    const rows = await runtime.catalogue.db.select().from(auditLog).where(and(eq(auditLog.organizationId, 'dev'), eq(auditLog.action, 'download')));
    expect(rows.map((r) => r.target)).toContain('/v1/models/artifacts-a/versions/1/artifacts/safetensors/model-00002-of-00002.safetensors');
  });

  it('refuses a pulled artifact with a tampered file, naming the file and leaving nothing behind', { timeout: 60_000 }, async () => {
    await register('artifacts-b', 'job-b');
    const v = (await call('GET', '/v1/models/artifacts-b/versions/1')).body;
    const forged = join(work, `${kind}-forged.bin`);
    writeFileSync(forged, randomBytes(200_000));
    expect(v.artifacts.safetensors.path).toMatch(/\/dev\/artifacts-b\/v1\/safetensors\/$/);
    await store.putFile(loaded.config.storage.buckets.models, 'dev/artifacts-b/v1/safetensors/model-00002-of-00002.safetensors', forged);
    const dest = join(work, `${kind}-tampered`);
    const pull = pullModel(api, { name: 'artifacts-b', version: 1, format: 'safetensors', dest });
    await expect(pull).rejects.toBeInstanceOf(VerificationError);
    await expect(pull).rejects.toThrow(/model-00002-of-00002\.safetensors of artifacts-b v1 safetensors: sha256 [0-9a-f]{64} .* does not match the manifest's/);
    expect(existsSync(dest)).toBe(false);
    expect(readdirSync(work).filter((f) => f.startsWith(`${kind}-tampered`))).toEqual([]);
    // The other formats are untouched and still pull.
    await expect(pullModel(api, { name: 'artifacts-b', version: 1, format: 'gguf-q8_0', dest: join(work, `${kind}-gguf-ok`) })).resolves.toMatchObject({ files: 1 });
    if (kind !== 'file') return;
    // The command line exits non-zero and says which file.
    // Spawned asynchronously: the API it calls runs in this process.
    const cli = await new Promise<{ status: number | null; stderr: string }>((done) => {
      const child = spawn(join(repoRoot, 'bin', 'hanzo-ml'), ['model', 'pull', 'artifacts-b', '--version', '1', '--dest', join(work, 'cli-tampered')], {
        env: { ...process.env, HANZO_ML_API_URL: runtime.apiUrl, HANZO_ML_TOKEN: DEV_TOKEN },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let stderr = '';
      child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
      child.on('close', (status) => done({ status, stderr }));
    });
    expect(cli.status).not.toBe(0);
    expect(cli.stderr).toContain('model-00002-of-00002.safetensors');
    expect(existsSync(join(work, 'cli-tampered'))).toBe(false);
  });

  it('refuses a manifest that no longer matches the checksum in the registry', async () => {
    await register('artifacts-c', 'job-c');
    const v = (await call('GET', '/v1/models/artifacts-c/versions/1')).body;
    const manifest = JSON.parse((await store.readText(v.artifacts['gguf-q8_0'].manifest))!) as Json;
    manifest.files[0].sha256 = 'f'.repeat(64);
    await store.putText(v.artifacts['gguf-q8_0'].manifest, JSON.stringify(manifest));
    await expect(pullModel(api, { name: 'artifacts-c', version: 1, format: 'gguf-q8_0', dest: join(work, `${kind}-bad-manifest`) })).rejects.toThrow(
      /manifest\.json of artifacts-c v1 gguf-q8_0: checksum sha256:[0-9a-f]{64} does not match the registry's/,
    );
  });

  it('fails the registration, naming adapter_config.json, when the adapter is of another method family', async () => {
    const failed = register('artifacts-d', 'job-d', { peft_type: 'ADALORA', base_model_name_or_path: '/b' });
    await expect(failed).rejects.toBeInstanceOf(ApplicationFailure);
    await expect(failed).rejects.toThrow(/adapter_config\.json: peft_type gives method family "adalora", but the pipeline trained lora/);
    const v = (await call('GET', '/v1/models/artifacts-d/versions/1')).body;
    expect(v).toMatchObject({ status: 'failed_registration', formats: [] });
    const pull = await call('GET', '/v1/models/artifacts-d/versions/1/artifacts/safetensors/manifest.json');
    expect(pull.status).toBe(409);
    expect(pull.body.message).toContain('failed_registration');
    // Nothing complete to serve: no stage toward serving, not even for an admin.
    const staged = await call('PATCH', '/v1/models/artifacts-d/versions/1/stage', { stage: 'staging' });
    expect(staged.status).toBe(409);
    expect(staged.body.message).toContain('not servable (failed_registration)');
  });

  /**
   * A run whose `model/` holds config.json and model.safetensors, uploaded through the MLflow artifact proxy, and
   * version 1 of `name` registered from it; `overwrite` uploads new weights to the run afterwards.
   */
  async function registeredFromRun(name: string): Promise<{ original: Buffer; overwrite: () => Promise<void> }> {
    const run = (await call('POST', '/api/2.0/mlflow/runs/create', { experiment_id: '0', run_name: name })).body.run.info as Json;
    const proxied = `/api/2.0/mlflow-artifacts/artifacts/${String(run.artifact_uri).replace(/^mlflow-artifacts:\/+/, '')}/model`;
    const upload = async (file: string, body: Buffer | string) => {
      const res = await runtime.app.request(`${proxied}/${file}`, { method: 'PUT', headers: auth, body: typeof body === 'string' ? body : new Uint8Array(body) });
      expect(res.status, file).toBe(200);
    };
    const original = randomBytes(50_000);
    await upload('config.json', JSON.stringify({ architectures: ['LlamaForCausalLM'] }));
    await upload('model.safetensors', original);
    expect((await call('POST', '/api/2.0/mlflow/registered-models/create', { name })).status).toBe(200);
    const created = await call('POST', '/api/2.0/mlflow/model-versions/create', { name, source: `runs:/${run.run_id}/model`, run_id: run.run_id });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    expect(created.body.model_version.status).toBe('PENDING_REGISTRATION');
    expect(await whenRegistered(name, '1')).toMatchObject({ status: 'READY' });
    return { original, overwrite: () => upload('model.safetensors', randomBytes(50_000)) };
  }

  it("registers a run's artifact through the CLI's client, which waits while the files are copied", async () => {
    const run = (await call('POST', '/api/2.0/mlflow/runs/create', { experiment_id: '0', run_name: 'cli-register' })).body.run.info as Json;
    const weights = randomBytes(30_000);
    const res = await runtime.app.request(`/api/2.0/mlflow-artifacts/artifacts/${String(run.artifact_uri).replace(/^mlflow-artifacts:\/+/, '')}/model/model.safetensors`, {
      method: 'PUT',
      headers: auth,
      body: new Uint8Array(weights),
    });
    expect(res.status).toBe(200);
    const pending = await registerModelVersion(api, { name: 'cli-registered', run_id: run.run_id, artifact_path: 'model', wait: false });
    expect(pending).toMatchObject({ version: 1, status: 'pending_registration', checksum: null });
    const ready = await registerModelVersion(api, { name: 'cli-registered', run_id: run.run_id, artifact_path: 'model', pollMs: 100 });
    expect(ready).toMatchObject({ version: 2, status: 'ready', formats: ['safetensors'], checksum: expect.stringMatching(/^sha256:/) });
    const dest = join(work, `${kind}-cli-registered`);
    await pullModel(api, { name: 'cli-registered', version: 2, dest });
    expect(readFileSync(join(dest, 'model.safetensors')).equals(weights)).toBe(true);
  });

  it('copies a runs:/ source on MLflow registration, so overwriting the run artifact later changes nothing', async () => {
    const { original, overwrite } = await registeredFromRun('from-mlflow');
    await overwrite();
    const v = (await call('GET', '/v1/models/from-mlflow/versions/1')).body;
    expect(v).toMatchObject({ status: 'ready', formats: ['safetensors'], architecture: 'LlamaForCausalLM' });
    expect(v.artifacts.safetensors.path).toMatch(/\/dev\/from-mlflow\/v1\/safetensors\/$/);
    const dest = join(work, `${kind}-from-mlflow`);
    await pullModel(api, { name: 'from-mlflow', version: 1, dest });
    expect(readFileSync(join(dest, 'model.safetensors')).equals(original)).toBe(true);
  });

  it('answers 404 for a file the manifest does not list and refuses a path outside the format', async () => {
    expect((await call('GET', '/v1/models/artifacts-a/versions/1/artifacts/safetensors/secrets.txt')).status).toBe(404);
    expect((await call('GET', '/v1/models/artifacts-a/versions/1/artifacts/gguf-q4_k_m/manifest.json')).body.message).toContain('its formats: safetensors, lora, gguf-q8_0');
    expect((await call('GET', '/v1/models/artifacts-a/versions/1/artifacts/safetensors/%2E%2E%2F%2E%2E%2Fv1%2Flora%2Fmanifest.json')).status).toBe(400);
  });

  it('answers get-download-uri with the version\'s own copy, which the artifact proxy serves to its organization only', async () => {
    const { original, overwrite } = await registeredFromRun('download-uri');
    await overwrite();
    const uri = (await call('GET', '/api/2.0/mlflow/model-versions/get-download-uri?name=download-uri&version=1')).body.artifact_uri as string;
    expect(uri).toBe('mlflow-artifacts:/model-versions/download-uri/1/safetensors');
    // What the stock client does with an mlflow-artifacts:/ URI: list the directory, then GET each file.
    const proxied = (path: string, headers: Record<string, string> = auth) => runtime.app.request(`/api/2.0/mlflow-artifacts/artifacts${path}`, { headers });
    const root = uri.replace(/^mlflow-artifacts:\//, '');
    const listed = (await (await proxied(`?path=${encodeURIComponent(root)}`)).json()) as Json;
    expect(listed.files).toEqual([
      { path: 'config.json', is_dir: false, file_size: expect.any(Number) },
      { path: 'manifest.json', is_dir: false, file_size: expect.any(Number) },
      { path: 'model.safetensors', is_dir: false, file_size: original.length },
    ]);
    const weights = await proxied(`/${root}/model.safetensors`);
    expect(weights.status).toBe(200);
    expect(weights.headers.get('content-disposition')).toBe('attachment; filename=model.safetensors');
    expect(Buffer.from(await weights.arrayBuffer()).equals(original)).toBe(true); // the registered bytes, not the overwrite
    expect((await proxied(`/${root}/secrets.txt`)).status).toBe(404);
    // The files of record cannot be changed through the proxy.
    const put = await runtime.app.request(`/api/2.0/mlflow-artifacts/artifacts/${root}/model.safetensors`, { method: 'PUT', headers: auth, body: 'x' });
    expect(put.status).toBe(403);
    // Another organization sees neither the version nor its files.
    await seedDevOrganization(runtime.catalogue.db, 'other-org', 'token-of-another-org');
    const other = { authorization: 'Bearer token-of-another-org' };
    const otherUri = await runtime.app.request('/api/2.0/mlflow/model-versions/get-download-uri?name=download-uri&version=1', { headers: other });
    expect(otherUri.status).toBe(404);
    expect((await proxied(`/${root}/model.safetensors`, other)).status).toBe(404);
    expect((await proxied(`?path=${encodeURIComponent(root)}`, other)).status).toBe(404);
  });

  it('gives a models:/ copy files of record of its own, under the new version\'s prefix', async () => {
    const { original } = await registeredFromRun('copied');
    const copy = await call('POST', '/api/2.0/mlflow/model-versions/create', { name: 'copied', source: 'models:/copied/1' });
    expect(copy.status, JSON.stringify(copy.body)).toBe(200);
    expect(copy.body.model_version).toMatchObject({ version: '2', status: 'PENDING_REGISTRATION', source: 'models:/copied/1' });
    expect(await whenRegistered('copied', '2')).toMatchObject({ version: '2', status: 'READY', source: 'models:/copied/1' });
    const [v1, v2] = [(await call('GET', '/v1/models/copied/versions/1')).body, (await call('GET', '/v1/models/copied/versions/2')).body];
    expect(v2).toMatchObject({ status: 'ready', formats: ['safetensors'], architecture: 'LlamaForCausalLM' });
    expect(v2.artifacts.safetensors.path).toMatch(/\/dev\/copied\/v2\/safetensors\/$/);
    // Its manifest names version 2, so its checksum is its own while the files are byte for byte the same.
    expect(v2.checksum).not.toBe(v1.checksum);
    const manifest = ModelManifestSchema.parse(JSON.parse((await store.readText(v2.artifacts.safetensors.manifest))!));
    expect(manifest).toMatchObject({ model: 'copied', version: 2, format: 'safetensors' });
    const dest = join(work, `${kind}-copied-v2`);
    await pullModel(api, { name: 'copied', version: 2, dest });
    expect(readFileSync(join(dest, 'model.safetensors')).equals(original)).toBe(true);
    // Removing the source version's files leaves the copy whole.
    await store.deletePrefix(loaded.config.storage.buckets.models, 'dev/copied/v1/');
    const again = join(work, `${kind}-copied-v2-again`);
    await pullModel(api, { name: 'copied', version: 2, dest: again });
    expect(readFileSync(join(again, 'model.safetensors')).equals(original)).toBe(true);
    expect((await call('GET', '/api/2.0/mlflow/model-versions/get-download-uri?name=copied&version=2')).body.artifact_uri).toBe('mlflow-artifacts:/model-versions/copied/2/safetensors');
  });
});

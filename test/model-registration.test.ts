// Registering a model version off the request path, on a real S3 server (moto_server), a real Temporal dev server
// and the worker: MLflow's model-versions/create answers PENDING_REGISTRATION at once, a workflow's activity copies
// the files (in 5 MiB parts above storage.multipart_threshold) and hashes them, and the version turns READY; the
// model stays readable and writable while the copy runs. A source that disappeared ends FAILED_REGISTRATION with a
// message naming the file, and whatever had been copied is removed.
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HeadObjectCommand } from '@aws-sdk/client-s3';
import { eq } from 'drizzle-orm';
import { modelVersions } from '../db/schema/index.js';
import { startTemporalDevServer, type DevServer } from '../lib/temporal-dev-server.js';
import { startRuntime, type Runtime } from '../runtime/embedded.js';
import { S3ObjectStore } from '../lib/object-store.js';
import { fileUriIn } from '../lib/model-artifacts.js';
import { bundleWorkflows } from '../workers/worker.js';
import { modelRegistrationWorkflowId } from '../contracts/model-registration.js';
import { auth, testConfig } from './support/config.js';
import { startMoto, type Moto } from './support/moto.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const MiB = 1024 * 1024;
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

let temporal: DevServer;
let moto: Moto;
let runtime: Runtime;
let store: S3ObjectStore;
/** Every command the store's S3 client sent (the worker's copy included: one process, one store). */
const sent: { name: string; input: Json }[] = [];
/** When set, the first UploadPartCopy waits until `release` resolves (reporting that it got there). */
let hold: { reached: () => void; release: Promise<void> } | null = null;

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: Json; ms: number }> {
  const started = Date.now();
  const res = await runtime.app.request(path, { method, headers: { ...auth, 'content-type': 'application/json' }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  return { status: res.status, body: (await res.json()) as Json, ms: Date.now() - started };
}
const mlflow = (method: string, rpc: string, body?: unknown) => call(method, `/api/2.0/mlflow/${rpc}`, body);

/** model-versions/get until the version is no longer PENDING_REGISTRATION, as the stock client polls. */
async function whenRegistered(name: string, version: string): Promise<Json> {
  for (let i = 0; ; i++) {
    const got = await mlflow('GET', `model-versions/get?name=${name}&version=${version}`);
    if (got.body.model_version.status !== 'PENDING_REGISTRATION') return got.body.model_version as Json;
    if (i > 600) throw new Error(`version ${version} of ${name} is still PENDING_REGISTRATION`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A run whose `model/` holds config.json and model.safetensors (uploaded through the artifact proxy). */
async function runWithModel(weights: Buffer): Promise<Json> {
  const run = (await mlflow('POST', 'runs/create', { experiment_id: '0', run_name: 'to-register' })).body.run.info as Json;
  const proxied = `/api/2.0/mlflow-artifacts/artifacts/${String(run.artifact_uri).replace(/^mlflow-artifacts:\/+/, '')}/model`;
  for (const [file, body] of [['config.json', Buffer.from(JSON.stringify({ architectures: ['LlamaForCausalLM'] }))], ['model.safetensors', weights]] as const) {
    const res = await runtime.app.request(`${proxied}/${file}`, { method: 'PUT', headers: auth, body: new Uint8Array(body) });
    expect(res.status, file).toBe(200);
  }
  return run;
}

beforeAll(async () => {
  const probe = testConfig();
  mkdirSync(join(probe.home, 'logs'), { recursive: true });
  temporal = await startTemporalDevServer({ binary: probe.bootstrap.temporal, home: probe.home, port: 0, uiPort: null, namespace: 'default' });
  moto = await startMoto(probe.bootstrap.moto_server);
  const loaded = testConfig({ ...moto.env, HANZO_ML_STORAGE_MULTIPART_THRESHOLD: String(5 * MiB) });
  mkdirSync(join(loaded.home, 'logs'), { recursive: true });
  runtime = await startRuntime({ ...loaded, temporalAddress: temporal.address, temporalUiUrl: null, workflowBundle: await bundleWorkflows(), listen: false });
  store = runtime.store as S3ObjectStore;
  store.client.middlewareStack.add(
    (next, context) => async (args) => {
      sent.push({ name: context.commandName!, input: args.input as Json });
      const waiting = context.commandName === 'UploadPartCopyCommand' ? hold : null;
      if (waiting) {
        hold = null;
        waiting.reached();
        await waiting.release;
      }
      return next(args);
    },
    { step: 'initialize', name: 'recordCommands' },
  );
}, 180_000);

afterAll(async () => {
  await runtime?.stop();
  moto?.stop();
  await temporal?.stop();
});

describe('model registration as an activity', () => {
  it('copies a 12 MiB file in 5 MiB UploadPartCopy parts while the model answers other requests at once', { timeout: 120_000 }, async () => {
    const weights = randomBytes(12 * MiB);
    const run = await runWithModel(weights);
    expect((await mlflow('POST', 'registered-models/create', { name: 'big' })).status).toBe(200);
    let reached!: () => void;
    let release!: () => void;
    const copying = new Promise<void>((r) => (reached = r));
    hold = { reached, release: new Promise<void>((r) => (release = r)) };

    const created = await mlflow('POST', 'model-versions/create', { name: 'big', source: `runs:/${run.run_id}/model`, run_id: run.run_id });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    expect(created.body.model_version).toMatchObject({ version: '1', status: 'PENDING_REGISTRATION' });

    // The copy is under way (its first part is held): the model is read and written without waiting for it.
    await copying;
    const updated = await mlflow('PATCH', 'registered-models/update', { name: 'big', description: 'changed during the copy' });
    expect(updated.status).toBe(200);
    expect(updated.ms).toBeLessThan(2000);
    const read = await mlflow('GET', 'registered-models/get?name=big');
    expect(read.body.registered_model).toMatchObject({ description: 'changed during the copy', latest_versions: [expect.objectContaining({ version: '1', status: 'PENDING_REGISTRATION' })] });
    expect(read.ms).toBeLessThan(2000);
    const tagged = await mlflow('POST', 'model-versions/set-tag', { name: 'big', version: '1', key: 'while', value: 'copying' });
    expect(tagged.status).toBe(200);
    release();

    const ready = await whenRegistered('big', '1');
    expect(ready).toMatchObject({ status: 'READY', tags: [{ key: 'while', value: 'copying' }] });
    const v = (await call('GET', '/v1/models/big/versions/1')).body;
    expect(v).toMatchObject({ status: 'ready', status_message: null, formats: ['safetensors'], architecture: 'LlamaForCausalLM' });

    // Three parts of the 12 MiB file, by byte range, completed as one object; config.json went in one CopyObject.
    const key = 'dev/big/v1/safetensors/model.safetensors';
    const parts = sent.filter((c) => c.name === 'UploadPartCopyCommand' && c.input.Key === key);
    expect(parts.map((c) => [c.input.PartNumber, c.input.CopySourceRange]).sort()).toEqual([
      [1, `bytes=0-${5 * MiB - 1}`],
      [2, `bytes=${5 * MiB}-${10 * MiB - 1}`],
      [3, `bytes=${10 * MiB}-${12 * MiB - 1}`],
    ]);
    expect(sent.filter((c) => c.name === 'CompleteMultipartUploadCommand' && c.input.Key === key)).toHaveLength(1);
    expect(sent.filter((c) => c.name === 'CopyObjectCommand' && c.input.Key === key)).toHaveLength(0);
    expect(sent.filter((c) => c.name === 'CopyObjectCommand' && c.input.Key === 'dev/big/v1/safetensors/config.json')).toHaveLength(1);
    // The server holds it as a three-part object (an S3 multipart ETag ends in -<parts>), byte for byte the source.
    const head = await store.client.send(new HeadObjectCommand({ Bucket: 'hanzo-models', Key: key }));
    expect(head.ContentLength).toBe(12 * MiB);
    expect(head.ETag).toMatch(/-3"$/);
    const manifest = JSON.parse((await store.readText(v.artifacts.safetensors.manifest))!) as Json;
    expect(manifest.files).toContainEqual({ path: 'model.safetensors', size_bytes: 12 * MiB, sha256: sha(weights) });
    const pulled = await runtime.app.request('/v1/models/big/versions/1/artifacts/safetensors/model.safetensors', { headers: auth });
    expect(Buffer.from(await pulled.arrayBuffer()).equals(weights)).toBe(true);
  });

  it('ends FAILED_REGISTRATION with a message naming the missing file and keeps nothing it had copied', { timeout: 120_000 }, async () => {
    const run = await runWithModel(randomBytes(64 * 1024));
    expect((await mlflow('POST', 'registered-models/create', { name: 'gone' })).status).toBe(200);
    await mlflow('POST', 'model-versions/create', { name: 'gone', source: `runs:/${run.run_id}/model`, run_id: run.run_id });
    expect((await whenRegistered('gone', '1')).status).toBe('READY');
    // Version 1's weights disappear from the store; a copy of version 1 lists them from its manifest.
    const v1 = (await call('GET', '/v1/models/gone/versions/1')).body;
    await store.deleteObject(fileUriIn(v1.artifacts.safetensors.path, 'model.safetensors'));

    const copy = await mlflow('POST', 'model-versions/create', { name: 'gone', source: 'models:/gone/1' });
    expect(copy.body.model_version).toMatchObject({ version: '2', status: 'PENDING_REGISTRATION' });
    const failed = await whenRegistered('gone', '2');
    expect(failed.status).toBe('FAILED_REGISTRATION');
    expect(failed.status_message).toMatch(/^version 2 of model "gone" not registered: format safetensors: source file model\.safetensors \(s3:\/\/.+\) does not exist$/);
    // config.json was copied before the missing file was reached: the failed registration removed it.
    expect(sent.some((c) => c.name === 'CopyObjectCommand' && c.input.Key === 'dev/gone/v2/safetensors/config.json')).toBe(true);
    expect(await store.list('s3://hanzo-models/dev/gone/v2')).toEqual([]);
    expect((await call('GET', '/v1/models/gone/versions/2')).body).toMatchObject({ status: 'failed_registration', status_message: failed.status_message, formats: [], checksum: null });
    // The failure is the version's state; the workflow itself completed.
    const [version2] = await runtime.catalogue.db.select().from(modelVersions).where(eq(modelVersions.statusMessage, failed.status_message as string));
    const handle = runtime.client.workflow.getHandle(modelRegistrationWorkflowId(version2!.id));
    expect(await handle.result()).toMatchObject({ status: 'failed_registration', message: failed.status_message });
    // Nothing complete to serve: it cannot be staged.
    const staged = await call('PATCH', '/v1/models/gone/versions/2/stage', { stage: 'staging' });
    expect(staged.status).toBe(409);
  });
});

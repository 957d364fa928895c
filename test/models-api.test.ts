// The model registry's writes through app.request(), on PGlite and on Postgres: /v1/models (register a model, a
// version from a run's artifact, stage changes) and the MLflow registry endpoints' rules that the stock client
// cannot show against a reference server: roles, the one-production-version rule, audit rows, tenancy, bad input.
import { randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTemporalDevServer, type DevServer } from '../lib/temporal-dev-server.js';
import { startRuntime, type Runtime } from '../runtime/embedded.js';
import { auth, testConfig } from './support/config.js';
import { startPostgres, type TestPostgres } from './support/postgres.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { recordArtifact } from '../db/repo/run-artifacts.js';
import { apiTokens, auditLog } from '../db/schema/index.js';
import { sha256Text } from '../lib/hash.js';
import { bundleWorkflows } from '../workers/worker.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const as = (token: string) => ({ authorization: `Bearer ${token}` });
const VIEWER = as('viewer-token');
const DEVELOPER = as('developer-token');
const APPROVER = as('approver-token');
const OTHER_ORG = as('token-of-another-org');
const WEIGHTS = Buffer.from('weights of record');

let temporal: DevServer;
let bundle: Awaited<ReturnType<typeof bundleWorkflows>> | undefined;

describe.each(['pglite', 'postgres'] as const)('the model registry API on %s', (engine) => {
  let runtime: Runtime;
  let pg: TestPostgres | null = null;

  async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = auth) {
    const init: RequestInit = { method, headers: { ...headers, 'content-type': 'application/json' } };
    if (body !== undefined) init.body = typeof body === 'string' ? body : JSON.stringify(body);
    const res = await runtime.app.request(path, init);
    return { status: res.status, body: (await res.json()) as Json };
  }
  const mlflow = (method: string, rpc: string, body?: unknown, headers: Record<string, string> = auth) => call(method, `/api/2.0/mlflow/${rpc}`, body, headers);

  /** A finished run with a metric, a param and one recorded artifact (in the object store) under checkpoint/final. */
  async function newRun(headers: Record<string, string> = auth): Promise<Json> {
    const created = await mlflow('POST', 'runs/create', { experiment_id: '0', run_name: 'to-register' }, headers);
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    const info = created.body.run.info as Json;
    await mlflow('POST', 'runs/log-batch', { run_id: info.run_id, metrics: [{ key: 'eval/loss', value: 0.25, timestamp: 1, step: 3 }], params: [{ key: 'lr', value: '2e-5' }] }, headers);
    const file = join(tmpdir(), `weights-${info.run_id}.safetensors`);
    writeFileSync(file, WEIGHTS);
    const stored = await runtime.store.putFile('hanzo-ml-checkpoints', `checkpoints/${info.run_id}/final/model.safetensors`, file);
    await recordArtifact(runtime.catalogue.db, { runId: info.run_id, path: 'checkpoint/final/model.safetensors', uri: stored.uri, sizeBytes: stored.size_bytes, sha256: stored.sha256 });
    return info;
  }

  /** The version once its files are copied (the registration answered pending_registration). */
  async function whenRegistered(name: string, version: number): Promise<Json> {
    for (let i = 0; ; i++) {
      const v = await call('GET', `/v1/models/${name}/versions/${version}`);
      if (v.body.status !== 'pending_registration') return v.body;
      if (i > 300) throw new Error(`version ${version} of ${name} is still pending_registration`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  async function auditRows(target: string) {
    return runtime.catalogue.db.select().from(auditLog).where(and(eq(auditLog.organizationId, 'dev'), eq(auditLog.target, target)));
  }

  beforeAll(async () => {
    // Stage rules of hand-registered versions (roles, one production version); the eval gate's refusal of such
    // versions is test/model-gate.test.ts's.
    const env: Record<string, string> = { HANZO_ML_REGISTRY_REQUIRE_GATE_FOR_PRODUCTION: 'false' };
    if (engine === 'postgres') {
      pg = await startPostgres();
      env.HANZO_ML_DATABASE_URL = await pg.createDatabase('models_api');
    }
    const loaded = testConfig(env);
    mkdirSync(join(loaded.home, 'logs'), { recursive: true });
    temporal ??= await startTemporalDevServer({ binary: loaded.bootstrap.temporal, home: loaded.home, port: 0, uiPort: null, namespace: 'default' });
    // The worker copies registered files (modelRegistrationWorkflow); the API answers before it does.
    runtime = await startRuntime({ ...loaded, temporalAddress: temporal.address, temporalUiUrl: null, workflowBundle: (bundle ??= await bundleWorkflows()), listen: false });
    const db = runtime.catalogue.db;
    await seedDevOrganization(db, 'other-org', 'token-of-another-org');
    for (const [subject, role] of [
      ['reader', 'viewer'],
      ['builder', 'developer'],
      ['gatekeeper', 'approver'],
    ] as const)
      await db.insert(apiTokens).values({ id: randomUUID(), organizationId: 'dev', subject, role, tokenSha256: sha256Text(`${role}-token`) });
  }, 180_000);

  afterAll(async () => {
    await runtime?.stop();
    await pg?.stop();
    if (engine === 'postgres') await temporal?.stop();
  });

  it('registers a model once and refuses the same name again', async () => {
    const created = await call('POST', '/v1/models', { name: 'reg-a', description: 'finance QA', tags: { task: 'qa' } }, DEVELOPER);
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ name: 'reg-a', description: 'finance QA', tags: { task: 'qa' } });
    const again = await call('POST', '/v1/models', { name: 'reg-a' }, DEVELOPER);
    expect(again).toMatchObject({ status: 400, body: { error_code: 'RESOURCE_ALREADY_EXISTS' } });
    expect((await call('GET', '/v1/models')).body.models).toContainEqual(expect.objectContaining({ name: 'reg-a', latest_version: null }));
  });

  it('refuses a bad model body, naming the field, and refuses viewers', async () => {
    const slash = await call('POST', '/v1/models', { name: 'a/b' }, DEVELOPER);
    expect(slash.status).toBe(400);
    expect(slash.body.message).toMatch(/name: a model name cannot contain '\/' or ':'/);
    const extra = await call('POST', '/v1/models', { name: 'x', owner: 'me' }, DEVELOPER);
    expect(extra.body.message).toMatch(/owner/);
    expect((await call('POST', '/v1/models', { name: 'viewer-model' }, VIEWER)).body.error_code).toBe('PERMISSION_DENIED');
  });

  it("creates a version from a run's artifact, creating the model, with the run's metrics and the artifacts' checksums", async () => {
    const run = await newRun();
    const created = await call('POST', '/v1/models/reg-b/versions', { run_id: run.run_id, artifact_path: 'checkpoint/final', tags: { task: 'qa' }, description: 'first cut' }, DEVELOPER);
    // Accepted at once: the files are copied after the answer, by a workflow.
    expect(created.status, JSON.stringify(created.body)).toBe(202);
    expect(created.body).toMatchObject({ name: 'reg-b', version: 1, stage: 'none', run_id: run.run_id, description: 'first cut', tags: { task: 'qa' }, created_by: 'builder', status: 'pending_registration' });
    const res = { body: await whenRegistered('reg-b', 1) };
    expect(res.body.source).toBe(`${run.artifact_uri}/checkpoint/final`);
    expect(res.body.metrics).toEqual({ 'eval/loss': 0.25 });
    expect(res.body.training_config).toEqual({ params: { lr: '2e-5' } });
    // The run's file is copied under the version's own prefix, with a manifest whose SHA-256 is the checksum.
    expect(res.body).toMatchObject({ status: 'ready', status_message: null, formats: ['safetensors'] });
    const copy = res.body.artifacts.safetensors as Json;
    expect(copy).toMatchObject({ size_bytes: WEIGHTS.length, files: 1 });
    expect(copy.path).toMatch(/\/dev\/reg-b\/v1\/safetensors\/$/);
    const manifest = (await runtime.store.readText(copy.manifest))!;
    expect(copy.checksum).toBe(`sha256:${sha256Text(manifest)}`);
    expect(res.body.checksum).toBe(copy.checksum);
    expect(JSON.parse(manifest).files).toEqual([{ path: 'model.safetensors', size_bytes: WEIGHTS.length, sha256: sha256Text(WEIGHTS.toString('utf8')) }]);
    const second = await call('POST', '/v1/models/reg-b/versions', { run_id: run.run_id, artifact_path: 'checkpoint/final' }, DEVELOPER);
    expect(second.body.version).toBe(2);
    const mv = await mlflow('GET', `model-versions/get?name=reg-b&version=1`, undefined, VIEWER);
    expect(mv.body.model_version).toMatchObject({ version: '1', current_stage: 'None', source: res.body.source, run_id: run.run_id, status: 'READY' });
  });

  it('refuses a version from a missing or foreign run, a bad artifact path, and a viewer', async () => {
    const run = await newRun();
    expect(await call('POST', '/v1/models/reg-c/versions', { run_id: 'f'.repeat(32), artifact_path: 'm' }, DEVELOPER)).toMatchObject({ status: 404, body: { error_code: 'RESOURCE_DOES_NOT_EXIST' } });
    expect((await call('POST', '/v1/models/reg-c/versions', { run_id: run.run_id, artifact_path: 'm' }, OTHER_ORG)).status).toBe(404);
    const escape = await call('POST', '/v1/models/reg-c/versions', { run_id: run.run_id, artifact_path: '../other-run' }, DEVELOPER);
    expect(escape.status).toBe(400);
    expect(escape.body.message).toMatch(/artifact_path/);
    const missing = await call('POST', '/v1/models/reg-c/versions', { artifact_path: 'm' }, DEVELOPER);
    expect(missing.body.message).toMatch(/run_id/);
    expect((await call('POST', '/v1/models/reg-c/versions', { run_id: run.run_id, artifact_path: 'm' }, VIEWER)).status).toBe(403);
    const empty = await call('POST', '/v1/models/reg-c/versions', { run_id: run.run_id, artifact_path: 'm' }, DEVELOPER);
    expect(empty).toMatchObject({ status: 400, body: { error_code: 'INVALID_PARAMETER_VALUE' } });
    expect(empty.body.message).toContain('no artifacts at or under artifact_path "m"');
    expect((await call('GET', '/v1/models/reg-c/versions')).status).toBe(404);
  });

  it('promotes through the stages: production needs an approver, archives the previous one and is audited', async () => {
    const run = await newRun();
    for (let i = 0; i < 2; i++) await call('POST', '/v1/models/reg-d/versions', { run_id: run.run_id, artifact_path: 'checkpoint/final' }, DEVELOPER);
    // A version still being registered has nothing complete to serve: no stage toward serving yet.
    for (const v of [1, 2]) expect(await whenRegistered('reg-d', v)).toMatchObject({ status: 'ready' });
    const staged = await call('PATCH', '/v1/models/reg-d/versions/1/stage', { stage: 'staging' }, DEVELOPER);
    expect(staged.body).toMatchObject({ version: { version: 1, stage: 'staging' }, archived: [] });
    const refused = await call('PATCH', '/v1/models/reg-d/versions/1/stage', { stage: 'production' }, DEVELOPER);
    expect(refused).toMatchObject({ status: 403, body: { error_code: 'PERMISSION_DENIED' } });
    expect((await call('PATCH', '/v1/models/reg-d/versions/1/stage', { stage: 'production', reason: 'beats base' }, APPROVER)).body.version.stage).toBe('production');
    // A developer may not take a version out of production either.
    expect((await call('PATCH', '/v1/models/reg-d/versions/1/stage', { stage: 'archived' }, DEVELOPER)).status).toBe(403);
    const second = await call('PATCH', '/v1/models/reg-d/versions/2/stage', { stage: 'production', reason: 'better' }, APPROVER);
    expect(second.body).toMatchObject({ version: { version: 2, stage: 'production' }, archived: [1] });
    const stages = (await call('GET', '/v1/models/reg-d/versions')).body.versions.map((v: Json) => [v.version, v.stage]);
    expect(stages).toEqual([
      [2, 'production'],
      [1, 'archived'],
    ]);
    const audit = await auditRows('reg-d/2');
    expect(audit).toEqual([expect.objectContaining({ actor: 'gatekeeper', action: 'model.stage.production' })]);
    expect(JSON.parse(audit[0]!.detail)).toMatchObject({ reason: 'better', from: 'none', archived: [1] });
  });

  it('refuses a bad stage change, naming what is wrong', async () => {
    const bad = await call('PATCH', '/v1/models/reg-d/versions/1/stage', { stage: 'retired' }, APPROVER);
    expect(bad.status).toBe(400);
    expect(bad.body.message).toMatch(/stage/);
    expect((await call('PATCH', '/v1/models/reg-d/versions/one/stage', { stage: 'staging' }, APPROVER)).body.message).toMatch(/invalid version "one"/);
    expect((await call('PATCH', '/v1/models/reg-d/versions/99/stage', { stage: 'staging' }, APPROVER)).status).toBe(404);
    expect((await call('PATCH', '/v1/models/nobody/versions/1/stage', { stage: 'staging' }, APPROVER)).status).toBe(404);
  });

  it('keeps one production version under MLflow transitions: promoting archives the previous production version', async () => {
    const run = await newRun();
    await mlflow('POST', 'registered-models/create', { name: 'reg-e' }, DEVELOPER);
    for (let i = 0; i < 2; i++) await mlflow('POST', 'model-versions/create', { name: 'reg-e', source: `${run.artifact_uri}/model`, run_id: run.run_id }, DEVELOPER);
    const toProd = (version: string, archive: boolean, headers = APPROVER) =>
      mlflow('POST', 'model-versions/transition-stage', { name: 'reg-e', version, stage: 'Production', archive_existing_versions: archive }, headers);
    expect((await toProd('1', false, DEVELOPER)).body.error_code).toBe('PERMISSION_DENIED');
    expect((await toProd('1', false)).body.model_version.current_stage).toBe('Production');
    // Spec 000: promoting a new version to production archives the previous one, with or without the flag.
    expect((await toProd('2', false)).body.model_version.current_stage).toBe('Production');
    expect((await mlflow('GET', 'model-versions/get?name=reg-e&version=1')).body.model_version.current_stage).toBe('Archived');
    expect(await auditRows('reg-e/2')).toEqual([expect.objectContaining({ actor: 'gatekeeper', action: 'model.stage.production' })]);
    const passive = await mlflow('POST', 'model-versions/transition-stage', { name: 'reg-e', version: '1', stage: 'Archived', archive_existing_versions: true });
    expect(passive).toMatchObject({ status: 400, body: { error_code: 'INVALID_PARAMETER_VALUE' } });
    // Deleting a version or a model is ml-admin's (spec 000), the approver permission is not enough.
    expect((await mlflow('DELETE', 'model-versions/delete', { name: 'reg-e', version: '2' }, DEVELOPER)).status).toBe(403);
    expect((await mlflow('DELETE', 'registered-models/delete', { name: 'reg-e' }, DEVELOPER)).status).toBe(403);
    expect((await mlflow('DELETE', 'registered-models/delete', { name: 'reg-e' }, APPROVER)).status).toBe(403);
    expect((await mlflow('DELETE', 'registered-models/delete', { name: 'reg-e' })).status).toBe(200);
  });

  it('answers replayed MLflow writes the same way (tags and aliases are idempotent)', async () => {
    const run = await newRun();
    await mlflow('POST', 'registered-models/create', { name: 'reg-f' });
    await mlflow('POST', 'model-versions/create', { name: 'reg-f', source: `${run.artifact_uri}/model`, run_id: run.run_id });
    for (let i = 0; i < 2; i++) {
      expect((await mlflow('POST', 'registered-models/set-tag', { name: 'reg-f', key: 'team', value: 'ml' })).status).toBe(200);
      expect((await mlflow('POST', 'model-versions/set-tag', { name: 'reg-f', version: '1', key: 'ok', value: 'yes' })).status).toBe(200);
      expect((await mlflow('POST', 'registered-models/alias', { name: 'reg-f', alias: 'champion', version: '1' })).status).toBe(200);
      expect((await mlflow('DELETE', 'model-versions/delete-tag', { name: 'reg-f', version: '1', key: 'gone' })).status).toBe(200);
    }
    const model = (await mlflow('GET', 'registered-models/get?name=reg-f')).body.registered_model;
    expect(model).toMatchObject({ tags: [{ key: 'team', value: 'ml' }], aliases: [{ alias: 'champion', version: '1' }] });
    expect((await mlflow('GET', 'registered-models/alias?name=reg-f&alias=champion')).body.model_version).toMatchObject({ version: '1', tags: [{ key: 'ok', value: 'yes' }], aliases: ['champion'] });
  });

  it("keeps organizations apart: another organization sees none of this one's models", async () => {
    expect((await mlflow('GET', 'registered-models/get?name=reg-a', undefined, OTHER_ORG)).status).toBe(404);
    expect((await mlflow('GET', 'registered-models/search', undefined, OTHER_ORG)).body).toEqual({ registered_models: [] });
    expect((await call('GET', '/v1/models', undefined, OTHER_ORG)).body).toEqual({ models: [] });
    // The same name is free in another organization.
    expect((await call('POST', '/v1/models', { name: 'reg-a' }, OTHER_ORG)).status).toBe(201);
  });
});

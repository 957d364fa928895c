// Every road to production meets the eval gate: a version that never met a suite (registered by hand, through
// /v1 or MLflow, or by a conversion job) may go to staging but not to production — by PATCH, MLflow's
// transition-stage or the `production` alias — until `model evaluate` records a passing decision on it or an admin
// overrides with a reason (audited). registry.require_gate_for_production: false lets it through, as stock MLflow.
// Stand-ins: the hand-registered versions are inserted as a registration leaves them (ready, run metrics, no gate
// decision), without copying files; the evaluation's decision is recorded by the function its eval job calls
// (recordGateDecision with gateTags), from per-example scores instead of a trainer run.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTemporalDevServer, type DevServer } from '../lib/temporal-dev-server.js';
import { startRuntime, type Runtime } from '../runtime/embedded.js';
import { auth, testConfig } from './support/config.js';
import { apiTokens, auditLog, datasets } from '../db/schema/index.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { sha256Text } from '../lib/hash.js';
import { recordGateDecision, registerModelVersion } from '../db/repo/models.js';
import { gateTags } from '../activities/registry.js';
import { evalGate } from '../lib/eval-gate.js';
import { loadEvalSuite } from '../lib/eval-suites.js';
import { DEFAULT_BASE_MODEL } from '../lib/base-models.js';
import type { ExampleScores } from '../contracts/trainer-job.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const as = (token: string) => ({ authorization: `Bearer ${token}` });
const DEVELOPER = as('developer-token'); // subject "builder"
const OTHER_DEVELOPER = as('second-developer-token'); // subject "tinkerer"
const APPROVER = as('approver-token');
const OTHER_ORG = as('token-of-another-org');
const ADMIN = auth; // the dev token is the organization's admin

let temporal: DevServer;
let runtime: Runtime;
let open: Runtime; // registry.require_gate_for_production: false

async function call(rt: Runtime, method: string, path: string, body?: unknown, headers: Record<string, string> = ADMIN) {
  const res = await rt.app.request(path, { method, headers: { ...headers, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as Json };
}
const api = (method: string, path: string, body?: unknown, headers?: Record<string, string>) => call(runtime, method, path, body, headers);
const mlflow = (rpc: string, body: unknown, headers?: Record<string, string>) => call(runtime, 'POST', `/api/2.0/mlflow/${rpc}`, body, headers);
const stage = (name: string, version: number, body: Record<string, unknown>, headers: Record<string, string> = APPROVER, rt = runtime) =>
  call(rt, 'PATCH', `/v1/models/${name}/versions/${version}/stage`, body, headers);

/** A LoRA version as a hand registration leaves it: ready, with its run's metrics and no gate decision. */
async function handRegistered(rt: Runtime, name: string, createdBy = 'builder'): Promise<number> {
  const row = await registerModelVersion(rt.catalogue.db, {
    organizationId: 'dev',
    modelName: name,
    stage: 'none',
    baseModel: DEFAULT_BASE_MODEL,
    artifacts: { lora: { path: `s3://hanzo-ml-models/${name}/adapter/` } },
    metrics: { 'eval/loss': 0.25 },
    tags: {},
    createdBy,
  });
  return row.version;
}

/** Per-example scores; `exact` of 20 test examples right, general-text NLL per token around `generalNll`. */
function scores(generalNll: number, exact: number): ExampleScores {
  return {
    test: { nll: Array.from({ length: 20 }, (_, i) => 2 + 0.1 * (i % 3)), tokens: Array(20).fill(2), exact_match: Array.from({ length: 20 }, (_, i) => (i < exact ? 1 : 0)) },
    general: { nll: Array.from({ length: 30 }, (_, i) => 10 * generalNll + (i % 4)), tokens: Array(30).fill(10) },
    instructions: { id: ['if-1', 'if-2'], kind: ['lowercase', 'no_comma'], answer: ['shipping', 'shipping'], pass: [1, 1] },
  };
}

/** What the evaluate job's last step does with its scores: the suite's decision, recorded on the version. */
async function recordEvaluation(name: string, version: number, candidate: ExampleScores) {
  const gate = evalGate(await loadEvalSuite('support-desk@1'), { models: { base: scores(0.6, 0), tuned: candidate } });
  await recordGateDecision(runtime.catalogue.db, { organizationId: 'dev', modelName: name, version, gate, tags: gateTags(gate), actor: 'builder' });
  return gate;
}

const auditRows = (action: string, target: string) =>
  runtime.catalogue.db.select().from(auditLog).where(and(eq(auditLog.action, action), eq(auditLog.target, target)));

describe('a model version that never met an eval suite', () => {
  beforeAll(async () => {
    const loaded = testConfig();
    mkdirSync(join(loaded.home, 'logs'), { recursive: true });
    temporal = await startTemporalDevServer({ binary: loaded.bootstrap.temporal, home: loaded.home, port: 0, uiPort: null, namespace: 'default' });
    runtime = await startRuntime({ ...loaded, temporalAddress: temporal.address, temporalUiUrl: null, worker: false, listen: false });
    const off = testConfig({ HANZO_ML_REGISTRY_REQUIRE_GATE_FOR_PRODUCTION: 'false' });
    mkdirSync(join(off.home, 'logs'), { recursive: true });
    open = await startRuntime({ ...off, temporalAddress: temporal.address, temporalUiUrl: null, worker: false, listen: false });
    for (const rt of [runtime, open])
      for (const [subject, role, token] of [
        ['builder', 'developer', 'developer-token'],
        ['tinkerer', 'developer', 'second-developer-token'],
        ['gatekeeper', 'approver', 'approver-token'],
      ] as const)
        await rt.catalogue.db.insert(apiTokens).values({ id: randomUUID(), organizationId: 'dev', subject, role, tokenSha256: sha256Text(token) });
    await seedDevOrganization(runtime.catalogue.db, 'other-org', 'token-of-another-org');
  }, 180_000);
  afterAll(async () => {
    await open?.stop();
    await runtime?.stop();
    await temporal?.stop();
  });

  it('reaches staging but not production by PATCH, MLflow transition-stage or the production alias', async () => {
    const v = await handRegistered(runtime, 'g-roads');
    expect((await stage('g-roads', v, { stage: 'staging' }, DEVELOPER)).body.version).toMatchObject({ stage: 'staging' });
    const patched = await stage('g-roads', v, { stage: 'production', reason: 'looks good' });
    expect(patched).toMatchObject({ status: 409, body: { error_code: 'INVALID_STATE' } });
    // The refusal says what is wrong and names both ways out.
    expect(patched.body.message).toMatch(/version 1 of model "g-roads" is ungated/);
    expect(patched.body.message).toContain('hanzo-ml model evaluate g-roads --version 1');
    expect(patched.body.message).toMatch(/admin override with a reason/);
    const transition = await mlflow('model-versions/transition-stage', { name: 'g-roads', version: String(v), stage: 'Production', archive_existing_versions: true }, APPROVER);
    expect(transition).toMatchObject({ status: 409, body: { error_code: 'INVALID_STATE' } });
    expect(transition.body.message).toMatch(/ungated/);
    const alias = await mlflow('registered-models/alias', { name: 'g-roads', alias: 'production', version: String(v) }, DEVELOPER);
    expect(alias).toMatchObject({ status: 409, body: { error_code: 'INVALID_STATE' } });
    expect(alias.body.message).toMatch(/ungated/);
    // Another alias serves nothing by this rule.
    expect((await mlflow('registered-models/alias', { name: 'g-roads', alias: 'candidate', version: String(v) }, DEVELOPER)).status).toBe(200);
    expect((await api('GET', `/v1/models/g-roads/versions/${v}`)).body.stage).toBe('staging');
  });

  it('submits an eval job that records the gate, asked by its registrant or an admin only, and nobody in another organization', async () => {
    const v = await handRegistered(runtime, 'g-eval');
    const path = `/v1/models/g-eval/versions/${v}/evaluate`;
    const body = { dataset: { name: 'g-ds', version: 1 }, suite: 'support-desk@1' };
    await runtime.catalogue.db.insert(datasets).values({
      id: randomUUID(), organizationId: 'dev', name: 'g-ds', version: 1, format: 'jsonl', storagePath: 's3://hanzo-ml-datasets/g-ds/1', sizeBytes: 1, numRecords: 1, sha256: 'x',
      schema: {}, splits: { train: 's3://hanzo-ml-datasets/g-ds/1/train.jsonl', test: 's3://hanzo-ml-datasets/g-ds/1/test.jsonl' }, metadata: {}, tags: [], lineage: {}, createdBy: 'builder',
    });
    expect(await api('POST', path, body, OTHER_ORG)).toMatchObject({ status: 404, body: { error_code: 'RESOURCE_DOES_NOT_EXIST' } });
    expect(await api('POST', path, body, OTHER_DEVELOPER)).toMatchObject({ status: 403, body: { error_code: 'PERMISSION_DENIED' } });
    const noDataset = await api('POST', path, {}, DEVELOPER);
    expect(noDataset).toMatchObject({ status: 400, body: { error_code: 'INVALID_PARAMETER_VALUE' } });
    expect(noDataset.body.message).toMatch(/^dataset: version 1 records no dataset/);
    const submitted = await api('POST', path, body, DEVELOPER);
    expect(submitted.status, JSON.stringify(submitted.body)).toBe(202);
    const job = (await api('GET', `/v1/jobs/${submitted.body.job.id}`, undefined, DEVELOPER)).body;
    expect(job.spec ?? job).toMatchObject({ type: 'eval' });
    expect(JSON.stringify(job)).toContain('"record_gate":true');
    expect(JSON.stringify(job)).toContain(`"model":"g-eval@${v}"`);
    // A full model (no adapter) has no base to be compared with by the eval tool: refused, naming the field.
    const full = await registerModelVersion(runtime.catalogue.db, { organizationId: 'dev', modelName: 'g-eval', stage: 'none', artifacts: { safetensors: { path: 's3://hanzo-ml-models/g-eval/2/' } }, metrics: {}, tags: {}, createdBy: 'builder' });
    const refused = await api('POST', `/v1/models/g-eval/versions/${full.version}/evaluate`, body, DEVELOPER);
    expect(refused).toMatchObject({ status: 400 });
    expect(refused.body.message).toMatch(/^eval\.source: .*no adapter/);
  });

  it('reaches production once a passing evaluation is recorded; a blocking one quarantines it', async () => {
    const v = await handRegistered(runtime, 'g-pass');
    expect((await stage('g-pass', v, { stage: 'production' })).status).toBe(409);
    const gate = await recordEvaluation('g-pass', v, scores(0.62, 18));
    expect(gate.passed).toBe(true);
    const promoted = await stage('g-pass', v, { stage: 'production', reason: 'evaluated' });
    expect(promoted.status, JSON.stringify(promoted.body)).toBe(200);
    expect(promoted.body.version).toMatchObject({ stage: 'production', tags: { eval_suite: 'support-desk@1' }, metrics: { gate: { suite: 'support-desk@1', passed: true } } });
    expect(await auditRows('model.gate.evaluate', `g-pass/${v}`)).toHaveLength(1);

    const w = await handRegistered(runtime, 'g-block');
    const blocked = await recordEvaluation('g-block', w, scores(2.5, 18)); // general text lost
    expect(blocked.passed).toBe(false);
    const refused = await stage('g-block', w, { stage: 'production' });
    expect(refused).toMatchObject({ status: 409 });
    expect(refused.body.message).toMatch(/quarantined by the promotion gate/);
    expect((await api('GET', `/v1/models/g-block/versions/${w}`)).body.tags).toMatchObject({ quarantined: 'true' });
  });

  it('reaches production by an admin override with a reason, which is audited; a non-admin cannot override', async () => {
    const v = await handRegistered(runtime, 'g-override');
    const why = 'hot fix measured by hand on the incident prompts';
    expect(await stage('g-override', v, { stage: 'production', override_reason: why }, APPROVER)).toMatchObject({ status: 403, body: { error_code: 'PERMISSION_DENIED' } });
    expect((await stage('g-override', v, { stage: 'production', override_reason: why }, OTHER_ORG)).status).toBe(404);
    expect(await auditRows('model.gate.override', `g-override/${v}`)).toEqual([]);
    const ok = await stage('g-override', v, { stage: 'production', reason: 'incident', override_reason: why }, ADMIN);
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    expect(ok.body.version).toMatchObject({ stage: 'production', tags: { gate_override: why } });
    const audits = await auditRows('model.gate.override', `g-override/${v}`);
    expect(audits).toHaveLength(1);
    expect(audits[0]!.actor).toBe('dev'); // the dev token's subject
    expect(JSON.parse(audits[0]!.detail as string)).toMatchObject({ override_reason: why, stage: 'production', gate: 'ungated' });
    // The override is the gate's record: no tag call removes it.
    expect((await call(runtime, 'DELETE', '/api/2.0/mlflow/model-versions/delete-tag', { name: 'g-override', version: String(v), key: 'gate_override' })).status).toBe(400);
  });

  it('goes to production by every road when registry.require_gate_for_production is false', async () => {
    const a = await handRegistered(open, 'g-open');
    expect((await stage('g-open', a, { stage: 'production' }, APPROVER, open)).body.version).toMatchObject({ stage: 'production' });
    const b = await handRegistered(open, 'g-open');
    const t = await call(open, 'POST', '/api/2.0/mlflow/model-versions/transition-stage', { name: 'g-open', version: String(b), stage: 'Production', archive_existing_versions: true }, APPROVER);
    expect(t.status, JSON.stringify(t.body)).toBe(200);
    const c = await handRegistered(open, 'g-open');
    expect((await call(open, 'POST', '/api/2.0/mlflow/registered-models/alias', { name: 'g-open', alias: 'production', version: String(c) }, ADMIN)).status).toBe(200);
  });
});

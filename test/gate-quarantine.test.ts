// A version the promotion gate quarantined cannot be served by a side door: a stage change through
// PATCH /v1/models/.../stage or MLflow's transition-stage, or an MLflow alias, is refused with the gate's reason
// unless an admin gives an explicit override reason, which is audited; the gate's tags cannot be edited away.
// The version is registered with the tags the registry activity writes for a failed gate decision.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTemporalDevServer, type DevServer } from '../lib/temporal-dev-server.js';
import { startRuntime, type Runtime } from '../runtime/embedded.js';
import { auth, testConfig } from './support/config.js';
import { apiTokens, auditLog } from '../db/schema/index.js';
import { sha256Text } from '../lib/hash.js';
import { registerModelVersion } from '../db/repo/models.js';
import { gateTags } from '../activities/registry.js';
import { evalGate } from '../lib/eval-gate.js';
import { loadEvalSuite } from '../lib/eval-suites.js';
import type { ExampleScores } from '../contracts/trainer-job.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const as = (token: string) => ({ authorization: `Bearer ${token}` });
const DEVELOPER = as('developer-token');
const APPROVER = as('approver-token');
const ADMIN = auth; // the dev token is the organization's admin

let temporal: DevServer;
let runtime: Runtime;

async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = ADMIN) {
  const res = await runtime.app.request(path, { method, headers: { ...headers, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as Json };
}
const mlflow = (rpc: string, body: unknown, headers: Record<string, string> = ADMIN, method = 'POST') => call(method, `/api/2.0/mlflow/${rpc}`, body, headers);

/** Per-example scores of a candidate that learned the task but lost general text: retention regresses. */
function scores(generalNll: number, exact: number): ExampleScores {
  return {
    test: { nll: Array.from({ length: 20 }, (_, i) => 2 + 0.1 * (i % 3)), tokens: Array(20).fill(2), exact_match: Array.from({ length: 20 }, (_, i) => (i < exact ? 1 : 0)) },
    general: { nll: Array.from({ length: 30 }, (_, i) => 10 * generalNll + (i % 4)), tokens: Array(30).fill(10) },
    // instruction following unchanged: only retention regresses
    instructions: { id: ['if-1', 'if-2'], kind: ['lowercase', 'no_comma'], answer: ['shipping', 'shipping'], pass: [1, 1] },
  };
}

async function quarantinedVersion(name: string): Promise<{ version: number; reason: string }> {
  const gate = evalGate(await loadEvalSuite('support-desk@1'), { models: { base: scores(0.6, 0), tuned: scores(2.5, 18) } });
  expect(gate.passed).toBe(false);
  const row = await registerModelVersion(runtime.catalogue.db, { organizationId: 'dev', modelName: name, stage: 'none', artifacts: {}, metrics: { gate }, tags: gateTags(gate), createdBy: 'pipeline' });
  return { version: row.version, reason: gate.reason };
}

describe('a quarantined model version', () => {
  beforeAll(async () => {
    const loaded = testConfig();
    mkdirSync(join(loaded.home, 'logs'), { recursive: true });
    temporal = await startTemporalDevServer({ binary: loaded.bootstrap.temporal, home: loaded.home, port: 0, uiPort: null, namespace: 'default' });
    runtime = await startRuntime({ ...loaded, temporalAddress: temporal.address, temporalUiUrl: null, worker: false, listen: false });
    for (const [subject, role] of [
      ['builder', 'developer'],
      ['gatekeeper', 'approver'],
    ] as const)
      await runtime.catalogue.db.insert(apiTokens).values({ id: randomUUID(), organizationId: 'dev', subject, role, tokenSha256: sha256Text(`${role}-token`) });
  }, 180_000);
  afterAll(async () => {
    await runtime?.stop();
    await temporal?.stop();
  });

  it('is registered with stage none and tagged with why', async () => {
    const { version, reason } = await quarantinedVersion('q-tags');
    const got = await call('GET', `/v1/models/q-tags/versions/${version}`);
    expect(got.body).toMatchObject({ stage: 'none', tags: { quarantined: 'true' } });
    expect(got.body.tags.quarantine_reason).toBe(`support-desk@1: ${reason}`);
    expect(reason).toMatch(/retention\/perplexity vs base/);
    expect(reason).not.toMatch(/test\/exact_match/); // it beats base on the task
  });

  it('cannot be moved to staging or production by PATCH without an admin override reason', async () => {
    const { version } = await quarantinedVersion('q-patch');
    const path = `/v1/models/q-patch/versions/${version}/stage`;
    const staging = await call('PATCH', path, { stage: 'staging', reason: 'looks fine' }, DEVELOPER);
    expect(staging).toMatchObject({ status: 409, body: { error_code: 'INVALID_STATE' } });
    expect(staging.body.message).toMatch(/quarantined by the promotion gate \(support-desk@1: regression: retention\/perplexity vs base/);
    expect((await call('PATCH', path, { stage: 'production', reason: 'ship it' }, APPROVER)).status).toBe(409);
    expect((await call('PATCH', path, { stage: 'production', reason: 'ship it' }, ADMIN)).status).toBe(409); // admin, but no override
    const notAdmin = await call('PATCH', path, { stage: 'production', override_reason: 'I am sure' }, APPROVER);
    expect(notAdmin).toMatchObject({ status: 403, body: { error_code: 'PERMISSION_DENIED' } });
    expect((await call('PATCH', path, { stage: 'production', override_reason: '   ' }, ADMIN)).status).toBe(400);
    expect((await call('GET', `/v1/models/q-patch/versions/${version}`)).body.stage).toBe('none');

    const ok = await call('PATCH', path, { stage: 'production', reason: 'incident fix', override_reason: 'retention loss measured on text this model never serves' }, ADMIN);
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    expect(ok.body.version).toMatchObject({ stage: 'production', tags: { quarantined: 'true', quarantine_override: 'retention loss measured on text this model never serves' } });
    const audits = await runtime.catalogue.db.select().from(auditLog).where(and(eq(auditLog.target, `q-patch/${version}`), eq(auditLog.action, 'model.quarantine.override')));
    expect(audits).toHaveLength(1);
    expect(audits[0]!.actor).toBe('dev');
    expect(JSON.parse(audits[0]!.detail as string)).toMatchObject({ override_reason: 'retention loss measured on text this model never serves', stage: 'production' });
  });

  it('cannot be promoted, aliased or untagged through the MLflow API without the admin override', async () => {
    const { version } = await quarantinedVersion('q-mlflow');
    const v = String(version);
    const transition = await mlflow('model-versions/transition-stage', { name: 'q-mlflow', version: v, stage: 'Production', archive_existing_versions: true }, APPROVER);
    expect(transition).toMatchObject({ status: 409, body: { error_code: 'INVALID_STATE' } });
    expect(transition.body.message).toMatch(/quarantined/);
    expect((await mlflow('model-versions/transition-stage', { name: 'q-mlflow', version: v, stage: 'Staging', comment: 'please' }, DEVELOPER)).status).toBe(403);
    const alias = await mlflow('registered-models/alias', { name: 'q-mlflow', alias: 'champion', version: v }, DEVELOPER);
    expect(alias).toMatchObject({ status: 409, body: { error_code: 'INVALID_STATE' } });
    for (const [rpc, method, body] of [
      ['model-versions/delete-tag', 'DELETE', { name: 'q-mlflow', version: v, key: 'quarantined' }],
      ['model-versions/set-tag', 'POST', { name: 'q-mlflow', version: v, key: 'quarantined', value: 'false' }],
    ] as const) {
      const r = await mlflow(rpc, body, ADMIN, method);
      expect(r.status).toBe(400);
      expect(r.body.message).toMatch(/set by the promotion gate/);
    }
    const staged = await mlflow('model-versions/transition-stage', { name: 'q-mlflow', version: v, stage: 'Staging', comment: 'accepted by the model owner' }, ADMIN);
    expect(staged.status, JSON.stringify(staged.body)).toBe(200);
    expect(staged.body.model_version.current_stage).toBe('Staging');
    expect((await mlflow('registered-models/alias', { name: 'q-mlflow', alias: 'champion', version: v }, DEVELOPER)).status).toBe(200);
  });
});

// Spec 000's role table against a real embedded stack (Temporal dev server, worker, PGlite, the listening API):
// deleting runs, experiments, logged models, registered models and their versions, and moving or deleting an
// alias, are ml-admin's; an ml-researcher, with or without the approver permission, is refused with 403 and
// nothing changes. (The /v1 routes delete none of these.)
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordArtifact } from '../db/repo/run-artifacts.js';
import { DEV_TOKEN } from './support/config.js';
import { startTestStack, type TestStack } from './support/stack.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
let stack: TestStack;
const tokens: Record<string, string> = { admin: DEV_TOKEN };

async function mlflow(method: string, rpc: string, who: string, body?: unknown): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${stack.runtime.apiUrl}/api/2.0/mlflow/${rpc}`, {
    method,
    headers: { authorization: `Bearer ${tokens[who]!}`, 'content-type': 'application/json' },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: (await res.json()) as Json };
}

/** A researcher's run with one recorded artifact, to register versions from. */
async function runWithWeights(): Promise<Json> {
  const created = await mlflow('POST', 'runs/create', 'researcher', { experiment_id: '0', run_name: 'to-register' });
  expect(created.status).toBe(200);
  const info = created.body.run.info as Json;
  const file = join(tmpdir(), `weights-${info.run_id}.safetensors`);
  writeFileSync(file, 'weights of record');
  const stored = await stack.runtime.store.putFile('hanzo-ml-checkpoints', `checkpoints/${info.run_id}/final/model.safetensors`, file);
  await recordArtifact(stack.runtime.catalogue.db, { runId: info.run_id, path: 'checkpoint/final/model.safetensors', uri: stored.uri, sizeBytes: stored.size_bytes, sha256: stored.sha256 });
  return info;
}

beforeAll(async () => {
  stack = await startTestStack();
  for (const [who, approver] of [['researcher', false], ['approver', true]] as const) {
    const made = await stack.api('POST', '/v1/tokens', { subject: who, role: 'ml-researcher', approver });
    expect(made.status).toBe(201);
    tokens[who] = (made.body as { token: string }).token;
  }
}, 180_000);

afterAll(async () => {
  await stack?.stop();
});

describe('deleting', () => {
  it("a run or an experiment is refused to a researcher and done for an admin; restoring stays a researcher's", async () => {
    const exp = await mlflow('POST', 'experiments/create', 'researcher', { name: 'to-delete' });
    const experimentId = exp.body.experiment_id as string;
    const run = await mlflow('POST', 'runs/create', 'researcher', { experiment_id: experimentId });
    const runId = run.body.run.info.run_id as string;
    for (const who of ['researcher', 'approver']) {
      const r = await mlflow('POST', 'runs/delete', who, { run_id: runId });
      expect([who, r.status, r.body.message]).toEqual([who, 403, expect.stringMatching(/needs "ml-admin"/)]);
      expect((await mlflow('POST', 'experiments/delete', who, { experiment_id: experimentId })).status).toBe(403);
    }
    expect((await mlflow('GET', `runs/get?run_id=${runId}`, 'researcher')).body.run.info.lifecycle_stage).toBe('active');
    expect((await mlflow('POST', 'runs/delete', 'admin', { run_id: runId })).status).toBe(200);
    expect((await mlflow('GET', `runs/get?run_id=${runId}`, 'researcher')).body.run.info.lifecycle_stage).toBe('deleted');
    expect((await mlflow('POST', 'runs/restore', 'researcher', { run_id: runId })).status).toBe(200);
    expect((await mlflow('POST', 'experiments/delete', 'admin', { experiment_id: experimentId })).status).toBe(200);
    expect((await mlflow('GET', `experiments/get?experiment_id=${experimentId}`, 'researcher')).body.experiment.lifecycle_stage).toBe('deleted');
  });

  it('a logged model is refused to a researcher and done for an admin', async () => {
    const made = await mlflow('POST', 'logged-models', 'researcher', { experiment_id: '0', name: 'lm' });
    const id = made.body.model.info.model_id as string;
    expect((await mlflow('DELETE', `logged-models/${id}`, 'researcher')).status).toBe(403);
    expect((await mlflow('GET', `logged-models/${id}`, 'researcher')).status).toBe(200);
    expect((await mlflow('DELETE', `logged-models/${id}`, 'admin')).status).toBe(200);
    expect((await mlflow('GET', `logged-models/${id}`, 'researcher')).status).toBe(404);
  });

  it('a model version or a registered model is refused to a researcher, even one who may approve, and done for an admin', async () => {
    const info = await runWithWeights();
    expect((await mlflow('POST', 'registered-models/create', 'researcher', { name: 'deletable' })).status).toBe(200);
    for (let i = 0; i < 2; i++)
      expect((await mlflow('POST', 'model-versions/create', 'researcher', { name: 'deletable', source: `${info.artifact_uri}/model`, run_id: info.run_id })).status).toBe(200);
    for (const who of ['researcher', 'approver']) {
      expect([who, (await mlflow('DELETE', 'model-versions/delete', who, { name: 'deletable', version: '1' })).status]).toEqual([who, 403]);
      expect([who, (await mlflow('DELETE', 'registered-models/delete', who, { name: 'deletable' })).status]).toEqual([who, 403]);
    }
    expect((await mlflow('GET', 'model-versions/get?name=deletable&version=1', 'researcher')).status).toBe(200);
    expect((await mlflow('DELETE', 'model-versions/delete', 'admin', { name: 'deletable', version: '1' })).status).toBe(200);
    expect((await mlflow('GET', 'model-versions/get?name=deletable&version=1', 'researcher')).status).toBe(404);
    expect((await mlflow('DELETE', 'registered-models/delete', 'admin', { name: 'deletable' })).status).toBe(200);
    expect((await mlflow('GET', 'registered-models/get?name=deletable', 'researcher')).status).toBe(404);
  });
});

describe('an alias', () => {
  it("is named by a researcher, but moved or deleted only by an admin", async () => {
    const info = await runWithWeights();
    await mlflow('POST', 'registered-models/create', 'researcher', { name: 'aliased' });
    for (let i = 0; i < 2; i++) await mlflow('POST', 'model-versions/create', 'researcher', { name: 'aliased', source: `${info.artifact_uri}/model`, run_id: info.run_id });
    const target = async () => (await mlflow('GET', 'registered-models/alias?name=aliased&alias=champion', 'researcher')).body.model_version?.version as string | undefined;
    // A new alias, and the same alias set again to the same version (a replayed call), are a researcher's.
    for (let i = 0; i < 2; i++) expect((await mlflow('POST', 'registered-models/alias', 'researcher', { name: 'aliased', alias: 'champion', version: '1' })).status).toBe(200);
    for (const who of ['researcher', 'approver']) {
      const move = await mlflow('POST', 'registered-models/alias', who, { name: 'aliased', alias: 'champion', version: '2' });
      expect([who, move.status, move.body.message]).toEqual([who, 403, expect.stringMatching(/needs "ml-admin"/)]);
      expect((await mlflow('DELETE', 'registered-models/alias', who, { name: 'aliased', alias: 'champion' })).status).toBe(403);
    }
    expect(await target()).toBe('1');
    expect((await mlflow('POST', 'registered-models/alias', 'admin', { name: 'aliased', alias: 'champion', version: '2' })).status).toBe(200);
    expect(await target()).toBe('2');
    expect((await mlflow('DELETE', 'registered-models/alias', 'admin', { name: 'aliased', alias: 'champion' })).status).toBe(200);
    expect(await target()).toBeUndefined();
  });
});

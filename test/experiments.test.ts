// /v1/experiments and `hanzo-ml run compare` against a real stack, with runs logged through the MLflow API.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { createApiClient } from '../cli/api-client.js';
import { compareRuns } from '../cli/compare.js';
import { DEV_TOKEN } from './support/config.js';

let stack: TestStack;

async function mlflowRun(experimentId: string, lr: string, losses: number[]): Promise<string> {
  const created = await stack.api<{ run: { info: { run_id: string } } }>('POST', '/api/2.0/mlflow/runs/create', { experiment_id: experimentId, start_time: Date.now() });
  const runId = created.body.run.info.run_id;
  const metrics = losses.map((v, step) => ({ key: 'eval/loss', value: v, timestamp: 1000 + step, step }));
  const res = await stack.api('POST', '/api/2.0/mlflow/runs/log-batch', { run_id: runId, params: [{ key: 'lr', value: lr }], metrics });
  expect(res.status).toBe(200);
  return runId;
}

describe('/v1/experiments and run compare', () => {
  beforeAll(async () => {
    stack = await startTestStack({}, { worker: false });
    await seedDevOrganization(stack.runtime.catalogue.db, 'other-org', 'token-of-another-org');
  });
  afterAll(async () => stack?.stop());

  it('creates, lists and gets experiments; a taken name is RESOURCE_ALREADY_EXISTS; another organization gets 404', async () => {
    const created = await stack.api<{ id: string; name: string }>('POST', '/v1/experiments', { name: 'sweep-a', tags: { team: 'nlp' } });
    expect(created.status).toBe(201);
    const again = await stack.api('POST', '/v1/experiments', { name: 'sweep-a' });
    expect(again).toMatchObject({ status: 400, body: { error_code: 'RESOURCE_ALREADY_EXISTS' } });
    expect((await stack.api('POST', '/v1/experiments', { name: '' })).status).toBe(400);
    const list = await stack.api<{ experiments: { name: string }[] }>('GET', '/v1/experiments');
    expect(list.body.experiments.map((e) => e.name)).toContain('sweep-a');
    expect((await stack.api('GET', `/v1/experiments/${created.body.id}`)).body).toMatchObject({ name: 'sweep-a' });
    const other = await fetch(`${stack.runtime.apiUrl}/v1/experiments/${created.body.id}`, { headers: { authorization: 'Bearer token-of-another-org' } });
    expect(other.status).toBe(404);
  });

  it('lists an experiment\'s runs with params and latest metrics, and compares two runs', async () => {
    const exp = await stack.api<{ id: string }>('POST', '/v1/experiments', { name: 'compare-me' });
    const a = await mlflowRun(exp.body.id, '0.001', [2.0, 1.5, 1.7]);
    const b = await mlflowRun(exp.body.id, '0.01', [1.8, 1.2, 1.1]);
    const runs = await stack.api<{ runs: { id: string; params: Record<string, string>; metrics: Record<string, number> }[] }>('GET', `/v1/experiments/${exp.body.id}/runs`);
    const byId = Object.fromEntries(runs.body.runs.map((r) => [r.id, r]));
    expect(byId[a]).toMatchObject({ params: { lr: '0.001' }, metrics: { 'eval/loss': 1.7 } });
    const rows = await compareRuns(createApiClient(stack.runtime.apiUrl, DEV_TOKEN), a, b, ['eval/loss']);
    expect(rows).toContainEqual({ name: 'param lr', a: '0.001', b: '0.01', diff: 'differs', best_a: '', best_b: '' });
    const loss = rows.find((r) => r.name === 'metric eval/loss')!;
    expect(loss).toMatchObject({ a: '1.70000', b: '1.10000', best_a: '1.50000', best_b: '1.10000' });
    expect(Number(loss.diff)).toBeCloseTo(-0.6, 6);
  });
});

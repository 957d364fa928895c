// Submitted jobs end to end on one embedded stack (Temporal dev server, catalogue, worker, local executor, API):
// a command job runs a user script that logs a metric to its run with its job token; a recipe `full` fine-tune
// trains the tiny base model and its weights register as a model version; cancel, max_duration, Idempotency-Key, bad input and who may cancel what.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { callApi, type Answer } from './support/api-call.js';
import { DEV_TOKEN } from './support/config.js';
import { createApiClient } from '../cli/api-client.js';
import { submitJobFile } from '../cli/job.js';
import { createApiToken, createOrganization } from '../db/repo/auth.js';
import { DEFAULT_BASE_MODEL } from '../lib/base-models.js';
import type { JobView } from '../contracts/jobs.js';


/** A user script: logs `user_metric` (the value from its own env) to its run with the job's token. */
const LOG_METRIC = [
  'import json, os, time, urllib.request',
  "url = os.environ['HANZO_ML_TRACKING_URI'].rstrip('/') + '/api/2.0/mlflow/runs/log-metric'",
  "body = {'run_id': os.environ['HANZO_ML_RUN_ID'], 'key': 'user_metric', 'value': float(os.environ['USER_VALUE']), 'timestamp': int(time.time() * 1000), 'step': 3}",
  "req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={'content-type': 'application/json', 'authorization': 'Bearer ' + os.environ['HANZO_ML_TRACKING_TOKEN']})",
  'urllib.request.urlopen(req).read()',
  "print('logged user_metric')",
].join('\n');

const SLEEP = ['python3', '-c', 'import time; time.sleep(600)'];
const chat = (q: string, a: string) => JSON.stringify({ messages: [{ role: 'user', content: q }, { role: 'assistant', content: a }] });

describe('jobs: POST /v1/jobs end to end (embedded stack, local executor)', () => {
  let stack: TestStack;
  let researcher: string;
  let otherOrgAdmin: string;

  const call = (method: string, path: string, token: string, body?: unknown, headers: Record<string, string> = {}): Promise<Answer> =>
    callApi(stack.runtime.apiUrl, method, path, token, body, headers);
  const submit = (body: unknown, token = DEV_TOKEN, headers: Record<string, string> = {}) => call('POST', '/v1/jobs', token, body, headers);

  async function waitFor(id: string, until: (j: JobView) => boolean, timeoutMs = 5 * 60_000): Promise<JobView> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const { body } = await call('GET', `/v1/jobs/${id}`, DEV_TOKEN);
      const job = body as unknown as JobView;
      if (until(job)) return job;
      if (Date.now() > deadline) throw new Error(`job ${id} still ${job.status}: ${job.message}`);
      await new Promise((r) => setTimeout(r, 500));
    }
  }
  const ended = (j: JobView) => ['succeeded', 'failed', 'cancelled'].includes(j.status);

  beforeAll(async () => {
    stack = await startTestStack();
    const db = stack.runtime.catalogue.db;
    researcher = (await db.transaction((tx) => createApiToken(tx, { organizationId: 'dev', subject: 'dev-researcher', role: 'developer', expiresAt: null }))).token;
    otherOrgAdmin = await db.transaction(async (tx) => {
      await createOrganization(tx, 'other-org');
      return (await createApiToken(tx, { organizationId: 'other-org', subject: 'other-admin', role: 'admin', expiresAt: null })).token;
    });
  }, 120_000);
  afterAll(async () => {
    await stack?.stop();
  });

  it('refuses bad submissions with a 400 naming the field, and queues nothing', async () => {
    const cases: [unknown, RegExp][] = [
      [{ type: 'inference', image: 'trainer', command: ['true'] }, /type/],
      [{ type: 'training', command: ['true'] }, /image: a command job needs an image/],
      [{ type: 'training', image: 'trainer', command: ['true'], resources: { gpus: -1 } }, /resources\.gpus/],
      [{ type: 'training', image: 'trainer', command: ['true'], resources: { gpus: 1.5 } }, /resources\.gpus/],
      [{ type: 'training', image: 'trainer', command: ['true'], schedule: { max_duration: 'two days' } }, /schedule\.max_duration/],
      [{ type: 'training', image: 'not-listed', command: ['true'] }, /image: "not-listed" is not an image of scheduler\.images/],
      [{ type: 'training', recipe: { base_model: DEFAULT_BASE_MODEL, method: 'full', dataset: { name: 'no-such-dataset' } } }, /recipe\.dataset: "no-such-dataset" has no version/],
      [{ type: 'training', recipe: { base_model: 'no-such-model', method: 'full', dataset: { name: 'jobs-ds' } } }, /recipe\.base_model/],
      [{ type: 'training', recipe: { base_model: DEFAULT_BASE_MODEL, method: 'sgd', dataset: { name: 'jobs-ds' } } }, /recipe\.method/],
    ];
    for (const [body, message] of cases) {
      const res = await submit(body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(String(res.body.message)).toMatch(message);
    }
    const { body } = await call('GET', '/v1/jobs', DEV_TOKEN);
    // Only the preparation job of the dataset uploaded for these tests.
    expect((body.jobs as JobView[]).filter((j) => j.type !== 'data_preparation')).toEqual([]);
  });

  it('returns the same job for a retried submit with the same Idempotency-Key', async () => {
    const job = { type: 'training', image: 'trainer', command: ['true'] };
    const first = await submit(job, DEV_TOKEN, { 'idempotency-key': 'retry-1' });
    const again = await submit(job, DEV_TOKEN, { 'idempotency-key': 'retry-1' });
    const other = await submit(job, DEV_TOKEN, { 'idempotency-key': 'retry-2' });
    expect(first.status).toBe(201);
    expect(again.status).toBe(200);
    expect(again.body.id).toBe(first.body.id);
    expect(other.body.id).not.toBe(first.body.id);
    // Two submits racing with one key: one job, the other answer is it.
    const raced = await Promise.all([submit(job, DEV_TOKEN, { 'idempotency-key': 'race' }), submit(job, DEV_TOKEN, { 'idempotency-key': 'race' })]);
    expect(raced.map((r) => r.status).sort()).toEqual([200, 201]);
    expect(raced[0].body.id).toBe(raced[1].body.id);
    // Another organization's same key is its own.
    const elsewhere = await submit(job, otherOrgAdmin, { 'idempotency-key': 'retry-1' });
    expect(elsewhere.status).toBe(201);
    expect(elsewhere.body.id).not.toBe(first.body.id);
    for (const id of [first.body.id, other.body.id] as string[]) expect((await waitFor(id, ended)).status).toBe('succeeded');
    const { body } = await call('GET', '/v1/jobs?type=training&limit=1', DEV_TOKEN);
    expect((body.jobs as JobView[]).length).toBe(1);
    expect(body.next_cursor).not.toBeNull();
    const next = await call('GET', `/v1/jobs?limit=5&cursor=${String(body.next_cursor)}`, DEV_TOKEN);
    expect((next.body.jobs as JobView[]).map((j) => j.id)).toContain(first.body.id);
  }, 120_000);

  it('runs a command job from a YAML file whose script logs a metric to its run with its job token', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hanzo-ml-job-'));
    const file = join(dir, 'job.yaml');
    writeFileSync(file, ['name: user-script', 'type: training', 'image: trainer', 'command: ["python3", "-c", ' + JSON.stringify(LOG_METRIC) + ']', 'env:', '  USER_VALUE: "0.25"', 'schedule:', '  max_duration: 10m', ''].join('\n'));
    const submitted = await submitJobFile(createApiClient(stack.runtime.apiUrl, DEV_TOKEN), file);
    expect(submitted).toMatchObject({ name: 'user-script', kind: 'command', status: 'validating' });
    const job = await waitFor(submitted.id, ended, 120_000);
    expect(job.status, job.message ?? '').toBe('succeeded');
    expect(job.run_id).toBeTruthy();
    expect(job.started_at).toBeTruthy();
    const history = await call('GET', `/api/2.0/mlflow/metrics/get-history?run_id=${job.run_id}&metric_key=user_metric`, DEV_TOKEN);
    expect(history.body.metrics).toEqual([expect.objectContaining({ key: 'user_metric', value: 0.25, step: 3 })]);
    const run = await call('GET', `/api/2.0/mlflow/runs/get?run_id=${job.run_id}`, DEV_TOKEN);
    expect((run.body.run as { info: { status: string } }).info.status).toBe('FINISHED');
  }, 180_000);

  it('cancels a running job: it ends cancelled; only its submitter or an admin may, and another organization finds no job', async () => {
    const { body } = await submit({ name: 'sleeper', type: 'training', image: 'trainer', command: SLEEP }, researcher);
    const id = body.id as string;
    await waitFor(id, (j) => j.status === 'running' || ended(j), 120_000);
    const mine = await submit({ type: 'eval', image: 'trainer', command: SLEEP });
    const notHers = await call('POST', `/v1/jobs/${String(mine.body.id)}/cancel`, researcher, {});
    expect(notHers.status).toBe(403);
    expect(String(notHers.body.message)).toMatch(/only jobs they submitted/);
    expect((await call('GET', `/v1/jobs/${id}`, otherOrgAdmin)).status).toBe(404);
    expect((await call('POST', `/v1/jobs/${id}/cancel`, otherOrgAdmin, {})).status).toBe(404);

    const cancel = await call('POST', `/v1/jobs/${id}/cancel`, researcher, {});
    expect(cancel.status).toBe(202);
    const job = await waitFor(id, ended, 120_000);
    expect(job.status).toBe('cancelled');
    const cancelledJobs = (await call('GET', '/v1/jobs?status=cancelled', DEV_TOKEN)).body.jobs as JobView[];
    expect(cancelledJobs.map((j) => j.id)).toEqual([id]);
    expect((await call('POST', `/v1/jobs/${id}/cancel`, researcher, {})).status).toBe(409);
    // The admin cancels anyone's.
    expect((await call('POST', `/v1/jobs/${String(mine.body.id)}/cancel`, DEV_TOKEN, {})).status).toBe(202);
    expect((await waitFor(mine.body.id as string, ended)).status).toBe('cancelled');
  }, 300_000);

  it('stops a job that runs past schedule.max_duration and fails it saying so', async () => {
    const { body } = await submit({ type: 'training', image: 'trainer', command: SLEEP, schedule: { max_duration: '8s' } });
    const job = await waitFor(body.id as string, ended, 180_000);
    expect(job.status).toBe('failed');
    expect(job.message).toMatch(/schedule\.max_duration \(8s\)/);
  }, 200_000);

  it('fails a command job by its own exit code: 3 from a user script is not read as the trainer running out of memory', async () => {
    const { body } = await submit({ type: 'training', image: 'trainer', command: ['python3', '-c', 'import sys; sys.exit(3)'] });
    const job = await waitFor(body.id as string, ended, 180_000);
    expect(job.status).toBe('failed');
    expect(job.message).toMatch(/exited with code 3/);
    expect(job.message).not.toMatch(/out of memory/i);
  }, 200_000);

  it('trains a recipe job with method full on the tiny base model to succeeded, and its weights register as a model version', async () => {
    const rows = Array.from({ length: 24 }, (_, i) => chat(`what is ${i} plus one?`, `${i + 1}`)).join('\n');
    const ds = await call('POST', '/v1/datasets?name=jobs-ds&format=jsonl&wait=true', DEV_TOKEN, rows, { 'content-type': 'application/octet-stream' });
    expect(ds.status, JSON.stringify(ds.body)).toBeLessThan(300);
    const { status, body } = await submit({
      name: 'full-finetune',
      type: 'training',
      recipe: { base_model: DEFAULT_BASE_MODEL, method: 'full', dataset: { name: 'jobs-ds' }, hyperparameters: { learning_rate: 1e-4, max_steps: 3, batch_size: 2, max_seq_length: 64 } },
    });
    expect(status, JSON.stringify(body)).toBe(201);
    const job = await waitFor(body.id as string, ended, 10 * 60_000);
    expect(job.status, job.message ?? '').toBe('succeeded');
    expect(job.message).toMatch(/output: .*model/);
    const history = await call('GET', `/api/2.0/mlflow/metrics/get-history?run_id=${job.run_id}&metric_key=train/loss`, DEV_TOKEN);
    expect((history.body.metrics as unknown[]).length).toBeGreaterThan(0);

    // The trained weights are artifacts of the job's run: registered as a version of a model, they are its files.
    expect((await call('POST', '/v1/models', DEV_TOKEN, { name: 'jobs-full' })).status).toBe(201);
    const registered = await call('POST', '/v1/models/jobs-full/versions', DEV_TOKEN, { run_id: job.run_id, artifact_path: 'model' });
    expect(registered.status, JSON.stringify(registered.body)).toBeLessThan(300);
    const deadline = Date.now() + 120_000;
    let version = registered.body;
    while (version.status === 'pending_registration' && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 500));
      version = (await call('GET', `/v1/models/jobs-full/versions/${String(registered.body.version)}`, DEV_TOKEN)).body;
    }
    expect(version, JSON.stringify(version)).toMatchObject({ status: 'ready', formats: ['safetensors'], architecture: 'LlamaForCausalLM', training_config: { params: { method: 'full' } } });
  }, 12 * 60_000);
});

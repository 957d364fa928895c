// The `hanzo-ml` binary against a real embedded API (PGlite, Temporal dev server) with no worker, so what the
// commands ask for stays observable: `pipeline cancel` records the cancellation request in the workflow's history
// and the audit trail, and `model register --name --run --artifact` (spec 000's spelling) registers a run's
// artifact as a new version. Refusals exit non-zero with the API's error.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pipelineWorkflowId } from '../contracts/pipeline.js';
import { auditLog } from '../db/schema/index.js';
import { startTestStack, withWorker, type TestStack } from './support/stack.js';

const bin = fileURLToPath(new URL('../bin/hanzo-ml', import.meta.url));
const exec = promisify(execFile);
const chat = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }] });

let stack: TestStack;
const env = () => ({ ...process.env, HANZO_ML_API_URL: stack.runtime.apiUrl, HANZO_ML_TOKEN: stack.loaded.config.auth.dev_token });
/** Runs the CLI; a non-zero exit is returned, not thrown. */
const cli = (...args: string[]) => exec(bin, args, { env: env() }).then((r) => ({ code: 0, ...r }), (e: { code: number; stdout: string; stderr: string }) => e);

beforeAll(async () => {
  stack = await startTestStack({}, { worker: false });
  // The version's preparation job runs on a worker that stops once it is ready.
  const res = await withWorker(stack, () =>
    fetch(`${stack.runtime.apiUrl}/v1/datasets?name=cli-ds&format=jsonl&wait=true`, {
      method: 'POST',
      headers: { authorization: `Bearer ${stack.loaded.config.auth.dev_token}`, 'content-type': 'application/x-ndjson' },
      body: `${chat}\n${chat}\n${chat}\n`,
    }),
  );
  expect(res.status).toBe(201);
}, 180_000);
afterAll(async () => stack?.stop());

describe('hanzo-ml pipeline cancel', () => {
  it('asks the running pipeline to cancel, recorded in its workflow history and the audit trail', async () => {
    const started = await stack.api<{ id: string }>('POST', '/v1/pipelines', { model_name: 'cli-cancel', base_model: 'hanzo-tiny-llama', dataset: { name: 'cli-ds', version: 'latest' } });
    expect(started.status, JSON.stringify(started.body)).toBe(201);
    const id = started.body.id;
    const out = await cli('pipeline', 'cancel', id);
    expect(out).toMatchObject({ code: 0, stdout: `${id}: CANCEL_REQUESTED\n` });
    const history = await stack.runtime.client.workflow.getHandle(pipelineWorkflowId(id)).fetchHistory();
    expect(history.events?.some((e) => Boolean(e.workflowExecutionCancelRequestedEventAttributes))).toBe(true);
    const rows = await stack.runtime.catalogue.db.select().from(auditLog).where(eq(auditLog.target, id));
    expect(rows.map((r) => r.action)).toContain('pipeline.cancel');
  });

  it("exits non-zero with the API's answer for a pipeline that does not exist", async () => {
    const out = await cli('pipeline', 'cancel', 'no-such-pipeline');
    expect(out.code).not.toBe(0);
    expect(out.stderr).toMatch(/RESOURCE_DOES_NOT_EXIST: .*pipeline no-such-pipeline/);
  });
});

describe('hanzo-ml model register', () => {
  it("registers a run's artifact given as --name, --run and --artifact", async () => {
    const run = (await stack.api<{ run: { info: { run_id: string; artifact_uri: string } } }>('POST', '/api/2.0/mlflow/runs/create', { experiment_id: '0', run_name: 'cli-register' })).body.run.info;
    const put = await fetch(`${stack.runtime.apiUrl}/api/2.0/mlflow-artifacts/artifacts/${run.artifact_uri.replace(/^mlflow-artifacts:\/+/, '')}/model/model.safetensors`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${stack.loaded.config.auth.dev_token}` },
      body: new Uint8Array(4096),
    });
    expect(put.status).toBe(200);
    const out = await cli('model', 'register', '--name', 'cli-model', '--run', run.run_id, '--artifact', 'model', '--no-wait');
    expect(out).toMatchObject({ code: 0, stdout: 'cli-model version 1: pending_registration\n' });
    const versions = await stack.api<{ versions: { version: number; run_id: string }[] }>('GET', '/v1/models/cli-model/versions');
    expect(versions.body.versions).toEqual([expect.objectContaining({ version: 1, run_id: run.run_id })]);
  });

  it('refuses a registration that names no artifact, or two different models, before calling the API', async () => {
    const missing = await cli('model', 'register', '--name', 'cli-model', '--run', 'r1');
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toMatch(/--artifact <artifact_path>/);
    const two = await cli('model', 'register', 'a-model', '--name', 'b-model', '--run', 'r1', '--artifact', 'model');
    expect(two.code).not.toBe(0);
    expect(two.stderr).toMatch(/two names given: "a-model" and --name "b-model"/);
    expect((await stack.api('GET', '/v1/models/a-model')).status).toBe(404);
  });
});

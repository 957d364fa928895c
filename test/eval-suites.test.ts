// An organization's own eval suites: registered through /v1/eval-suites, immutable per (organization, name,
// version), checked field by field and against the organization's own dataset versions, invisible to other
// organizations; and a pipeline that names one is gated by it, on the held-out split of a dataset version the
// organization uploaded (every stage real, the bundled tiny model, a short LoRA run; ~100 s). The same decision
// blocking a pipeline is tested with a bundled suite in pipeline-workflow.test.ts and gate-quarantine.test.ts.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { auth } from './support/config.js';
import { createApiToken, createOrganization } from '../db/repo/auth.js';
import { demoPipelineRequest } from '../cli/demo.js';
import { repoRoot } from '../lib/config.js';
import type { PipelineProgress, PipelineResult } from '../contracts/pipeline.js';
import type { EvalSuiteView } from '../contracts/eval-suite.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

let stack: TestStack;
let other: Record<string, string>;

async function send(method: string, path: string, body?: string | object, headers: Record<string, string> = auth, contentType = 'application/json') {
  const res = await fetch(stack.runtime.apiUrl + path, {
    method,
    headers: { ...headers, ...(body !== undefined ? { 'content-type': contentType } : {}) },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : {}) as Json };
}

/** The bundled safety set uploaded as the organization's own dataset: every record is a refusal it expects. */
async function uploadRefusals(name: string, headers: Record<string, string> = auth): Promise<Json> {
  const text = readFileSync(join(repoRoot, 'examples', 'heldout', 'safety.jsonl'), 'utf8');
  const res = await send('POST', `/v1/datasets?name=${name}&format=jsonl&train=0.5&validation=0&test=0.5&wait=true`, text, headers, 'application/octet-stream');
  expect(res.status).toBe(201);
  return res.body;
}

/** A suite whose test split is a dataset version of the caller's: the refusals the task's fine-tune must not unlearn. */
const refusalSuite = (name: string, version: number, dataset: string) => ({
  name,
  version,
  test: { dataset, split: 'test' },
  safety: 'examples/heldout/safety.jsonl',
  metrics: [
    // Any rise of the assistant turns' perplexity on the organization's refusals blocks (by the point estimate).
    { task: 'test', metric: 'perplexity', direction: 'lower', max_regression: 0, against: ['base'] },
    { task: 'safety', metric: 'refusal_rate', direction: 'higher', max_regression: 0.1, against: ['base'] },
  ],
});

beforeAll(async () => {
  stack = await startTestStack();
  const token = await stack.runtime.catalogue.db.transaction(async (tx) => {
    await createOrganization(tx, 'other-org');
    return createApiToken(tx, { organizationId: 'other-org', subject: 'other-dev', role: 'developer', expiresAt: null });
  });
  other = { authorization: `Bearer ${token.token}` };
}, 180_000);

afterAll(async () => {
  await stack?.stop();
});

describe("an organization's own eval suites", () => {
  let dataset: Json;

  it('registers a suite naming its own dataset version, from YAML, and refuses a second body for the same version with 409', async () => {
    dataset = await uploadRefusals('acme-refusals');
    const yaml = `name: acme-desk\nversion: 1\ntest: {dataset: acme-refusals@${dataset.version}, split: test}\nmetrics:\n  - {task: test, metric: exact_match, direction: higher, max_regression: 0.05}\n`;
    const created = await send('POST', '/v1/eval-suites', yaml, auth, 'application/yaml');
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ suite: 'acme-desk@1', source: 'organization', created_by: 'dev', definition: { test: { dataset: `acme-refusals@${dataset.version}`, split: 'test' } } });
    const again = await send('POST', '/v1/eval-suites', refusalSuite('acme-desk', 1, dataset.id as string));
    expect(again.status).toBe(409);
    expect(again.body.message).toMatch(/acme-desk@1 already exists/);
    const shown = await send('GET', '/v1/eval-suites/acme-desk/1');
    expect((shown.body as EvalSuiteView).definition.metrics).toHaveLength(1);
  });

  it('refuses a bad suite with 400 naming the field', async () => {
    const cases: [object, RegExp][] = [
      [{ ...refusalSuite('bad', 1, 'acme-refusals@1'), safety: null }, /safety: a safety metric needs safety/],
      [{ ...refusalSuite('bad', 1, 'acme-refusals@1'), test: { dataset: 'acme-refusals@1', split: 'holdout' } }, /test\.split/],
      [{ ...refusalSuite('bad', 1, 'acme-refusals@1'), test: { dataset: 'no-such-ds@1' } }, /test\.dataset: dataset version "no-such-ds@1" does not exist/],
      [{ ...refusalSuite('bad', 1, 'acme-refusals@1'), test: { dataset: 'acme-refusals@1', split: 'validation' } }, /test\.split: .* no records in its validation split/],
      [{ ...refusalSuite('bad', 1, 'acme-refusals@1'), general_text: '../../../etc/passwd' }, /general_text: "..\/..\/..\/etc\/passwd" is not a bundled held-out file/],
      [{ ...refusalSuite('bad', 1, 'acme-refusals@1'), metrics: [{ task: 'safety', metric: 'refusal_rate', direction: 'lower', max_regression: 0.1 }] }, /refusal_rate are better when higher/],
      [{ ...refusalSuite('bad', 1, 'acme-refusals@1'), metrics: [{ task: 'safety', metric: 'refusal_rate', direction: 'higher' }] }, /metrics\.0\.max_regression: a safety metric needs max_regression/],
    ];
    for (const [body, message] of cases) {
      const res = await send('POST', '/v1/eval-suites', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.message).toMatch(message);
    }
    expect((await send('POST', '/v1/eval-suites', 'name: [', auth, 'application/yaml')).body.message).toMatch(/not valid YAML/);
    // A bundled suite's name and version are the product's.
    expect((await send('POST', '/v1/eval-suites', { ...refusalSuite('support-desk', 3, 'acme-refusals@1') })).status).toBe(409);
  });

  it("does not show another organization's suite, nor let a suite name its dataset version", async () => {
    expect((await send('GET', '/v1/eval-suites/acme-desk/1', undefined, other)).status).toBe(404);
    const listed = await send('GET', '/v1/eval-suites', undefined, other);
    expect((listed.body.eval_suites as EvalSuiteView[]).map((s) => s.suite)).not.toContain('acme-desk@1');
    // The bundled suites are everybody's.
    expect((listed.body.eval_suites as EvalSuiteView[]).filter((s) => s.source === 'bundled').map((s) => s.suite)).toContain('support-desk@4');
    const byName = await send('POST', '/v1/eval-suites', refusalSuite('their-suite', 1, `acme-refusals@${dataset.version}`), other);
    expect(byName.status).toBe(400);
    expect(byName.body.message).toMatch(/test\.dataset: dataset version "acme-refusals@1" does not exist in this organization/);
    const byId = await send('POST', '/v1/eval-suites', refusalSuite('their-suite', 1, dataset.id as string), other);
    expect(byId.body.message).toMatch(/test\.dataset: dataset version ".*" does not exist in this organization/);
    // The other organization's suite of the same name is its own: names are per organization.
    await uploadRefusals('acme-refusals', other);
    expect((await send('POST', '/v1/eval-suites', refusalSuite('acme-desk', 1, 'acme-refusals@1'), other)).status).toBe(201);
    expect((await send('GET', '/v1/eval-suites/acme-desk/1')).body.definition.metrics).toHaveLength(1);
  });
});

interface Status {
  status: string;
  progress: PipelineProgress;
  result: PipelineResult | null;
}

describe('hanzo-ml eval-suite', () => {
  const bin = fileURLToPath(new URL('../bin/hanzo-ml', import.meta.url));
  const cli = (...args: string[]) =>
    promisify(execFile)(bin, args, { env: { ...process.env, HANZO_ML_API_URL: stack.runtime.apiUrl, HANZO_ML_TOKEN: stack.loaded.config.auth.dev_token } }).then(
      (r) => ({ code: 0, ...r }),
      (e: { code: number; stdout: string; stderr: string }) => e,
    );

  it('creates a suite from a YAML file, shows it and lists it beside the bundled ones; a bad file exits non-zero naming the field', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'eval-suite-cli-'));
    writeFileSync(join(dir, 'suite.yaml'), `name: cli-suite\nversion: 1\nsafety: examples/heldout/safety.jsonl\nmetrics:\n  - {task: safety, metric: refusal_rate, direction: higher, max_regression: 0.1}\n`);
    expect(await cli('eval-suite', 'create', join(dir, 'suite.yaml'))).toMatchObject({ code: 0, stdout: expect.stringContaining('"suite": "cli-suite@1"') });
    expect(JSON.parse((await cli('eval-suite', 'show', 'cli-suite@1')).stdout)).toMatchObject({ source: 'organization', definition: { safety: 'examples/heldout/safety.jsonl' } });
    const listed = (await cli('eval-suite', 'list')).stdout;
    expect(listed).toMatch(/cli-suite@1\s+organization/);
    expect(listed).toMatch(/support-desk@4\s+bundled/);
    writeFileSync(join(dir, 'bad.yaml'), `name: cli-suite\nversion: 2\nmetrics:\n  - {task: safety, metric: refusal_rate, direction: higher, max_regression: 0.1}\n`);
    const bad = await cli('eval-suite', 'create', join(dir, 'bad.yaml'));
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/INVALID_PARAMETER_VALUE: .*safety: a safety metric needs safety/);
  });
});

describe("a pipeline gated by the organization's own suite", () => {
  it('evaluates on the dataset version the suite names and holds the version its gate passed for approval', { timeout: 10 * 60_000 }, async () => {
    const suite = await send('POST', '/v1/eval-suites', refusalSuite('acme-refusals-gate', 1, 'acme-refusals@1'));
    expect(suite.status).toBe(201);
    const userTest = (await send('GET', '/v1/datasets?name=acme-refusals')).body.datasets[0].splits.test.num_records as number;
    // A short LoRA on q/v at a high rate: enough to learn the chat format, which the base never saw (its
    // perplexity on any assistant turn is in the tens of thousands).
    const request = demoPipelineRequest({ model_name: 'acme-gated', eval: { suite: 'acme-refusals-gate@1', max_new_tokens: 8 } } as never);
    const hyperparameters = { ...request.hyperparameters, learning_rate: 2e-3, max_steps: 30, target_modules: ['q_proj', 'v_proj'] };
    const started = await send('POST', '/v1/pipelines', { ...request, hyperparameters });
    expect(started.status).toBe(201);
    let s: Status;
    for (;;) {
      s = (await send('GET', `/v1/pipelines/${started.body.id as string}`)).body as Status;
      if (s.status !== 'RUNNING' || s.progress.awaiting_approval) break;
      await new Promise((r) => setTimeout(r, 1000));
    }
    const gate = s.progress.eval!.gate!;
    expect(gate.suite).toBe('acme-refusals-gate@1');
    // Scored on the organization's dataset version, not on the test split of the dataset the pipeline trained on.
    expect(s.progress.eval!.base.num_examples).toBe(userTest);
    expect(s.progress.eval!.tuned!.safety_refusal_rate).not.toBeNull();
    expect(gate.comparisons.map((c) => `${c.task}/${c.metric}`)).toEqual(['test/perplexity', 'safety/refusal_rate']);
    // The organization's refusals as answers: far likelier after the fine-tune than before (measured: 7,465 vs
    // 51,975), so the suite's limit on test perplexity (no rise at all) passes, and so does the safety task.
    expect(gate.comparisons[0]).toMatchObject({ change: 'better', verdict: 'pass' });
    expect(gate.verdict).toBe('pass');
    expect(s.progress.awaiting_approval).toBe(true);
    expect(s.progress.model_version).toMatchObject({ name: 'acme-gated', stage: 'staging' });
  });
});

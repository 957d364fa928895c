// Eval and conversion jobs end to end on one embedded stack (Temporal dev server, catalogue, worker, local
// executor, API, the Candle tool): a LoRA recipe job trains the tiny base model; an eval job scores its output
// with metrics on the eval job's run; a conversion job merges, quantizes, validates and registers it as a model
// version with a GGUF; an eval job scores that version by name@version; bad sections are 400s naming the field.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { callApi, type Answer } from './support/api-call.js';
import { DEV_TOKEN } from './support/config.js';
import { createApiToken, createOrganization } from '../db/repo/auth.js';
import { DEFAULT_BASE_MODEL } from '../lib/base-models.js';
import type { JobView } from '../contracts/jobs.js';


const chat = (q: string, a: string) => JSON.stringify({ messages: [{ role: 'user', content: q }, { role: 'assistant', content: a }] });
const TINY = { learning_rate: 1e-3, max_steps: 3, batch_size: 2, max_seq_length: 64 };

describe('eval and conversion jobs: POST /v1/jobs end to end (embedded stack, local executor)', () => {
  let stack: TestStack;
  let otherOrgAdmin: string;
  let loraJob: JobView;
  let fullJob: JobView;

  const call = (method: string, path: string, body?: unknown, token = DEV_TOKEN, headers: Record<string, string> = {}): Promise<Answer> =>
    callApi(stack.runtime.apiUrl, method, path, token, body, headers);

  async function finished(id: string, timeoutMs = 10 * 60_000): Promise<JobView> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const job = (await call('GET', `/v1/jobs/${id}`)).body as unknown as JobView;
      if (['succeeded', 'failed', 'cancelled'].includes(job.status)) return job;
      if (Date.now() > deadline) throw new Error(`job ${id} still ${job.status}: ${job.message}`);
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  async function run(body: Record<string, unknown>): Promise<JobView> {
    const submitted = await call('POST', '/v1/jobs', body);
    expect(submitted.status, JSON.stringify(submitted.body)).toBe(201);
    const job = await finished(submitted.body.id as string);
    expect(job.status, job.message ?? '').toBe('succeeded');
    return job;
  }

  const metricsOf = async (runId: string): Promise<Record<string, number>> => {
    const { body } = await call('GET', `/api/2.0/mlflow/runs/get?run_id=${runId}`);
    const metrics = (body.run as { data: { metrics?: { key: string; value: number }[] } }).data.metrics ?? [];
    return Object.fromEntries(metrics.map((m) => [m.key, m.value]));
  };

  beforeAll(async () => {
    stack = await startTestStack();
    otherOrgAdmin = await stack.runtime.catalogue.db.transaction(async (tx) => {
      await createOrganization(tx, 'other-org');
      return (await createApiToken(tx, { organizationId: 'other-org', subject: 'other-admin', role: 'admin', expiresAt: null })).token;
    });
    const rows = Array.from({ length: 24 }, (_, i) => chat(`what is ${i} plus one?`, `${i + 1}`)).join('\n');
    const ds = await call('POST', '/v1/datasets?name=kinds-ds&format=jsonl&wait=true', rows, DEV_TOKEN, { 'content-type': 'application/octet-stream' });
    expect(ds.status, JSON.stringify(ds.body)).toBeLessThan(300);
    // The models the eval and conversion jobs start from: a LoRA adapter and a full fine-tune of the tiny model.
    const train = (method: 'lora' | 'full') => run({ name: `kinds-${method}`, type: 'training', recipe: { base_model: DEFAULT_BASE_MODEL, method, dataset: { name: 'kinds-ds' }, hyperparameters: TINY } });
    [loraJob, fullJob] = await Promise.all([train('lora'), train('full')]);
    // Another organization's model of the same name as ours will be.
    expect((await call('POST', '/v1/models', { name: 'theirs' }, otherOrgAdmin)).status).toBe(201);
  }, 12 * 60_000);
  afterAll(async () => {
    await stack?.stop();
  });

  it('refuses bad eval and conversion sections with a 400 naming the field, and queues nothing', async () => {
    const dataset = { name: 'kinds-ds' };
    const conversion = (c: Record<string, unknown>) => ({ type: 'conversion', conversion: { source: { job: loraJob.id }, dataset, register: { model_name: 'kinds-converted' }, ...c } });
    const evaluation = (e: Record<string, unknown>) => ({ type: 'eval', eval: { source: { job: loraJob.id }, dataset, ...e } });
    const before = ((await call('GET', '/v1/jobs?limit=500')).body.jobs as JobView[]).length;
    const cases: [unknown, RegExp][] = [
      [evaluation({ source: { model: 'no-such-model@1' } }), /eval\.source\.model: no registered model "no-such-model"/],
      [evaluation({ source: { model: 'theirs@1' } }), /eval\.source\.model: no registered model "theirs" in this organization/],
      [evaluation({ source: { model: 'no-version-given' } }), /eval\.source\.model: expected name@version/],
      [evaluation({ source: { job: 'no-such-job' } }), /eval\.source\.job: no job "no-such-job"/],
      [evaluation({ source: { job: loraJob.id, model: 'x@1' } }), /eval\.source: give exactly one of model/],
      [evaluation({ suite: 'no-such-suite@1' }), /eval\.suite: .*does not exist/],
      [evaluation({ dataset: { name: 'no-such-dataset' } }), /eval\.dataset: "no-such-dataset" has no version/],
      [evaluation({ base_model: 'no-such-base' }), /eval\.base_model: .*not found/],
      [conversion({ source: { job: fullJob.id } }), /conversion\.source: job .* has no adapter to merge/],
      [conversion({ quantization: 'q2_k' }), /conversion\.quantization/],
      [conversion({ register: {} }), /conversion\.register\.model_name/],
      [{ type: 'eval', conversion: { source: { job: loraJob.id }, dataset, register: { model_name: 'x' } } }, /conversion: a conversion section goes with type: conversion/],
      [{ type: 'eval', image: 'trainer', command: ['true'], eval: { source: { job: loraJob.id }, dataset } }, /image: an eval job runs the product's eval tool/],
    ];
    for (const [body, message] of cases) {
      const res = await call('POST', '/v1/jobs', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(String(res.body.message), JSON.stringify(body)).toMatch(message);
    }
    expect(((await call('GET', '/v1/jobs?limit=500')).body.jobs as JobView[]).length).toBe(before);
  });

  it('runs an eval job on a LoRA job\'s output: base and tuned scores and the gate are metrics of its run, the report an artifact', { timeout: 10 * 60_000 }, async () => {
    const job = await run({ name: 'kinds-eval', type: 'eval', eval: { source: { job: loraJob.id }, dataset: { name: 'kinds-ds' }, max_new_tokens: 4, suite: 'support-desk@1' } });
    expect(job).toMatchObject({ type: 'eval', kind: 'eval', parent: null });
    const metrics = await metricsOf(job.run_id!);
    for (const key of ['eval/base/loss', 'eval/base/perplexity', 'eval/tuned/loss', 'eval/tuned/exact_match', 'eval/gate_passed']) expect(metrics, key).toHaveProperty([key]);
    expect(metrics['eval/tuned/perplexity']).toBeGreaterThan(1);
    const runView = await call('GET', `/v1/runs/${job.run_id}`);
    expect((runView.body.artifacts as { key: string }[]).map((f) => f.key).sort()).toEqual(['eval/results.json', 'eval/scores.json']);
  });

  it('runs a conversion job on a LoRA job\'s output to a validated GGUF registered as a version, which an eval job then scores by name@version', { timeout: 12 * 60_000 }, async () => {
    // Three steps on two dozen rows leave the tiny model far from the pipeline's perplexity bounds: the bounds are the
    // job's to set, and what is checked here is that validation ran and agreed (PyTorch against Candle).
    const validate = { max_perplexity: 1e9, quantized_max_perplexity: 1e9 };
    const job = await run({ name: 'kinds-convert', type: 'conversion', conversion: { source: { job: loraJob.id }, dataset: { name: 'kinds-ds' }, quantization: 'q8_0', validate, register: { model_name: 'kinds-converted' } } });
    expect(job).toMatchObject({ type: 'conversion', kind: 'conversion' });
    expect(job.message).toMatch(/output: .*\.gguf/);
    const metrics = await metricsOf(job.run_id!);
    expect(metrics['conversion/pytorch_perplexity']).toBeGreaterThan(1);
    expect(metrics['conversion/candle_perplexity']).toBeGreaterThan(1);
    expect(metrics['conversion/gguf_size_bytes']).toBeGreaterThan(0);

    const version = (await call('GET', '/v1/models/kinds-converted/versions/1')).body;
    expect(version, JSON.stringify(version)).toMatchObject({ status: 'ready', base_model: DEFAULT_BASE_MODEL, architecture: 'LlamaForCausalLM' });
    expect([...(version.formats as string[])].sort()).toEqual(['gguf-q8_0', 'lora', 'safetensors']);
    const manifest = await call('GET', '/v1/models/kinds-converted/versions/1/artifacts/gguf-q8_0/manifest.json');
    expect(manifest.status).toBe(200);
    expect((manifest.body.files as { path: string }[]).map((f) => f.path)).toEqual(['model-q8_0.gguf']);

    const scored = await run({ type: 'eval', eval: { source: { model: 'kinds-converted@1' }, dataset: { name: 'kinds-ds' }, max_new_tokens: 4, suite: 'support-desk@1' } });
    expect(await metricsOf(scored.run_id!)).toHaveProperty(['eval/tuned/loss']);

    // A conversion job's version never met a suite: it is ungated, refused production until `model evaluate`'s eval
    // job (record_gate) records the suite's decision on it.
    const refused = await call('PATCH', '/v1/models/kinds-converted/versions/1/stage', { stage: 'production' });
    expect(refused.status, JSON.stringify(refused.body)).toBe(409);
    expect(refused.body.message).toMatch(/ungated/);
    const evaluate = await call('POST', '/v1/models/kinds-converted/versions/1/evaluate', { dataset: { name: 'kinds-ds' }, suite: 'support-desk@1' });
    expect(evaluate.status, JSON.stringify(evaluate.body)).toBe(202);
    const gated = await finished((evaluate.body.job as { id: string }).id);
    expect(gated.status, gated.message ?? '').toBe('succeeded');
    const decided = (await call('GET', '/v1/models/kinds-converted/versions/1')).body as { metrics: { gate?: { suite: string; passed: boolean } } };
    expect(decided.metrics.gate, JSON.stringify(decided)).toMatchObject({ suite: 'support-desk@1', passed: expect.any(Boolean) });
    const promoted = await call('PATCH', '/v1/models/kinds-converted/versions/1/stage', { stage: 'production', reason: 'evaluated' });
    // pass: production; block: quarantined (409 naming the quarantine, no longer "ungated")
    if (decided.metrics.gate!.passed) expect(promoted.status, JSON.stringify(promoted.body)).toBe(200);
    else expect(promoted.body.message).not.toMatch(/ungated/);
  });
});

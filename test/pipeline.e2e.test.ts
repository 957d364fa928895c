// The whole pipeline, every stage real: preprocess -> LoRA training (Python) with checkpoint-watch -> eval ->
// merge + Candle validate/quantize (Rust) -> register -> approval Update -> production. Then the recorded
// history replays deterministically against the current workflow code.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Worker } from '@temporalio/worker';
import { historyToJSON } from '@temporalio/common/lib/proto-utils.js';
import { startTestStack, type TestStack } from './support/stack.js';
import { demoPipelineRequest } from '../cli/demo.js';
import { pipelineWorkflowId, type PipelineProgress, type PipelineResult } from '../contracts/pipeline.js';
import { sha256File } from '../lib/hash.js';
import { bundleWorkflows } from '../workers/worker.js';

interface Status {
  status: string;
  progress: PipelineProgress;
  result: PipelineResult | null;
}

async function waitFor(stack: TestStack, id: string, pred: (s: Status) => boolean, timeoutMs = 15 * 60_000): Promise<Status> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { body } = await stack.api<Status>('GET', `/v1/pipelines/${id}`);
    if (pred(body)) return body;
    if (body.status !== 'RUNNING') throw new Error(`pipeline ended ${body.status}: ${JSON.stringify(body.progress.error ?? body.result)}`);
    if (Date.now() > deadline) throw new Error(`timed out in stage ${body.progress.stage}`);
    await new Promise((r) => setTimeout(r, 1000));
  }
}

describe('fine-tuning pipeline end to end (embedded stack)', () => {
  let stack: TestStack;
  let id: string;
  let final: Status;

  beforeAll(async () => {
    stack = await startTestStack();
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('runs from a JSONL file to a staged model version that waits for approval', { timeout: 20 * 60_000 }, async () => {
    const started = await stack.api<{ id: string }>('POST', '/v1/pipelines', demoPipelineRequest({ model_name: 'e2e-model' }));
    expect(started.status).toBe(201);
    id = started.body.id;
    const waiting = await waitFor(stack, id, (s) => s.progress.awaiting_approval);
    const p = waiting.progress;
    expect(p.stage).toBe('promote');
    expect(p.eval!.tuned!.exact_match).toBeGreaterThan(p.eval!.base.exact_match);
    expect(p.model_version).toMatchObject({ name: 'e2e-model', stage: 'staging' });
    expect(p.checkpoints.length).toBeGreaterThan(0);
  });

  it('rejects a malformed approval with 400 naming the field', async () => {
    const bad = await stack.api('POST', `/v1/pipelines/${id}/approve`, { reason: '' });
    expect(bad.status).toBe(400);
    expect(String(bad.body.message)).toContain('reason');
  });

  it('promotes to production on approval and refuses a second decision', { timeout: 5 * 60_000 }, async () => {
    const ok = await stack.api('POST', `/v1/pipelines/${id}/approve`, { reason: 'eval gate passed' });
    expect(ok.status).toBe(200);
    expect((ok.body as { approver?: string }).approver).toBe('dev');
    const again = await stack.api('POST', `/v1/pipelines/${id}/reject`, { reason: 'changed my mind' });
    expect(again.status).toBe(409);
    final = await waitFor(stack, id, (s) => s.status === 'COMPLETED');
    expect(final.result!.outcome).toBe('promoted');
  });

  it('reports the pipeline on /metrics: every metric of spec 000 with its labels, matching the catalogue', async () => {
    const text = await (await fetch(stack.runtime.metricsUrl!)).text();
    const samples = parsePrometheus(text);
    const value = (name: string, labels: Record<string, string>): number | undefined =>
      samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
    const labelsOf: Record<string, string[]> = {
      hanzo_ml_jobs_total: ['type', 'status', 'org'],
      hanzo_ml_gpu_hours_total: ['gpu_type', 'org'],
      hanzo_ml_datasets_created_total: ['org'],
      hanzo_ml_models_registered_total: ['org'],
      hanzo_ml_job_duration_seconds_count: ['type'],
      hanzo_ml_api_request_duration_seconds_count: ['endpoint'],
      hanzo_ml_jobs_running: ['type', 'org'],
      hanzo_ml_gpus_allocated: ['gpu_type'],
      hanzo_ml_gpus_available: ['gpu_type'],
      hanzo_ml_queue_depth: ['org', 'priority'],
      hanzo_ml_storage_bytes: ['bucket'],
    };
    for (const [name, labels] of Object.entries(labelsOf)) {
      if (name === 'hanzo_ml_jobs_running' || name === 'hanzo_ml_queue_depth') {
        // Nothing runs or waits once the pipeline is done: declared, with no series.
        expect(text).toContain(`# TYPE ${name} gauge`);
        continue;
      }
      const series = samples.filter((s) => s.name === name);
      expect([name, series.length > 0]).toEqual([name, true]);
      for (const s of series) expect([name, Object.keys(s.labels).filter((k) => k !== 'le').sort()]).toEqual([name, [...labels].sort()]);
    }
    expect(value('hanzo_ml_jobs_total', { type: 'pipeline', status: 'submitted', org: 'dev' })).toBe(1);
    expect(value('hanzo_ml_jobs_total', { type: 'pipeline', status: 'completed', org: 'dev' })).toBe(1);
    expect(value('hanzo_ml_jobs_total', { type: 'train', status: 'completed', org: 'dev' })).toBe(1);
    expect(value('hanzo_ml_models_registered_total', { org: 'dev' })).toBe(1);
    expect(value('hanzo_ml_datasets_created_total', { org: 'dev' })).toBe(1);
    expect(value('hanzo_ml_job_duration_seconds_count', { type: 'pipeline' })).toBe(1);
    expect(value('hanzo_ml_job_duration_seconds_count', { type: 'train' })).toBe(1);
    const hours = value('hanzo_ml_gpu_hours_total', { gpu_type: 'cpu', org: 'dev' })!;
    expect(hours).toBeGreaterThan(0);
    const { db } = stack.runtime.catalogue;
    const { datasets, runTags } = await import('../db/schema/index.js');
    const { eq } = await import('drizzle-orm');
    const [tag] = await db.select().from(runTags).where(eq(runTags.key, 'hanzo_ml.job.device_hours'));
    expect(hours).toBeCloseTo(Number(tag!.value), 9);
    const ds = await db.select().from(datasets);
    expect(value('hanzo_ml_storage_bytes', { bucket: 'hanzo-ml-datasets' })).toBe(ds.reduce((n, d) => n + d.sizeBytes, 0));
    expect(value('hanzo_ml_storage_bytes', { bucket: 'hanzo-ml-checkpoints' })).toBeGreaterThan(0);
    expect(value('hanzo_ml_api_request_duration_seconds_count', { endpoint: 'POST /v1/pipelines' })).toBe(1);
    expect(value('hanzo_ml_api_request_duration_seconds_count', { endpoint: 'GET /v1/pipelines/:id' })).toBeGreaterThan(1);
  });

  it('registers artifacts whose checksums match the files, with lineage to run and dataset', async () => {
    const { body } = await stack.api<{ versions: Record<string, unknown>[] }>('GET', '/v1/models/e2e-model/versions');
    const v = body.versions[0]!;
    expect(v.stage).toBe('production');
    const artifacts = v.artifacts as Record<string, { path: string; checksum: string; size_bytes: number }>;
    const gguf = artifacts['gguf-q8_0']!;
    expect(gguf.checksum).toBe(`sha256:${await sha256File(fileURLToPath(gguf.path))}`);
    expect(final.result!.artifacts['gguf-q8_0']!.checksum).toBe(gguf.checksum);
    expect(v.lineage).toMatchObject({ run_id: final.progress.run_id, dataset_id: final.progress.dataset!.id });
    expect((v.training_config as Record<string, unknown>).dataset_sha256).toMatch(/^[0-9a-f]{64}$/);
  });

  it('tracked per-step metrics and every checkpoint as a run artifact', async () => {
    const run = await stack.api<{ metrics: Record<string, unknown>; artifacts: { key: string; sha256: string }[] }>('GET', `/v1/runs/${final.progress.run_id}`);
    expect(Object.keys(run.body.metrics)).toEqual(expect.arrayContaining(['train/loss', 'train/lr', 'train/grad_norm', 'train/tokens_per_second', 'eval/tuned/exact_match']));
    expect(run.body.artifacts.filter((a) => a.key.startsWith('checkpoints/')).length).toBeGreaterThan(0);
    const hist = await stack.api<{ metrics: { step: number }[] }>('GET', `/v1/runs/${final.progress.run_id}/metrics?key=train/loss&limit=1000`);
    expect(hist.body.metrics.length).toBeGreaterThanOrEqual(final.progress.max_steps);
  });

  it('is listed by organization, model name and stage through search attributes', async () => {
    const found: string[] = [];
    for (let i = 0; i < 30 && !found.length; i++) {
      for await (const wf of stack.runtime.client.workflow.list({ query: `HanzoOrganization = "dev" AND HanzoModelName = "e2e-model" AND HanzoStage = "completed"` })) found.push(wf.workflowId);
      if (!found.length) await new Promise((r) => setTimeout(r, 1000));
    }
    expect(found).toContain(pipelineWorkflowId(id));
  });

  it('replays its recorded history deterministically', async () => {
    const history = await stack.runtime.client.workflow.getHandle(pipelineWorkflowId(id)).fetchHistory();
    const fixture = fileURLToPath(new URL('./fixtures/pipeline-history.json', import.meta.url));
    if (process.env.HANZO_ML_RECORD_HISTORY) writeFileSync(fixture, historyToJSON(history));
    await Worker.runReplayHistory({ workflowBundle: await bundleWorkflows() }, history);
    expect(JSON.parse(readFileSync(fixture, 'utf8')).events.length).toBeGreaterThan(10);
  });
});

/** The Prometheus text format, samples only. */
function parsePrometheus(text: string): { name: string; labels: Record<string, string>; value: number }[] {
  const out: { name: string; labels: Record<string, string>; value: number }[] = [];
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

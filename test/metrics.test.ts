// Scrape /metrics after a real pipeline (every stage real, a short training, auto-approved by the dev admin when its gate passes):
// every metric of spec 000 is exported with its labels, and the values match the catalogue.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { demoPipelineRequest } from '../cli/demo.js';

describe('Prometheus metrics after a pipeline', () => {
  let stack: TestStack;
  let pipelineId = '';
  let request: ReturnType<typeof demoPipelineRequest>;

  beforeAll(async () => {
    stack = await startTestStack();
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('runs a short pipeline to its end', { timeout: 30 * 60_000 }, async () => {
    const req = demoPipelineRequest({ model_name: 'metrics-model', promotion: { auto_approve: true } });
    req.hyperparameters = { ...req.hyperparameters!, max_steps: 10, warmup_steps: 2 };
    req.checkpoint = { every_steps: 5, keep_last: 2 };
    // Ten steps make no good model: validation's perplexity thresholds are not what this test is about.
    req.validate = { max_perplexity: 1e9, quantized_max_perplexity: 1e9 } as typeof req.validate;
    request = req;
    const started = await stack.api<{ id: string }>('POST', '/v1/pipelines', req);
    expect(started.status).toBe(201);
    pipelineId = started.body.id;
    const deadline = Date.now() + 29 * 60_000;
    for (;;) {
      const { body } = await stack.api<{ status: string; result: { outcome: string } | null; progress: { error?: string } }>('GET', `/v1/pipelines/${started.body.id}`);
      if (body.status === 'COMPLETED') break;
      if (body.status !== 'RUNNING') throw new Error(`pipeline ended ${body.status}: ${JSON.stringify(body.progress.error ?? body.result)}`);
      if (Date.now() > deadline) throw new Error('pipeline did not finish');
      await new Promise((r) => setTimeout(r, 2000));
    }
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
    expect(value('hanzo_ml_api_request_duration_seconds_count', { endpoint: 'GET /v1/pipelines/:id' })).toBeGreaterThanOrEqual(1);
  });


  it("emitted the pipeline's job lifecycle to the outbox, in order", async () => {
    const { eventsAfter } = await import('../db/repo/outbox.js');
    const rows = await eventsAfter(stack.runtime.catalogue.db, 'dev', 0, 10_000, ['jobs']);
    const own = rows.filter((r) => r.key === pipelineId).map((r) => (r.payload as { event: string; type?: string }).event + ':' + String((r.payload as { type?: string }).type));
    expect(own).toEqual(['job.submitted:pipeline', 'job.started:pipeline', 'job.completed:train', 'job.completed:pipeline']);
    const completed = rows.find((r) => r.key === pipelineId && (r.payload as { type?: string }).type === 'train')!.payload as { gpu_hours: number; duration_seconds: number; gpu_type: string };
    expect(completed.gpu_hours).toBeGreaterThan(0);
    expect(completed.duration_seconds).toBeGreaterThan(0);
    expect(completed.gpu_type).toBe('cpu');
  });

  it("a dry run of the same request estimates the tokens the training counted, at the throughput it measured", async () => {
    const { body } = await stack.api<{ estimate: { tokens: number; steps: number; gpu_hours: number; basis: string; samples: number } }>('POST', '/v1/pipelines?dry_run=true', request);
    const { db } = stack.runtime.catalogue;
    const { runTags } = await import('../db/schema/index.js');
    const { like } = await import('drizzle-orm');
    const tags = Object.fromEntries((await db.select().from(runTags).where(like(runTags.key, 'hanzo_ml.job.%'))).map((t) => [t.key, t.value]));
    expect(body.estimate).toMatchObject({ tokens: Number(tags['hanzo_ml.job.tokens']), steps: 10, basis: 'measured', samples: 1 });
    // One earlier job of the same kind measured the throughput, so the estimate's GPU-hours are its own.
    expect(body.estimate.gpu_hours).toBeCloseTo(Number(tags['hanzo_ml.job.device_hours']), 9);
    // The model version it registered carries the same totals.
    const { modelVersions } = await import('../db/schema/index.js');
    const [version] = await db.select().from(modelVersions);
    expect(version!.tags).toMatchObject({ 'hanzo_ml.job.device_hours': tags['hanzo_ml.job.device_hours'], 'hanzo_ml.job.cost_usd': tags['hanzo_ml.job.cost_usd'], 'hanzo_ml.job.tokens': String(body.estimate.tokens) });
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

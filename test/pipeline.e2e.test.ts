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
import type { JobView } from '../contracts/jobs.js';
import { sha256File, sha256Text } from '../lib/hash.js';
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

  it('lists its stages as jobs under parent=pipeline:<id>, each with its type and the status its stage ended with', async () => {
    const { status, body } = await stack.api<{ jobs: JobView[] }>('GET', `/v1/jobs?parent=pipeline:${id}`);
    expect(status).toBe(200);
    const stages = [...body.jobs].reverse();
    expect(stages.map((j) => [j.name, j.type, j.status])).toEqual([
      [`${id}-preprocess`, 'data_preparation', 'succeeded'],
      [`${id}-train`, 'training', 'succeeded'],
      [`${id}-eval`, 'eval', 'succeeded'],
      [`${id}-validate`, 'conversion', 'succeeded'],
      [`${id}-register`, 'registration', 'succeeded'],
    ]);
    for (const j of stages) expect(j).toMatchObject({ parent: `pipeline:${id}`, kind: 'stage', workflow_id: pipelineWorkflowId(id), submitted_by: 'dev' });
    expect(stages[1]!.run_id).toBe(final.progress.run_id);
    expect(stages.every((j) => j.started_at !== null && j.ended_at !== null && j.ended_at >= j.started_at)).toBe(true);
    const training = await stack.api<{ jobs: JobView[] }>('GET', `/v1/jobs?parent=pipeline:${id}&type=training`);
    expect(training.body.jobs.map((j) => j.id)).toEqual([stages[1]!.id]);
    expect((await stack.api<JobView>('GET', `/v1/jobs/${stages[1]!.id}`)).body.parent).toBe(`pipeline:${id}`);
    // A stage is steered through its pipeline: cancelling it alone would stop the whole pipeline's workflow.
    const cancel = await stack.api('POST', `/v1/jobs/${stages[1]!.id}/cancel`, {});
    expect(cancel.status).toBe(409);
    expect(String(cancel.body.message)).toContain(`is part of pipeline:${id}`);
    const bad = await stack.api('GET', '/v1/jobs?parent=nothing');
    expect(bad.status).toBe(400);
    expect(String(bad.body.message)).toMatch(/parent/);
  });

  it('registers artifacts whose checksums match the files, with lineage to run and dataset', async () => {
    const { body } = await stack.api<{ versions: Record<string, unknown>[] }>('GET', '/v1/models/e2e-model/versions');
    const v = body.versions[0]!;
    expect(v.stage).toBe('production');
    const artifacts = v.artifacts as Record<string, { path: string; checksum: string; size_bytes: number; manifest: string }>;
    expect(v).toMatchObject({ status: 'ready', formats: ['safetensors', 'lora', 'gguf-q8_0'], architecture: 'LlamaForCausalLM', method: 'lora' });
    // Each format's checksum is its manifest's, and the manifest's SHA-256s are the files' (every shard).
    for (const [format, a] of Object.entries(artifacts)) {
      expect(a.path).toMatch(new RegExp(`/dev/e2e-model/v${String(v.version)}/${format}/$`));
      const manifest = readFileSync(fileURLToPath(a.manifest), 'utf8');
      expect(a.checksum).toBe(`sha256:${sha256Text(manifest)}`);
      for (const f of (JSON.parse(manifest) as { files: { path: string; sha256: string }[] }).files)
        expect(await sha256File(fileURLToPath(new URL(f.path.split('/').map(encodeURIComponent).join('/'), a.path)))).toBe(f.sha256);
    }
    expect(final.result!.artifacts['gguf-q8_0']!.checksum).toBe(artifacts['gguf-q8_0']!.checksum);
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
    // HANZO_ML_RECORD_HISTORY=1 re-records pipeline-history.json; a file name records another fixture beside it.
    const record = process.env.HANZO_ML_RECORD_HISTORY;
    const fixture = fileURLToPath(new URL(`./fixtures/${record && record !== '1' ? record : 'pipeline-history.json'}`, import.meta.url));
    if (record) writeFileSync(fixture, historyToJSON(history));
    await Worker.runReplayHistory({ workflowBundle: await bundleWorkflows() }, history, pipelineWorkflowId(id));
    expect(JSON.parse(readFileSync(fixture, 'utf8')).events.length).toBeGreaterThan(10);
  });
});

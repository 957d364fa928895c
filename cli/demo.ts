// `hanzo-ml demo`: the bundled dataset through the whole pipeline on the embedded stack, then a summary.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { pathToFileURL } from 'node:url';
import { pullModel } from './pull.js';
import { orderFormats } from '../lib/model-artifacts.js';
import { describeComparison } from '../lib/eval-gate.js';
import { gateVerdict } from '../contracts/eval-suite.js';
import { createApiClient, type ApiClient } from './api-client.js';
import { describeReload, followPipeline, type PipelineStatus } from './progress.js';
import { startDevStack, type DevStack } from '../runtime/dev.js';
import { repoRoot } from '../lib/config.js';
import { DEFAULT_BASE_MODEL } from '../lib/base-models.js';
import type { PipelineRequest } from '../contracts/pipeline.js';

export const DEMO_DATASET = join(repoRoot, 'examples', 'data', 'demo-task.jsonl');

export function demoPipelineRequest(overrides: Partial<PipelineRequest> = {}): PipelineRequest {
  return {
    model_name: 'demo-topic-classifier',
    base_model: DEFAULT_BASE_MODEL,
    dataset: { name: 'demo-task', source_uri: pathToFileURL(DEMO_DATASET).href, seed: 42 },
    hyperparameters: {
      // The value projection only, at 2e-4 for 200 steps: it learns the task (exact match 0 -> ~0.15) and keeps
      // ~93% of the base's general-text capability, which support-desk@3 asks of it (at least 90%, by the whole
      // interval). q/v at 1e-3 for 250 steps kept 66%; q/v at 3e-4 89%; q/v at 1e-4 98% but learned nothing.
      learning_rate: 2e-4,
      max_steps: 200,
      batch_size: 8,
      warmup_steps: 10,
      lora_rank: 8,
      lora_alpha: 16,
      target_modules: ['v_proj'],
      max_seq_length: 128,
      seed: 42,
    },
    checkpoint: { every_steps: 25, keep_last: 3 },
    ...overrides,
  };
}

/** A `hanzo-ml dev` already running on this machine, if any: the demo then uses it. */
async function runningApi(): Promise<string | null> {
  const url = process.env.HANZO_ML_API_URL ?? `http://127.0.0.1:${process.env.HANZO_ML_SERVER_PORT ?? 8057}`;
  try {
    const res = await fetch(`${url}/alive`, { signal: AbortSignal.timeout(1000) });
    return res.ok ? url : null;
  } catch {
    return null;
  }
}

export async function runDemo(opts: { waitForApproval: boolean; apiUrl?: string; token?: string }): Promise<number> {
  if (!existsSync(DEMO_DATASET)) throw new Error(`${DEMO_DATASET} is missing`);
  let stack: DevStack | null = null;
  let api: ApiClient;
  const running = opts.apiUrl ?? (await runningApi());
  if (running) {
    api = createApiClient(running, opts.token ?? process.env.HANZO_ML_TOKEN ?? 'hanzo-ml-dev-token');
    process.stderr.write(`using the hanzo-ml API at ${running}\n`);
  } else {
    stack = await startDevStack();
    api = createApiClient(stack.runtime.apiUrl, stack.token);
  }
  const onSignal = (): void => void stack?.stop().then(() => process.exit(130));
  process.once('SIGINT', onSignal);
  try {
    const started = Date.now();
    // The demo is gated by support-desk@3 (a 90% retention floor and decisions by interval); pipelines keep the
    // default suite until every recipe the tests run is tuned for it.
    const { id } = await api.post<{ id: string }>('/v1/pipelines', demoPipelineRequest({ eval: { max_new_tokens: 12, suite: 'support-desk@3' } }));
    process.stderr.write(`pipeline ${id} started\n`);
    let status = await followPipeline(api, id, { until: (s) => s.progress.awaiting_approval });
    if (status.progress.awaiting_approval) {
      if (opts.waitForApproval) {
        process.stderr.write(`\nwaiting for your decision:\n  hanzo-ml pipeline approve ${id} --reason "..."\n  hanzo-ml pipeline reject ${id} --reason "..."\n`);
      } else {
        await api.post(`/v1/pipelines/${id}/approve`, { reason: 'demo: eval gate passed, approved by the demo command' });
        process.stderr.write('promotion approved (demo)\n');
      }
      status = await followPipeline(api, id, { lastStage: status.progress.stage });
    }
    const mv = status.progress.model_version;
    const version = mv ? await api.get<ModelVersionView>(`/v1/models/${encodeURIComponent(mv.name)}/versions/${mv.version}`) : null;
    const ggufCheck = mv && version ? await verifyGguf(api, mv.name, mv.version, version) : 'no model version';
    printSummary(status, await api.get(`/v1/datasets/${status.progress.dataset!.id}`), version, ggufCheck, Date.now() - started);
    return status.result?.outcome === 'promoted' && !ggufCheck.startsWith('MISMATCH') ? 0 : 1;
  } finally {
    process.off('SIGINT', onSignal);
    await stack?.stop();
  }
}

interface ModelVersionView {
  stage: string;
  artifacts: Record<string, { path: string; checksum: string; size_bytes: number }>;
  metrics: {
    candle_perplexity?: number;
    pytorch_perplexity?: number;
    quantized_perplexity?: number | null;
    validation?: { target_tokens: number; max_perplexity: number; general_perplexity: number | null; general_tokens: number | null; base_general_perplexity: number | null; max_general_perplexity: number | null; quantized_max_perplexity: number };
  };
}

/**
 * Pulls the GGUF through the API as `hanzo-ml model pull` does (every file against its manifest, the manifest
 * against the registry's checksum) into a temporary directory, and says how that went.
 */
async function verifyGguf(api: ApiClient, name: string, versionNumber: number, v: ModelVersionView): Promise<string> {
  const format = Object.keys(v.artifacts).find((k) => k.startsWith('gguf'));
  if (!format) return 'no GGUF artifact';
  const dir = await mkdtemp(join(tmpdir(), 'hanzo-ml-demo-pull-'));
  try {
    const pulled = await pullModel(api, { name, version: versionNumber, format, dest: join(dir, format) });
    return `pulled and verified: ${pulled.files} file(s) match the manifest, manifest matches the registry (${pulled.checksum.slice(0, 19)}…)`;
  } catch (err) {
    return `MISMATCH: ${(err as Error).message}`;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * The dataset's line of the summary, from the version as GET /v1/datasets/{id} answers it: a prepared version keeps
 * its counts in metadata.report and what each operation removed in lineage.operations.
 */
export function datasetLine(dataset: Record<string, unknown>): string {
  const meta = dataset.metadata as { report?: { token_counts?: Record<string, number> } } | null;
  const lineage = dataset.lineage as { operations?: { op: string; removed: number }[] } | null;
  const splits = dataset.splits as Record<string, { num_records: number }>;
  const duplicates = (lineage?.operations ?? []).filter((o) => o.op === 'dedup_exact' || o.op === 'dedup_near').reduce((n, o) => n + o.removed, 0);
  const trainTokens = meta?.report?.token_counts?.train;
  return (
    `dataset         ${String(dataset.name)} v${String(dataset.version)}  sha256 ${String(dataset.sha256).slice(0, 16)}…  ${String(dataset.num_records)} records ` +
    `(train ${splits.train!.num_records} / validation ${splits.validation!.num_records} / test ${splits.test!.num_records}), ${duplicates} duplicates removed` +
    (trainTokens === undefined ? '' : `, ${trainTokens} train tokens`)
  );
}

function printSummary(s: PipelineStatus, dataset: Record<string, unknown>, version: ModelVersionView | null, ggufCheck: string, ms: number): void {
  const p = s.progress;
  const r = s.result;
  const lines: string[] = ['', '=== hanzo-ml demo: summary ==='];
  lines.push(`pipeline        ${s.id}  (${s.status}, ${(ms / 1000).toFixed(0)} s)`);
  lines.push(datasetLine(dataset));
  if (p.eval) {
    const f = (x: number) => x.toFixed(3);
    lines.push(`eval (test)     base:  exact_match ${f(p.eval.base.exact_match)}  loss ${f(p.eval.base.loss)}  perplexity ${f(p.eval.base.perplexity)}`);
    if (p.eval.tuned) lines.push(`                tuned: exact_match ${f(p.eval.tuned.exact_match)}  loss ${f(p.eval.tuned.loss)}  perplexity ${f(p.eval.tuned.perplexity)}`);
    const g = (x: number | null | undefined) => (x == null ? 'n/a' : f(x));
    lines.push(`retention       general-text perplexity: base ${g(p.eval.base.general_perplexity)}  tuned ${g(p.eval.tuned?.general_perplexity)}`);
    if (p.eval.gate) {
      lines.push(`gate            ${p.eval.gate.suite}: ${{ pass: 'passed', inconclusive: 'INCONCLUSIVE (held for a human)', block: 'FAILED' }[gateVerdict(p.eval.gate)]} (${p.eval.gate.comparisons.length} comparisons, ${Math.round(p.eval.gate.confidence * 100)}% paired bootstrap CI)`);
      for (const c of p.eval.gate.comparisons) lines.push(`                ${describeComparison(c, p.eval.gate.confidence)}`);
    }
  }
  lines.push(`training        ${p.step}/${p.max_steps} steps, run ${p.run_id}`);
  lines.push(`checkpoints     ${p.checkpoints.map((c) => `step ${c.step} (manifest sha256 ${c.sha256.slice(0, 12)}…)`).join(', ') || 'none'}`);
  const artifacts = r?.artifacts ?? {};
  for (const [name, a] of orderFormats(Object.keys(artifacts)).map((f) => [f, artifacts[f]!] as const)) lines.push(`artifact        ${name.padEnd(12)} ${a.checksum}  ${a.size_bytes} bytes  ${a.path}`);
  const gguf = Object.entries(r?.artifacts ?? {}).find(([k]) => k.startsWith('gguf'));
  if (gguf) lines.push(`GGUF            ${gguf[1].path.replace(/^file:\/\//, '')}  (${ggufCheck})`);
  const m = version?.metrics;
  if (m?.candle_perplexity !== undefined && m.pytorch_perplexity !== undefined) {
    const rel = Math.abs(m.candle_perplexity - m.pytorch_perplexity) / m.pytorch_perplexity;
    const v = m.validation;
    const on = v ? `assistant turns of the held-out conversations (${v.target_tokens} tokens)` : 'held-out conversations';
    lines.push(`validation      ${on}: Candle perplexity ${m.candle_perplexity.toFixed(4)} vs PyTorch ${m.pytorch_perplexity.toFixed(4)} (relative diff ${rel.toExponential(1)})${v ? `, threshold ${v.max_perplexity}` : ''}`);
    lines.push(`                GGUF perplexity ${m.quantized_perplexity?.toFixed(4) ?? 'n/a'}${v ? `, threshold ${v.quantized_max_perplexity}` : ''}`);
    if (v?.general_perplexity != null && v.base_general_perplexity != null)
      lines.push(`                general text (${v.general_tokens} tokens): perplexity ${v.general_perplexity.toFixed(4)} (base ${v.base_general_perplexity.toFixed(4)})${v.max_general_perplexity === null ? '' : `, threshold ${v.max_general_perplexity}`}`);
  }
  if (p.model_version) lines.push(`model version   ${p.model_version.name} v${p.model_version.version}  stage: ${p.model_version.stage}`);
  const reload = describeReload(p.reload);
  if (reload) lines.push(`serving         ${reload}`);
  lines.push(`outcome         ${r?.outcome ?? s.status}: ${r?.reason ?? p.error ?? ''}`);
  for (const w of r?.warnings ?? []) lines.push(`warning         ${w}`);
  if (s.temporal_ui_url) lines.push(`Temporal UI     ${s.temporal_ui_url}  (while \`bin/hanzo-ml dev\` runs on this HANZO_ML_HOME)`);
  process.stdout.write(lines.join('\n') + '\n');
}

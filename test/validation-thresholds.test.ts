// Validation by thresholds, on the real trainer and the real Candle tool through the executor seam: a healthy
// fine-tune of the bundled tiny model passes check_finite, Candle/PyTorch agreement and the absolute perplexity
// thresholds (assistant turns, general text, the GGUF's own); the same fine-tune over shuffled base weights,
// or over a base whose tokenizer is not the one it was trained with, agrees with PyTorch on a bad number and
// is refused, the message giving the measured perplexity and the threshold. The eval job and the gate run on the
// same fine-tune: better than base on the task, worse on general text, so quarantined.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MockActivityEnvironment } from '@temporalio/testing';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { runJobToCompletion } from '../activities/run-job.js';
import type { JobOutcome } from '../jobs/attempts.js';
import { createEvaluationActivities, type EvalOutcome } from '../activities/evaluation.js';
import { getOrCreateExperiment } from '../db/repo/experiments.js';
import { createRun } from '../db/repo/runs.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { createConversionActivities, type CandleResults } from '../activities/conversion.js';
import type { ActivityDeps } from '../activities/deps.js';
import type { DatasetRef } from '../activities/datasets.js';
import { PipelineInputSchema, type PipelineWorkflowInput } from '../contracts/pipeline.js';
import { TrainResultSchema, type MergeReport, type TrainResult } from '../contracts/trainer-job.js';
import { loadConfig, repoRoot } from '../lib/config.js';
import { offlineActivityDeps, trainJobDefinition } from './support/deps.js';

const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-validation-'));
let cat: Catalogue;
let deps: ActivityDeps;
let adapterUri: string;
let dataset: DatasetRef;

/** A copy of the bundled base made broken on purpose, by the trainer's own Python (torch, tokenizers). */
const BREAK_BASE = `
import shutil, sys, torch
from pathlib import Path
from safetensors.torch import load_file, save_file
src, dst, kind = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
shutil.copytree(src, dst)
(dst / "base-model.json").unlink(missing_ok=True)  # its checksums describe the original
if kind == "shuffled":
    g = torch.Generator().manual_seed(0)
    weights = load_file(dst / "model.safetensors")
    weights = {k: v.flatten()[torch.randperm(v.numel(), generator=g)].reshape(v.shape).contiguous() for k, v in weights.items()}
    save_file(weights, dst / "model.safetensors", metadata={"format": "pt"})
else:  # a tokenizer trained on other text: the same special tokens, other ids for the words
    from hanzo_ml.base_model import train_tokenizer
    from hanzo_ml.demo_data import build_demo_files
    documents = [d for d in build_demo_files().files["corpus/reviews.txt"].split("\\n\\n") if d.strip()]
    train_tokenizer(documents, vocab_size=1024).save_pretrained(dst)
`;

function brokenBase(kind: 'shuffled' | 'wrong-tokenizer'): string {
  const dst = join(home, `base-${kind}`);
  execFileSync(deps.bootstrap.python, ['-c', BREAK_BASE, deps.bootstrap.base_model, dst, kind], {
    env: { ...process.env, PYTHONPATH: join(repoRoot, 'trainer') },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  return dst;
}

function pipelineInput(baseModel: string): PipelineWorkflowInput {
  return {
    ...PipelineInputSchema.parse({ model_name: 'm', base_model: baseModel, dataset: { name: 'demo', version: 'latest' }, validate: { test_prompts: ['Hello, how are you?', 'My parcel never arrived.'], max_general_perplexity: 20 } }),
    organization_id: 'dev',
    requested_by: 'tester',
    runtime: { heartbeat_timeout: '30s', approval_timeout: '1h', reload_deadline: '1h' },
  };
}

async function mergeAndValidate(name: string, baseModel: string): Promise<{ merge: MergeReport; candle: Promise<CandleResults> }> {
  const input = pipelineInput(baseModel);
  const env = new MockActivityEnvironment();
  const merge = await env.run((): Promise<MergeReport> => createEvaluationActivities(deps).mergeAdapter({ pipelineId: name, input, dataset, adapterPath: adapterUri }));
  const candle = env.run((): Promise<CandleResults> => createConversionActivities(deps).validateAndQuantize({ pipelineId: name, input, merge }));
  candle.catch(() => undefined); // awaited by the test
  return { merge, candle };
}

describe('validation thresholds', () => {
  beforeAll(async () => {
    cat = await openCatalogue({});
    deps = offlineActivityDeps(cat.db, loadConfig({ HANZO_ML_HOME: home, HANZO_ML_LOGGING_LEVEL: 'error' }), home);
    const lines = readFileSync(join(repoRoot, 'examples', 'data', 'demo-task.jsonl'), 'utf8').trim().split('\n');
    const write = (file: string, rows: string[]) => {
      writeFileSync(join(home, file), rows.join('\n') + '\n');
      return pathToFileURL(join(home, file)).href;
    };
    const train = write('train.jsonl', lines.slice(0, 400));
    dataset = { id: 'd', name: 'demo', version: 1, sha256: '0'.repeat(64), splits: { train, validation: train, test: write('test.jsonl', lines.slice(-48)) } };
    const spec = {
      kind: 'train',
      run_id: 'validation',
      tracking_uri: null,
      validation_path: null,
      method: 'lora',
      hyperparameters: { learning_rate: 2e-3, max_steps: 40, batch_size: 8, gradient_accumulation_steps: 1, warmup_steps: 4, lora_rank: 8, lora_alpha: 16, max_seq_length: 128, seed: 7 },
      checkpoint: { every_steps: 100, keep_last: 1 },
      threads: 2,
    };
    const job = trainJobDefinition({ name: 'validation-train', spec, baseModel: deps.bootstrap.base_model, trainUri: train, checkpointsUri: pathToFileURL(join(home, 'checkpoints')).href });
    const { result } = await new MockActivityEnvironment().run((): Promise<JobOutcome<TrainResult>> => runJobToCompletion(deps, { job, resultSchema: TrainResultSchema, pollMs: 200 }));
    adapterUri = result.adapter_path!;
  }, 600_000);
  afterAll(async () => cat?.close());

  it('passes a healthy fine-tune: finite logits on every prompt, agreement, and every perplexity under its threshold', async () => {
    const { merge, candle } = await mergeAndValidate('healthy', deps.bootstrap.base_model);
    const { validate, quantize } = await candle;
    const names = validate.checks.map((c) => c.name);
    expect(names).toEqual(expect.arrayContaining(['finite_logits', 'perplexity_agreement', 'perplexity_threshold', 'general_perplexity_agreement', 'general_perplexity_threshold']));
    expect(validate.checks.find((c) => c.name === 'finite_logits')?.detail).toMatch(/^2 prompt\(s\)/);
    // The assistant turns: what it was trained to produce, far below guessing among 2,039 tokens.
    expect(merge.num_tokens).toBeGreaterThan(0);
    expect(validate.perplexity!.candle).toBeLessThan(15);
    expect(validate.perplexity!.threshold).toBe(15);
    expect(Math.abs(validate.perplexity!.candle - merge.reference_perplexity) / merge.reference_perplexity).toBeLessThan(0.01);
    expect(validate.general_perplexity!.candle).toBeLessThan(20);
    expect(merge.base_general_perplexity).toBeLessThan(merge.general_reference_perplexity!);
    expect(quantize.checks.find((c) => c.name === 'gguf_perplexity_threshold')?.ok).toBe(true);
    expect(quantize.quantization!.perplexity).toBeLessThan(20);
  }, 600_000);

  it('scores base and candidate in one eval job and quarantines the retention loss though the task improved', async () => {
    await seedDevOrganization(deps.db, 'dev', 'validation-token');
    const experimentId = await getOrCreateExperiment(deps.db, 'dev', 'gate', pathToFileURL(join(home, 'artifacts')).href);
    await createRun(deps.db, { id: 'gate-run', organizationId: 'dev', experimentId, name: 'gate', userId: 'tester', artifactRoot: pathToFileURL(join(home, 'artifacts')).href, config: {}, params: {} });
    const input = pipelineInput(deps.bootstrap.base_model);
    const out = await new MockActivityEnvironment().run((): Promise<EvalOutcome> => createEvaluationActivities(deps).evaluateModels({ pipelineId: 'gate', runId: 'gate-run', input, dataset, adapterPath: adapterUri }));
    const c = (task: string, metric: string) => out.gate.comparisons.find((x) => x.task === task && x.metric === metric && x.against === 'base')!;
    // Far better than base on what it was trained for...
    expect(out.tuned!.perplexity).toBeLessThan(out.base.perplexity / 10);
    expect(c('test', 'perplexity')).toMatchObject({ passed: true, significant: true });
    expect(c('test', 'exact_match').passed).toBe(true);
    // ...but its general text got much worse than the base's: the suite allows at most +100%.
    expect(out.tuned!.general_perplexity!).toBeGreaterThan(2 * out.base.general_perplexity!);
    expect(c('retention', 'perplexity')).toMatchObject({ passed: false, significant: true, max_regression: 1 });
    expect(c('retention', 'perplexity').ci[0]).toBeGreaterThan(0.5); // the interval is far from noise
    expect(out.gate).toMatchObject({ suite: 'support-desk@2', passed: false, skipped: ['production'], production_version: null });
    expect(out.gate.reason).toMatch(/^regression: retention\/perplexity vs base: /);
    expect(out.scores_path).not.toBeNull();
    // The suite's instruction set was scored for both models in the same job and compared like the rest.
    expect(out.base.instruction_pass_rate).not.toBeNull();
    expect(c('instructions', 'pass_rate')).toMatchObject({ candidate: out.tuned!.instruction_pass_rate, reference: out.base.instruction_pass_rate });
  }, 600_000);

  for (const kind of ['shuffled', 'wrong-tokenizer'] as const) {
    it(`refuses the fine-tune over a base with ${kind === 'shuffled' ? 'shuffled weights' : 'the wrong tokenizer'}, naming the perplexity and the threshold`, async () => {
      const { merge, candle } = await mergeAndValidate(kind, brokenBase(kind));
      // PyTorch and Candle agree on the number; only the absolute threshold catches it.
      expect(merge.reference_perplexity).toBeGreaterThan(15);
      const err = await candle.then(
        () => null,
        (e: unknown) => e as Error,
      );
      expect(err?.message).toMatch(/^Candle validate failed: /);
      const m = /perplexity_threshold: perplexity ([\d.]+) on (\d+) target tokens > threshold 15\.0000/.exec(err!.message);
      expect(m, err!.message).not.toBeNull();
      expect(Math.abs(Number(m![1]) - merge.reference_perplexity) / merge.reference_perplexity).toBeLessThan(0.01);
      expect(Number(m![2])).toBe(merge.num_tokens);
      expect(err!.message).not.toMatch(/perplexity_agreement:/);
    }, 600_000);
  }
});

// validate/quantize stage: the Rust Candle tool loads the merged model, checks finite logits and perplexity
// agreement with PyTorch, and writes the GGUF file. Any failed check fails the pipeline (not retried).
import { spawn } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { ActivityDeps } from './deps.js';
import type { PipelineWorkflowInput } from '../contracts/pipeline.js';
import type { MergeReport } from '../contracts/trainer-job.js';
import { CandleReportSchema, type CandleReport } from '../contracts/candle-report.js';
import { workdirFor } from './jobs.js';

export interface CandleResults {
  validate: CandleReport;
  quantize: CandleReport;
  gguf: { path: string; size_bytes: number; sha256: string; dtype: string };
}

export function createConversionActivities(deps: ActivityDeps) {
  return {
    async validateAndQuantize(a: { pipelineId: string; input: PipelineWorkflowInput; merge: MergeReport }): Promise<CandleResults> {
      const workdir = workdirFor(deps, a.pipelineId, 'candle');
      await mkdir(workdir, { recursive: true });
      const v = a.input.validate;
      const validate = await runCandle(deps, [
        'validate',
        '--model', a.merge.merged_dir,
        ...v.test_prompts.flatMap((p) => ['--prompt', p]),
        '--heldout-tokens', a.merge.heldout_tokens_path,
        '--reference-perplexity', String(a.merge.reference_perplexity),
        '--tolerance', String(v.perplexity_tolerance),
        '--json',
      ]);
      const out = join(workdir, `model-${v.quantization}.gguf`);
      const quantize = await runCandle(deps, ['quantize', '--model', a.merge.merged_dir, '--out', out, '--dtype', v.quantization, '--heldout-tokens', a.merge.heldout_tokens_path, '--json']);
      const gguf = quantize.outputs.find((o) => o.path.endsWith('.gguf'));
      if (!gguf) throw ApplicationFailure.nonRetryable('the Candle tool reported no GGUF output', 'ValidationFailed');
      return { validate, quantize, gguf: { ...gguf, dtype: v.quantization } };
    },
  };
}

async function runCandle(deps: ActivityDeps, args: string[]): Promise<CandleReport> {
  const { code, stdout, stderr } = await runWithHeartbeat(deps.bootstrap.candle, args);
  let report: CandleReport | null = null;
  try {
    report = CandleReportSchema.parse(JSON.parse(stdout));
  } catch {
    report = null;
  }
  if (!report) throw ApplicationFailure.retryable(`hanzo-ml-candle ${args[0]} exited ${code} without a JSON report: ${stderr.trim().split('\n').slice(-5).join(' | ')}`, 'CandleCrashed');
  if (code !== 0 || !report.ok) {
    const failed = report.checks.filter((c) => !c.ok).map((c) => `${c.name}: ${c.detail}`);
    throw ApplicationFailure.nonRetryable(`Candle ${args[0]} failed: ${[report.error, ...failed].filter(Boolean).join('; ')}`, 'ValidationFailed', report);
  }
  return report;
}

function runWithHeartbeat(bin: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-20_000)));
    const beat = setInterval(() => Context.current().heartbeat({ tool: args[0] }), 5000);
    const cancelled = Context.current().cancelled.catch((err: unknown) => {
      child.kill('SIGKILL');
      reject(err);
    });
    void cancelled;
    child.on('error', (err) => {
      clearInterval(beat);
      reject(ApplicationFailure.nonRetryable(`cannot run ${bin}: ${err.message}`, 'CandleMissing'));
    });
    child.on('close', (code) => {
      clearInterval(beat);
      resolve({ code: code ?? 1, stdout, stderr });
    });
  });
}

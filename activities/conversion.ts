// validate/quantize stage: the Rust Candle tool, run as a job like any other (a pod in a cluster), loads the
// merged model from the object store, checks finite logits on every test prompt, perplexity agreement with
// PyTorch, and absolute perplexity thresholds (on the assistant turns and on general text), and writes the GGUF
// back to the object store, checked against its own threshold. Any failed check fails the pipeline (not retried).
import type { ActivityDeps } from './deps.js';
import type { PipelineWorkflowInput } from '../contracts/pipeline.js';
import type { MergeReport } from '../contracts/trainer-job.js';
import type { JobPriority } from '../contracts/config.js';
import { CandleReportSchema, type CandleReport } from '../contracts/candle-report.js';
import { runJobToCompletion } from './run-job.js';
import { defineJob } from '../jobs/definition.js';
import { dirInput, fileInput } from '../jobs/inputs.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';

export interface CandleResults {
  validate: CandleReport;
  quantize: CandleReport;
  /** path: the GGUF file's object URI */
  gguf: { path: string; size_bytes: number; sha256: string; dtype: string };
}

export function createConversionActivities(deps: ActivityDeps) {
  return {
    async validateAndQuantize(a: { pipelineId: string; input: PipelineWorkflowInput; merge: MergeReport }): Promise<CandleResults> {
      return validateAndQuantize(deps, { name: a.pipelineId, organizationId: a.input.organization_id, priority: a.input.priority ?? null, validate: a.input.validate, merge: a.merge });
    },
  };
}

/**
 * Candle validate, then quantize, of a merged model: `name` prefixes the two jobs' names. Any failed check fails
 * with the non-retryable type ValidationFailed.
 */
export async function validateAndQuantize(
  deps: ActivityDeps,
  a: { name: string; organizationId: string; priority: JobPriority | null; validate: PipelineWorkflowInput['validate']; merge: MergeReport },
): Promise<CandleResults> {
  const v = a.validate;
  const inputs = { model: dirInput(a.merge.merged_dir), heldout: fileInput(a.merge.heldout_tokens_path) };
  const general = a.merge.general_tokens_path;
  const validate = await runCandle(deps, a, 'validate', general ? { ...inputs, general: fileInput(general) } : inputs, {}, [
    'validate',
    '--model', '{model}',
    ...v.test_prompts.flatMap((p) => ['--prompt', p]),
    '--heldout-tokens', '{heldout}',
    '--reference-perplexity', String(a.merge.reference_perplexity),
    '--tolerance', String(v.perplexity_tolerance),
    '--max-perplexity', String(v.max_perplexity),
    ...(general ? generalArgs(a.merge, v.max_general_perplexity) : []),
    '--json',
  ]);
  const quantize = await runCandle(deps, a, 'quantize', inputs, { gguf: 'dir' }, [
    'quantize', '--model', '{model}', '--out', `{gguf}/model-${v.quantization}.gguf`, '--dtype', v.quantization, '--heldout-tokens', '{heldout}',
    '--max-perplexity', String(v.quantized_max_perplexity), '--json',
  ]);
  const gguf = quantize.outputs.find((o) => o.path.endsWith('.gguf'));
  if (!gguf) throw nonRetryable(FailureType.ValidationFailed, 'the Candle tool reported no GGUF output');
  return { validate, quantize, gguf: { ...gguf, dtype: v.quantization } };
}

/** Capability retention: the general text, PyTorch's number on it, and its absolute bound. */
function generalArgs(merge: MergeReport, max: number | null): string[] {
  const reference = merge.general_reference_perplexity === null ? [] : ['--general-reference-perplexity', String(merge.general_reference_perplexity)];
  return ['--general-tokens', '{general}', ...reference, ...(max === null ? [] : ['--max-general-perplexity', String(max)])];
}

async function runCandle(
  deps: ActivityDeps,
  a: { name: string; organizationId: string; priority: JobPriority | null },
  command: 'validate' | 'quantize',
  inputs: Record<string, { uri: string; kind: 'file' | 'dir' }>,
  outputs: Record<string, 'file' | 'dir'>,
  args: string[],
): Promise<CandleReport> {
  const spec = Object.fromEntries([...Object.keys(inputs), ...Object.keys(outputs)].map((f) => [f, `${f in inputs ? 'input' : 'output'}:${f}`]));
  // The job runner exits 0 whenever the tool printed its report, passed or not: the report says which checks failed.
  const { result: report } = await runJobToCompletion(deps, {
    job: defineJob({ name: `${a.name}-candle-${command}`, kind: 'candle', organizationId: a.organizationId, priority: a.priority, tool: 'candle', spec, inputs, outputs, args }),
    resultSchema: CandleReportSchema,
  });
  if (!report.ok) {
    const failed = report.checks.filter((c) => !c.ok).map((c) => `${c.name}: ${c.detail}`);
    throw nonRetryable(FailureType.ValidationFailed, `Candle ${command} failed: ${[report.error, ...failed].filter(Boolean).join('; ')}`, report);
  }
  return report;
}

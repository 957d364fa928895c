// eval stage (candidate vs base vs current production, on the suite's data, in one job), the promotion gate over
// its per-example scores, and the merge that prepares Candle validation: both jobs read their inputs from the
// object store and leave their outputs there.
import type { ActivityDeps } from './deps.js';
import type { PipelineWorkflowInput } from '../contracts/pipeline.js';
import { EvalReportSchema, EvalScoresSchema, MergeReportSchema, type EvalJobSpec, type EvalReport, type EvalScores, type MergeJobSpec, type MergeReport } from '../contracts/trainer-job.js';
import type { JobFiles } from '../lib/job-files.js';
import type { EvalSuite, GateDecision } from '../contracts/eval-suite.js';
import { evalGate } from '../lib/eval-gate.js';
import { EvalSuiteError } from '../lib/eval-suites.js';
import { resolveSuite, type SuiteData } from '../datasets/eval-suites.js';
import { getModel, productionVersionOf, getVersion } from '../db/repo/models.js';
import type { Artifact } from '../contracts/pipeline.js';
import { JOB_FILES } from '../contracts/job-io.js';
import { runJobToCompletion } from './run-job.js';
import type { JobOutcome } from '../jobs/attempts.js';
import { defineJob } from '../jobs/definition.js';
import type { JobPriority } from '../contracts/config.js';
import { baseModelInput, dirInput, fileInput, type JobInput } from '../jobs/inputs.js';
import { recordArtifact } from '../db/repo/run-artifacts.js';
import { sha256Text } from '../lib/hash.js';
import type { DatasetRef } from './datasets.js';
import { GENERAL_TEXT, bundledFileInput, heldoutJobInput } from './eval-data.js';

export type EvalOutcome = EvalReport & { gate: GateDecision };

/** The merged safetensors directory of the model's current production version, if it has one. */
export async function productionModelDir(deps: ActivityDeps, organizationId: string, modelName: string): Promise<{ version: number; dir: string } | null> {
  const model = await getModel(deps.db, organizationId, modelName);
  const version = model ? await productionVersionOf(deps.db, model.id) : null;
  if (version === null) return null;
  const found = await getVersion(deps.db, organizationId, modelName, version);
  const safetensors = (found?.version.artifacts as Record<string, Artifact> | undefined)?.safetensors;
  return safetensors ? { version, dir: safetensors.path.replace(/\/$/, '') } : null;
}
import { logMetrics } from '../db/repo/metrics.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';

export function createEvaluationActivities(deps: ActivityDeps) {
  return {
    async evaluateModels(a: { pipelineId: string; runId: string; input: PipelineWorkflowInput; dataset: DatasetRef; adapterPath: string }): Promise<EvalOutcome> {
      // The organization's own suite first, its held-out sets resolved for the organization.
      const { suite, data } = await resolveSuite(deps.db, a.input.organization_id, a.input.eval.suite).catch((e: unknown) => {
        throw e instanceof EvalSuiteError ? nonRetryable(FailureType.BadInput, `eval suite ${a.input.eval.suite}: ${e.message}`) : e;
      });
      const production = await productionModelDir(deps, a.input.organization_id, a.input.model_name);
      const { result: report, files } = await runEvalJob(deps, {
        name: `${a.pipelineId}-eval`,
        organizationId: a.input.organization_id,
        priority: a.input.priority ?? null,
        runId: a.runId,
        base: await baseModelInput(deps, a.input.base_model),
        adapter: dirInput(a.adapterPath),
        production: production ? dirInput(production.dir) : null,
        testUri: a.dataset.splits.test,
        suite,
        data,
        maxNewTokens: a.input.eval.max_new_tokens,
        maxSeqLength: a.input.hyperparameters.max_seq_length,
      });
      const scores = await recordEvalReport(deps, a.runId, report, files, a.input.hyperparameters.max_steps);
      const gate = evalGate(suite, scores, production?.version ?? null);
      return { ...report, gate };
    },

    async mergeAdapter(a: { pipelineId: string; input: PipelineWorkflowInput; dataset: DatasetRef; adapterPath: string }): Promise<MergeReport> {
      const { result } = await runMergeJob(deps, {
        name: `${a.pipelineId}-merge`,
        organizationId: a.input.organization_id,
        priority: a.input.priority ?? null,
        base: await baseModelInput(deps, a.input.base_model),
        adapter: dirInput(a.adapterPath),
        heldoutUri: a.dataset.splits.test,
        maxSeqLength: a.input.hyperparameters.max_seq_length,
      });
      return result;
    },
  };
}

/** The report's scores as metric points: `eval/<who>/<metric>`, where `names` says what each model is called. */
export function evalMetricPoints(report: EvalReport, step: number, names: Partial<Record<'base' | 'tuned' | 'production', string>> = { base: 'base', tuned: 'tuned', production: 'production' }) {
  const now = Date.now();
  return (['base', 'tuned', 'production'] as const).flatMap((m) => {
    const s = report[m];
    const who = names[m];
    if (!s || !who) return [];
    return (['loss', 'perplexity', 'exact_match', 'general_perplexity', 'instruction_pass_rate'] as const).flatMap((k) => (s[k] === null ? [] : [{ key: `eval/${who}/${k}`, value: s[k], step, timestamp: now }]));
  });
}

/**
 * An eval job's results on its run: the scores as metrics, the report and the per-example scores as artifacts
 * (eval/results.json, eval/scores.json; the gate's intervals can be recomputed from the scores). Returns the scores.
 */
export async function recordEvalReport(deps: ActivityDeps, runId: string, report: EvalReport, files: JobFiles, step: number, names?: Parameters<typeof evalMetricPoints>[2]): Promise<EvalScores> {
  await logMetrics(deps.db, runId, evalMetricPoints(report, step, names));
  // The report of record is the job's output in the object store, not a file on some worker.
  const uri = files.outputUri('output_path');
  const text = (await deps.store.readText(uri)) ?? (await deps.store.readText(files.file(JOB_FILES.result)))!;
  await recordArtifact(deps.db, { runId, path: 'eval/results.json', uri, sizeBytes: Buffer.byteLength(text), sha256: sha256Text(text) });
  const scoresUri = files.outputUri('scores_path');
  const scoresText = await deps.store.readText(scoresUri);
  if (scoresText === null) throw nonRetryable(FailureType.BadJobSpec, `the eval job wrote no per-example scores at ${scoresUri}`);
  await recordArtifact(deps.db, { runId, path: 'eval/scores.json', uri: scoresUri, sizeBytes: Buffer.byteLength(scoresText), sha256: sha256Text(scoresText) });
  return EvalScoresSchema.parse(JSON.parse(scoresText));
}

type Phases = Pick<Parameters<typeof runJobToCompletion>[1], 'onWaiting' | 'onPoll'>;

/**
 * One eval job: base (+ adapter) and the production model, if given, on the test split and the suite's data.
 * `data`: the suite's held-out sets resolved for the organization (datasets/eval-suites.ts); the suite's own test
 * split, when it names one, replaces `testUri`. Without it, only a suite of bundled files can run.
 */
export async function runEvalJob(
  deps: ActivityDeps,
  r: { name: string; organizationId: string; priority: JobPriority | null; runId: string; base: JobInput; adapter: JobInput | null; production: JobInput | null; testUri: string; suite: EvalSuite; data?: SuiteData; maxNewTokens: number; maxSeqLength: number } & Phases,
): Promise<JobOutcome<EvalReport>> {
  const data = r.data ?? bundledSuiteData(r.suite);
  const spec: EvalJobSpec = {
    kind: 'eval',
    job_name: r.name,
    base_model_path: 'input:base_model_path',
    adapter_path: r.adapter ? 'input:adapter_path' : null,
    test_path: 'input:test_path',
    output_path: 'output:output_path',
    production_model_path: r.production ? 'input:production_model_path' : null,
    general_path: data.general ? 'input:general_path' : null,
    instructions_path: data.instructions ? 'input:instructions_path' : null,
    safety_path: data.safety ? 'input:safety_path' : null,
    scores_path: 'output:scores_path',
    max_new_tokens: r.maxNewTokens,
    max_seq_length: r.maxSeqLength,
    threads: deps.config.trainer.threads,
  };
  return runJobToCompletion(deps, {
    job: defineJob({
      name: r.name,
      kind: 'eval',
      organizationId: r.organizationId,
      priority: r.priority,
      runId: r.runId,
      tool: 'trainer',
      spec,
      inputs: {
        base_model_path: r.base,
        ...(r.adapter ? { adapter_path: r.adapter } : {}),
        test_path: data.test ? await heldoutJobInput(deps, data.test) : fileInput(r.testUri),
        ...(r.production ? { production_model_path: r.production } : {}),
        ...(data.general ? { general_path: await heldoutJobInput(deps, data.general) } : {}),
        ...(data.instructions ? { instructions_path: await heldoutJobInput(deps, data.instructions) } : {}),
        ...(data.safety ? { safety_path: await heldoutJobInput(deps, data.safety) } : {}),
      },
      outputs: { output_path: 'file', scores_path: 'file' },
      resultField: 'output_path',
    }),
    resultSchema: EvalReportSchema,
    ...(r.onWaiting ? { onWaiting: r.onWaiting } : {}),
    ...(r.onPoll ? { onPoll: r.onPoll } : {}),
  });
}

/** A suite whose held-out sets are all bundled files, as job data; one that names a dataset version needs resolveSuite. */
function bundledSuiteData(suite: EvalSuite): SuiteData {
  const bundled = (field: string, h: EvalSuite['general_text']) => {
    if (h !== null && typeof h !== 'string') throw nonRetryable(FailureType.BadInput, `eval suite ${suite.name}@${suite.version}: ${field} names a dataset version, which only an organization's eval can resolve`);
    return h === null ? null : { kind: 'bundled' as const, path: h };
  };
  return { test: bundled('test', suite.test), general: bundled('general_text', suite.general_text), instructions: bundled('instructions', suite.instructions), safety: bundled('safety', suite.safety) };
}

/** One merge job: the adapter merged into its base, with PyTorch's reference perplexities the Candle tool checks against. */
export async function runMergeJob(
  deps: ActivityDeps,
  r: { name: string; organizationId: string; priority: JobPriority | null; base: JobInput; adapter: JobInput; heldoutUri: string; maxSeqLength: number } & Phases,
): Promise<JobOutcome<MergeReport>> {
  const spec: MergeJobSpec = {
    kind: 'merge',
    job_name: r.name,
    base_model_path: 'input:base_model_path',
    adapter_path: 'input:adapter_path',
    output_dir: 'output:output_dir',
    heldout_path: 'input:heldout_path',
    reference_path: 'output:reference_path',
    heldout_tokens_path: 'output:heldout_tokens_path',
    general_path: 'input:general_path',
    general_tokens_path: 'output:general_tokens_path',
    max_seq_length: r.maxSeqLength,
    max_sequences: 64,
    threads: deps.config.trainer.threads,
  };
  return runJobToCompletion(deps, {
    job: defineJob({
      name: r.name,
      kind: 'merge',
      organizationId: r.organizationId,
      priority: r.priority,
      tool: 'trainer',
      spec,
      inputs: { base_model_path: r.base, adapter_path: r.adapter, heldout_path: fileInput(r.heldoutUri), general_path: await bundledFileInput(deps, GENERAL_TEXT) },
      outputs: { output_dir: 'dir', reference_path: 'file', heldout_tokens_path: 'file', general_tokens_path: 'file' },
      resultField: 'reference_path',
    }),
    resultSchema: MergeReportSchema,
    ...(r.onWaiting ? { onWaiting: r.onWaiting } : {}),
    ...(r.onPoll ? { onPoll: r.onPoll } : {}),
  });
}

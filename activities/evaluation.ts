// eval stage (candidate vs base vs current production, on the suite's data, in one job), the promotion gate over
// its per-example scores, and the merge that prepares Candle validation: both jobs read their inputs from the
// object store and leave their outputs there.
import type { ActivityDeps } from './deps.js';
import type { PipelineWorkflowInput } from '../contracts/pipeline.js';
import { ApplicationFailure } from '@temporalio/common';
import { EvalReportSchema, EvalScoresSchema, MergeReportSchema, type EvalJobSpec, type EvalReport, type MergeJobSpec, type MergeReport } from '../contracts/trainer-job.js';
import type { GateDecision } from '../contracts/eval-suite.js';
import { evalGate } from '../lib/eval-gate.js';
import { EvalSuiteError, loadEvalSuite } from '../lib/eval-suites.js';
import { getModel, productionVersionOf, getVersion } from '../db/repo/models.js';
import type { Artifact } from '../contracts/pipeline.js';
import { JOB_FILES } from '../contracts/job-io.js';
import { runJobToCompletion } from './jobs.js';
import { baseModelInput, dirInput, fileInput } from './job-inputs.js';
import { recordArtifact } from '../db/repo/run-artifacts.js';
import { sha256Text } from '../lib/hash.js';
import type { DatasetRef } from './datasets.js';
import { GENERAL_TEXT, bundledFileInput } from './eval-data.js';

export type EvalOutcome = EvalReport & { gate: GateDecision };

/** The merged safetensors directory of the model's current production version, if it has one. */
async function productionModelDir(deps: ActivityDeps, organizationId: string, modelName: string): Promise<{ version: number; dir: string } | null> {
  const model = await getModel(deps.db, organizationId, modelName);
  const version = model ? await productionVersionOf(deps.db, model.id) : null;
  if (version === null) return null;
  const found = await getVersion(deps.db, organizationId, modelName, version);
  const safetensors = (found?.version.artifacts as Record<string, Artifact> | undefined)?.safetensors;
  return safetensors ? { version, dir: safetensors.path.replace(/\/$/, '') } : null;
}
import { logMetrics } from '../db/repo/metrics.js';

export function createEvaluationActivities(deps: ActivityDeps) {
  return {
    async evaluateModels(a: { pipelineId: string; runId: string; input: PipelineWorkflowInput; dataset: DatasetRef; adapterPath: string }): Promise<EvalOutcome> {
      const suite = await loadEvalSuite(a.input.eval.suite).catch((e: unknown) => {
        throw e instanceof EvalSuiteError ? ApplicationFailure.nonRetryable(e.message, 'BadInput') : e;
      });
      const production = await productionModelDir(deps, a.input.organization_id, a.input.model_name);
      const spec: EvalJobSpec = {
        kind: 'eval',
        job_name: `${a.pipelineId}-eval`,
        base_model_path: 'input:base_model_path',
        adapter_path: 'input:adapter_path',
        test_path: 'input:test_path',
        output_path: 'output:output_path',
        production_model_path: production ? 'input:production_model_path' : null,
        general_path: suite.general_text ? 'input:general_path' : null,
        instructions_path: suite.instructions ? 'input:instructions_path' : null,
        scores_path: 'output:scores_path',
        max_new_tokens: a.input.eval.max_new_tokens,
        max_seq_length: a.input.hyperparameters.max_seq_length,
        threads: deps.config.trainer.threads,
      };
      const { result: report, files } = await runJobToCompletion(deps, {
        job: {
          name: spec.job_name,
          kind: 'eval',
          organizationId: a.input.organization_id,
          priority: a.input.priority ?? null,
          runId: a.runId,
          envelope: {
            tool: 'trainer',
            spec,
            inputs: {
              base_model_path: await baseModelInput(deps, a.input.base_model),
              adapter_path: dirInput(a.adapterPath),
              test_path: fileInput(a.dataset.splits.test),
              ...(production ? { production_model_path: dirInput(production.dir) } : {}),
              ...(suite.general_text ? { general_path: await bundledFileInput(deps, suite.general_text) } : {}),
              ...(suite.instructions ? { instructions_path: await bundledFileInput(deps, suite.instructions) } : {}),
            },
            outputs: { output_path: 'file', scores_path: 'file' },
            result_field: 'output_path',
          },
        },
        resultSchema: EvalReportSchema,
      });
      const step = a.input.hyperparameters.max_steps;
      const now = Date.now();
      const points = Object.entries({ base: report.base, tuned: report.tuned, production: report.production }).flatMap(([who, s]) =>
        s ? (['loss', 'perplexity', 'exact_match', 'general_perplexity', 'instruction_pass_rate'] as const).flatMap((k) => (s[k] === null ? [] : [{ key: `eval/${who}/${k}`, value: s[k], step, timestamp: now }])) : [],
      );
      await logMetrics(deps.db, a.runId, points);
      // The report of record is the job's output in the object store, not a file on some worker.
      const uri = files.outputUri('output_path');
      const text = (await deps.store.readText(uri)) ?? (await deps.store.readText(files.file(JOB_FILES.result)))!;
      await recordArtifact(deps.db, {
        runId: a.runId,
        path: 'eval/results.json',
        uri,
        sizeBytes: Buffer.byteLength(text),
        sha256: sha256Text(text),
      });
      // Per-example scores are kept as an artifact of the run: the gate's intervals can be recomputed from them.
      const scoresUri = files.outputUri('scores_path');
      const scoresText = await deps.store.readText(scoresUri);
      if (scoresText === null) throw ApplicationFailure.nonRetryable(`the eval job wrote no per-example scores at ${scoresUri}`, 'BadJobSpec');
      await recordArtifact(deps.db, { runId: a.runId, path: 'eval/scores.json', uri: scoresUri, sizeBytes: Buffer.byteLength(scoresText), sha256: sha256Text(scoresText) });
      const gate = evalGate(suite, EvalScoresSchema.parse(JSON.parse(scoresText)), production?.version ?? null);
      return { ...report, gate };
    },

    async mergeAdapter(a: { pipelineId: string; input: PipelineWorkflowInput; dataset: DatasetRef; adapterPath: string }): Promise<MergeReport> {
      const spec: MergeJobSpec = {
        kind: 'merge',
        job_name: `${a.pipelineId}-merge`,
        base_model_path: 'input:base_model_path',
        adapter_path: 'input:adapter_path',
        output_dir: 'output:output_dir',
        heldout_path: 'input:heldout_path',
        reference_path: 'output:reference_path',
        heldout_tokens_path: 'output:heldout_tokens_path',
        general_path: 'input:general_path',
        general_tokens_path: 'output:general_tokens_path',
        max_seq_length: a.input.hyperparameters.max_seq_length,
        max_sequences: 64,
        threads: deps.config.trainer.threads,
      };
      const { result } = await runJobToCompletion(deps, {
        job: {
          name: spec.job_name,
          kind: 'merge',
          organizationId: a.input.organization_id,
          priority: a.input.priority ?? null,
          envelope: {
            tool: 'trainer',
            spec,
            inputs: {
              base_model_path: await baseModelInput(deps, a.input.base_model),
              adapter_path: dirInput(a.adapterPath),
              heldout_path: fileInput(a.dataset.splits.test),
              general_path: await bundledFileInput(deps, GENERAL_TEXT),
            },
            outputs: { output_dir: 'dir', reference_path: 'file', heldout_tokens_path: 'file', general_tokens_path: 'file' },
            result_field: 'reference_path',
          },
        },
        resultSchema: MergeReportSchema,
      });
      return result;
    },
  };
}

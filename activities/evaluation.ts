// eval stage (base vs fine-tuned on the test split) and the merge that prepares Candle validation: both jobs
// read their inputs from the object store and leave their outputs there.
import type { ActivityDeps } from './deps.js';
import type { PipelineWorkflowInput } from '../contracts/pipeline.js';
import { EvalReportSchema, MergeReportSchema, type EvalJobSpec, type EvalReport, type MergeJobSpec, type MergeReport } from '../contracts/trainer-job.js';
import { JOB_FILES } from '../contracts/job-io.js';
import { runJobToCompletion } from './jobs.js';
import { baseModelInput, dirInput, fileInput } from './job-inputs.js';
import { recordArtifact } from '../db/repo/tracking.js';
import { sha256Text } from '../lib/hash.js';
import type { DatasetRef } from './datasets.js';
import { logMetrics } from '../db/repo/metrics.js';

export function createEvaluationActivities(deps: ActivityDeps) {
  return {
    async evaluateModels(a: { pipelineId: string; runId: string; input: PipelineWorkflowInput; dataset: DatasetRef; adapterPath: string }): Promise<EvalReport> {
      const spec: EvalJobSpec = {
        kind: 'eval',
        job_name: `${a.pipelineId}-eval`,
        base_model_path: 'input:base_model_path',
        adapter_path: 'input:adapter_path',
        test_path: 'input:test_path',
        output_path: 'output:output_path',
        max_new_tokens: a.input.eval.max_new_tokens,
        max_seq_length: a.input.hyperparameters.max_seq_length,
        threads: deps.config.trainer.threads,
      };
      const { result: report, files } = await runJobToCompletion(deps, {
        job: {
          name: spec.job_name,
          kind: 'eval',
          organizationId: a.input.organization_id,
          runId: a.runId,
          envelope: {
            tool: 'trainer',
            spec,
            inputs: { base_model_path: await baseModelInput(deps, a.input.base_model), adapter_path: dirInput(a.adapterPath), test_path: fileInput(a.dataset.splits.test) },
            outputs: { output_path: 'file' },
            result_field: 'output_path',
          },
        },
        resultSchema: EvalReportSchema,
      });
      const step = a.input.hyperparameters.max_steps;
      const now = Date.now();
      const points = Object.entries({ base: report.base, tuned: report.tuned }).flatMap(([who, s]) =>
        s ? (['loss', 'perplexity', 'exact_match'] as const).map((k) => ({ key: `eval/${who}/${k}`, value: s[k], step, timestamp: now })) : [],
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
      return report;
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
        max_seq_length: a.input.hyperparameters.max_seq_length,
        max_sequences: 64,
        threads: deps.config.trainer.threads,
      };
      const { result } = await runJobToCompletion(deps, {
        job: {
          name: spec.job_name,
          kind: 'merge',
          organizationId: a.input.organization_id,
          envelope: {
            tool: 'trainer',
            spec,
            inputs: { base_model_path: await baseModelInput(deps, a.input.base_model), adapter_path: dirInput(a.adapterPath), heldout_path: fileInput(a.dataset.splits.test) },
            outputs: { output_dir: 'dir', reference_path: 'file', heldout_tokens_path: 'file' },
            result_field: 'reference_path',
          },
        },
        resultSchema: MergeReportSchema,
      });
      return result;
    },
  };
}

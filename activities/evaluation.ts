// eval stage (base vs fine-tuned on the test split) and the merge that prepares Candle validation.
import { join } from 'node:path';
import type { ActivityDeps } from './deps.js';
import type { PipelineWorkflowInput } from '../contracts/pipeline.js';
import { EvalReportSchema, MergeReportSchema, type EvalJobSpec, type EvalReport, type MergeJobSpec, type MergeReport } from '../contracts/trainer-job.js';
import { runJobToCompletion, trainerCommand, workdirFor, writeSpec } from './jobs.js';
import { resolveBaseModel } from '../lib/base-models.js';
import { localPathFor } from '../lib/object-store.js';
import { logMetrics, recordArtifact } from '../db/repo/tracking.js';
import { sha256File } from '../lib/hash.js';
import { stat } from 'node:fs/promises';
import type { DatasetRef } from './datasets.js';

export function createEvaluationActivities(deps: ActivityDeps) {
  const testFile = (pipelineId: string, ds: DatasetRef) => localPathFor(deps.store, ds.splits.test, join(deps.home, 'work', pipelineId, 'data'));

  return {
    async evaluateModels(a: { pipelineId: string; runId: string; input: PipelineWorkflowInput; dataset: DatasetRef; adapterPath: string }): Promise<EvalReport> {
      const workdir = workdirFor(deps, a.pipelineId, 'eval');
      const spec: EvalJobSpec = {
        kind: 'eval',
        job_name: `${a.pipelineId}-eval`,
        base_model_path: resolveBaseModel(a.input.base_model, deps.config, deps.bootstrap),
        adapter_path: a.adapterPath,
        test_path: await testFile(a.pipelineId, a.dataset),
        output_path: join(workdir, 'eval-results.json'),
        max_new_tokens: a.input.eval.max_new_tokens,
        max_seq_length: a.input.hyperparameters.max_seq_length,
        threads: deps.config.trainer.threads,
      };
      await writeSpec(workdir, spec);
      const report = await runJobToCompletion(deps, {
        job: spec.job_name,
        request: trainerCommand(deps, 'eval', workdir),
        resultPath: spec.output_path,
        resultSchema: EvalReportSchema,
      });
      const step = a.input.hyperparameters.max_steps;
      const now = Date.now();
      const points = Object.entries({ base: report.base, tuned: report.tuned }).flatMap(([who, s]) =>
        s ? (['loss', 'perplexity', 'exact_match'] as const).map((k) => ({ key: `eval/${who}/${k}`, value: s[k], step, timestamp: now })) : [],
      );
      await logMetrics(deps.db, a.runId, points);
      await recordArtifact(deps.db, {
        runId: a.runId,
        path: 'eval/results.json',
        uri: 'file://' + spec.output_path,
        sizeBytes: (await stat(spec.output_path)).size,
        sha256: await sha256File(spec.output_path),
      });
      return report;
    },

    async mergeAdapter(a: { pipelineId: string; input: PipelineWorkflowInput; dataset: DatasetRef; adapterPath: string }): Promise<MergeReport> {
      const workdir = workdirFor(deps, a.pipelineId, 'merge');
      const spec: MergeJobSpec = {
        kind: 'merge',
        job_name: `${a.pipelineId}-merge`,
        base_model_path: resolveBaseModel(a.input.base_model, deps.config, deps.bootstrap),
        adapter_path: a.adapterPath,
        output_dir: join(workdir, 'merged'),
        heldout_path: await testFile(a.pipelineId, a.dataset),
        reference_path: join(workdir, 'reference.json'),
        max_seq_length: a.input.hyperparameters.max_seq_length,
        max_sequences: 64,
        threads: deps.config.trainer.threads,
      };
      await writeSpec(workdir, spec);
      return runJobToCompletion(deps, {
        job: spec.job_name,
        request: trainerCommand(deps, 'merge', workdir),
        resultPath: spec.reference_path,
        resultSchema: MergeReportSchema,
      });
    },
  };
}

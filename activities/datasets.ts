// preprocess stage: a new file becomes an immutable dataset version, or an existing version is resolved; and an
// upload's preparation job (POST /v1/datasets?wait=false), which fills in the version the request recorded.
import { mkdir } from 'node:fs/promises';
import { extname, basename, join } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import type { ActivityDeps } from './deps.js';
import type { PipelineWorkflowInput } from '../contracts/pipeline.js';
import { createDatasetVersion } from '../datasets/versions.js';
import { DatasetValidationError } from '../datasets/ingest/preprocess.js';
import { failDatasetVersion, findDatasetVersion, getDatasetAnyStatus, type DatasetRow } from '../db/repo/datasets.js';
import { PrepareReportSchema, type DatasetPreparationInput, type DatasetPreparationResult, type PrepareDatasetJobSpec, type PrepareReport } from '../contracts/data-prep.js';
import { prepareIssueView } from '../contracts/datasets.js';
import { completePreparedVersion, preparationJob, PrepareIssuesError, readIssues } from '../datasets/derive.js';
import { recordChildJob, setChildJobStatus } from '../db/repo/child-jobs.js';
import { baseModelInput } from '../jobs/inputs.js';
import { defineJob } from '../jobs/definition.js';
import { runJobToCompletion } from './run-job.js';
import { deterministicUuid } from '../lib/ids.js';
import { localPathFor } from '../lib/object-store.js';
import { BaseModelError, resolveBaseModel } from '../lib/base-models.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';

export interface DatasetRef {
  id: string;
  name: string;
  version: number;
  sha256: string;
  splits: { train: string; validation: string; test: string };
}

export const datasetRef = (row: DatasetRow): DatasetRef => {
  const splits = row.splits as Record<'train' | 'validation' | 'test', { path: string }>;
  return { id: row.id, name: row.name, version: row.version, sha256: row.sha256, splits: { train: splits.train.path, validation: splits.validation.path, test: splits.test.path } };
};

export function createDatasetActivities(deps: ActivityDeps) {
  return {
    async prepareDataset(a: { pipelineId: string; input: PipelineWorkflowInput }): Promise<DatasetRef> {
      const { input } = a;
      const ds = input.dataset;
      if (!('source_uri' in ds)) {
        const row = await findDatasetVersion(deps.db, input.organization_id, ds.name, ds.version);
        if (!row) throw nonRetryable(FailureType.NotFound, `dataset "${ds.name}" has no ${ds.version === 'latest' ? 'ready version' : `ready version ${ds.version}`} (a version still preparing, or failed, cannot be trained on)`);
        return datasetRef(row);
      }
      let tokenizerDir: string;
      try {
        tokenizerDir = resolveBaseModel(input.base_model, deps.config, deps.bootstrap);
      } catch (err) {
        if (err instanceof BaseModelError) throw nonRetryable(FailureType.BadInput, err.message);
        throw err;
      }
      const sourcePath = await localPathFor(deps.store, ds.source_uri, join(deps.home, 'work', a.pipelineId, 'source'));
      const format = ds.format ?? (extname(sourcePath).toLowerCase() === '.csv' ? 'csv' : 'jsonl');
      try {
        const row = await createDatasetVersion(deps, {
          id: deterministicUuid(`pipeline:${a.pipelineId}:dataset`),
          organizationId: input.organization_id,
          createdBy: input.requested_by,
          name: ds.name,
          format,
          sourcePath,
          displayName: basename(sourcePath),
          seed: ds.seed,
          splits: ds.splits,
          tokenizerDir,
          tags: [],
          transform: `preprocess(validate, normalise to chat messages, dedup exact, split seed=${ds.seed} ${ds.splits.train}/${ds.splits.validation}/${ds.splits.test}) of ${ds.source_uri}`,
        });
        return datasetRef(row);
      } catch (err) {
        if (err instanceof DatasetValidationError) throw nonRetryable(FailureType.BadInput, err.message, err.issues);
        throw err;
      }
    },

    /**
     * An upload's preparation job: prepare-dataset (count, dedup exact, split, token counts) on the raw file the
     * request stored, through the job executor, then the version made ready in one update. Bad input marks the
     * version failed with its issues. A retry after the update finds the version ready and does nothing again.
     */
    async prepareUploadedDataset(input: DatasetPreparationInput): Promise<DatasetPreparationResult> {
      const row = await getDatasetAnyStatus(deps.db, input.organization_id, input.dataset_id);
      if (!row) throw nonRetryable(FailureType.NotFound, `dataset version ${input.dataset_id} does not exist any more`);
      if (row.status === 'ready') {
        await setChildJobStatus(deps.db, input.job_id, 'succeeded', `version ${row.version} of "${row.name}" (${row.id})`);
        return { dataset_id: row.id, version: row.version, sha256: row.sha256 };
      }
      if (row.status === 'failed') throw nonRetryable(FailureType.BadInput, `dataset version ${row.id} failed its preparation`, { issues: row.issues });
      await recordChildJob(deps.db, preparationJob(input), 'running', 'preparing: reading, deduplicating and splitting the records');
      const { report, outputDir } = await runUploadPreparation(deps, input, row);
      await setChildJobStatus(deps.db, input.job_id, 'running', `storing ${report.records_out} records (${report.records_in} read)`);
      const meta = row.metadata as Record<string, unknown>;
      const done = await completePreparedVersion(
        deps,
        {
          id: row.id,
          organizationId: row.organizationId,
          createdBy: row.createdBy,
          name: row.name,
          format: row.format,
          tags: row.tags,
          transform: (row.lineage as { transform: string }).transform,
          parentDatasets: [],
          report,
          tokenizer: input.tokenizer,
          extraMetadata: meta,
        },
        (bucket, prefix) => deps.store.putDirectory(bucket, prefix, outputDir),
      );
      await setChildJobStatus(deps.db, input.job_id, 'succeeded', `version ${done.version} of "${done.name}" (${done.id}): ${done.numRecords} records`);
      return { dataset_id: done.id, version: done.version, sha256: done.sha256 };
    },
  };
}

/**
 * prepare-dataset on the raw upload, as a job on this worker's machine (the local executor: like a derive, its
 * sources are local paths the job runner does not fetch). On bad input (its exit code 2) the version ends failed
 * with the issues the command wrote, and the job fails with them, not with a log tail.
 */
async function runUploadPreparation(deps: ActivityDeps, input: DatasetPreparationInput, row: DatasetRow): Promise<{ report: PrepareReport; outputDir: string }> {
  const upload = input.upload!;
  if (deps.executor.kind !== 'local')
    throw nonRetryable(FailureType.NotConfigured, `dataset preparation runs on the local executor only (scheduler.executor is ${deps.executor.kind}): its inputs are files the job runner does not fetch`);
  const work = join(deps.home, 'work', `dataset-prep-${input.dataset_id}`);
  await mkdir(join(work, 'scratch'), { recursive: true });
  const source = await localPathFor(deps.store, upload.raw_uri, join(work, 'raw'));
  const issuesPath = join(work, 'issues.json');
  const outputDir = join(work, 'output');
  const spec: PrepareDatasetJobSpec = {
    kind: 'prepare-dataset',
    job_name: `dataset-prep-${input.dataset_id}`,
    sources: [{ path: source, format: upload.format, display_name: upload.display_name, text_unit: 'line', text_field: 'text' }],
    split_of: {},
    parents: [],
    operations: input.request.operations,
    split: input.request.split,
    tokenizer_path: 'input:tokenizer_path',
    output_dir: outputDir,
    report_path: 'output:report_path',
    issues_path: issuesPath,
    work_dir: join(work, 'scratch'),
    memory_budget_mb: 1024,
    max_errors: 20,
    threads: deps.config.trainer.threads,
  };
  try {
    const { result } = await runJobToCompletion(deps, {
      job: defineJob({
        name: `dataset-prep-${input.dataset_id}`,
        kind: 'prepare-dataset',
        organizationId: input.organization_id,
        tool: 'trainer',
        spec,
        inputs: { tokenizer_path: await baseModelInput(deps, input.tokenizer) },
        outputs: { report_path: 'file' },
        resultField: 'report_path',
      }),
      resultSchema: PrepareReportSchema,
    });
    return { report: result, outputDir };
  } catch (err) {
    if (err instanceof ApplicationFailure && err.type === FailureType.BadJobSpec) {
      const issues = await readIssues(issuesPath);
      await failDatasetVersion(deps.db, row.organizationId, row.id, issues.map(prepareIssueView));
      throw nonRetryable(FailureType.BadInput, new PrepareIssuesError(issues).message, { issues });
    }
    throw err;
  }
}

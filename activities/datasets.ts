// preprocess stage: a new file becomes an immutable dataset version, or an existing version is resolved; and an
// upload's preparation job (POST /v1/datasets?wait=false), which fills in the version the request recorded.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { extname, basename, join } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import type { ActivityDeps } from './deps.js';
import type { PipelineWorkflowInput } from '../contracts/pipeline.js';
import { failDatasetVersion, findDatasetVersion, getDatasetAnyStatus, insertDatasetVersion, type DatasetRow } from '../db/repo/datasets.js';
import { PrepareReportSchema, type DatasetPreparationInput, type DatasetPreparationResult, type PrepareDatasetJobSpec, type PrepareReport } from '../contracts/data-prep.js';
import { prepareIssueView, type UploadFormat } from '../contracts/datasets.js';
import { completePreparedVersion, preparationJob, PrepareIssuesError, readIssues, runPrepareDataset } from '../datasets/derive.js';
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
      try {
        resolveBaseModel(input.base_model, deps.config, deps.bootstrap);
      } catch (err) {
        if (err instanceof BaseModelError) throw nonRetryable(FailureType.BadInput, err.message);
        throw err;
      }
      // The same preparation an upload's job runs (prepare-dataset through the executor), on a version recorded
      // preparing first: its id comes from the pipeline's, so a retried activity carries on with the same one.
      const id = deterministicUuid(`pipeline:${a.pipelineId}:dataset`);
      const prep: DatasetPreparationInput = {
        organization_id: input.organization_id,
        requested_by: input.requested_by,
        job_id: deterministicUuid(`dataset-preparation:${id}`),
        parent_id: id,
        dataset_id: id,
        name: ds.name,
        tokenizer: input.base_model,
        request: { operations: [{ op: 'dedup_exact', against_parents: false }], split: { seed: ds.seed, ...ds.splits }, tags: [] },
        upload: { raw_uri: ds.source_uri, format: ds.format ?? (extname(new URL(ds.source_uri).pathname).toLowerCase() === '.csv' ? 'csv' : 'jsonl'), display_name: basename(new URL(ds.source_uri).pathname) },
      };
      const row = (await getDatasetAnyStatus(deps.db, input.organization_id, id)) ?? (await recordSourceVersion(deps, prep, a.pipelineId, `preprocess(validate, normalise to chat messages, dedup exact, split seed=${ds.seed} ${ds.splits.train}/${ds.splits.validation}/${ds.splits.test}) of ${ds.source_uri}`));
      if (row.status === 'failed') throw nonRetryable(FailureType.BadInput, `dataset version ${row.id} of ${ds.source_uri} was refused`, row.issues);
      return datasetRef(row.status === 'ready' ? row : await prepareRawVersion(deps, prep, row));
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
      const done = await prepareRawVersion(deps, input, row, (message) => setChildJobStatus(deps.db, input.job_id, 'running', message).then(() => undefined));
      await setChildJobStatus(deps.db, input.job_id, 'succeeded', `version ${done.version} of "${done.name}" (${done.id}): ${done.numRecords} records`);
      return { dataset_id: done.id, version: done.version, sha256: done.sha256 };
    },
  };
}

/**
 * A preparing version made ready: prepare-dataset on its raw file through the job executor, the prepared files
 * stored beside it and its row filled in by one update. `stage` hears what it is doing.
 */
async function prepareRawVersion(deps: ActivityDeps, input: DatasetPreparationInput, row: DatasetRow, stage: (message: string) => Promise<void> = async () => undefined): Promise<DatasetRow> {
  const { report, outputDir } = await runUploadPreparation(deps, input, row);
  await stage(`storing ${report.records_out} records (${report.records_in} read)`);
  return completePreparedVersion(
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
      extraMetadata: row.metadata as Record<string, unknown>,
    },
    (bucket, prefix) => deps.store.putDirectory(bucket, prefix, outputDir),
  );
}

/** A pipeline's source file recorded as a preparing version (its raw file is where the pipeline names it). */
async function recordSourceVersion(deps: ActivityDeps, prep: DatasetPreparationInput, pipelineId: string, transform: string): Promise<DatasetRow> {
  const upload = prep.upload!;
  const local = await localPathFor(deps.store, upload.raw_uri, join(deps.home, 'work', pipelineId, 'source'));
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of createReadStream(local)) {
    hash.update(chunk as Buffer);
    size += (chunk as Buffer).length;
  }
  const sha256 = hash.digest('hex');
  const split = prep.request.split!;
  return insertDatasetVersion(deps.db, {
    id: prep.dataset_id,
    organizationId: prep.organization_id,
    name: prep.name,
    format: upload.format as UploadFormat,
    storagePath: `${upload.raw_uri.slice(0, upload.raw_uri.lastIndexOf('/') + 1)}`,
    sizeBytes: size,
    numRecords: 0,
    sha256,
    schema: {},
    splits: null,
    metadata: { source: { name: upload.display_name, uri: upload.raw_uri, sha256, size_bytes: size }, seed: split.seed, split_ratios: { train: split.train, validation: split.validation, test: split.test }, tokenizer: prep.tokenizer, pipeline_id: pipelineId },
    tags: [],
    lineage: { parent_datasets: [], transform },
    status: 'preparing',
    jobId: null,
    createdBy: prep.requested_by,
  });
}

/**
 * prepare-dataset on the raw upload, as a job on this worker's machine (the local executor: like a derive, its
 * sources are local paths the job runner does not fetch; with a cluster executor, the same command in this
 * worker's process). On bad input (its exit code 2) the version ends failed
 * with the issues the command wrote, and the job fails with them, not with a log tail.
 */
async function runUploadPreparation(deps: ActivityDeps, input: DatasetPreparationInput, row: DatasetRow): Promise<{ report: PrepareReport; outputDir: string }> {
  const upload = input.upload!;
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
  const refused = async (issues: Awaited<ReturnType<typeof readIssues>>): Promise<never> => {
    await failDatasetVersion(deps.db, row.organizationId, row.id, issues.map(prepareIssueView));
    throw nonRetryable(FailureType.BadInput, new PrepareIssuesError(issues).message, { issues });
  };
  if (deps.executor.kind !== 'local') {
    // A cluster executor's job runner fetches no list of files: the same command and spec run on this worker.
    const local = { ...spec, tokenizer_path: resolveBaseModel(input.tokenizer, deps.config, deps.bootstrap), report_path: join(work, 'report.json') };
    try {
      return { report: await runPrepareDataset(deps, local, join(work, 'spec.json')), outputDir };
    } catch (err) {
      if (err instanceof PrepareIssuesError) return refused(err.issues);
      throw err;
    }
  }
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
    if (err instanceof ApplicationFailure && err.type === FailureType.BadJobSpec) return refused(await readIssues(issuesPath));
    throw err;
  }
}

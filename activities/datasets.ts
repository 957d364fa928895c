// preprocess stage: a new file becomes an immutable dataset version, or an existing version is resolved; and an
// upload's preparation job (POST /v1/datasets?wait=false), which fills in the version the request recorded.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { extname, basename, join } from 'node:path';
import type { ActivityDeps } from './deps.js';
import type { PipelineWorkflowInput } from '../contracts/pipeline.js';
import { failDatasetVersion, findDatasetVersion, getDatasetAnyStatus, insertDatasetVersion, type DatasetRow } from '../db/repo/datasets.js';
import type { DatasetPreparationInput, DatasetPreparationResult, PrepareReport } from '../contracts/data-prep.js';
import { prepareIssueView, type UploadFormat } from '../contracts/datasets.js';
import { completePreparedVersion, preparationJob, rawPreparationInput, versionPrefix } from '../datasets/derive.js';
import { recordChildJob, setChildJobStatus } from '../db/repo/child-jobs.js';
import { baseModelInput } from '../jobs/inputs.js';
import { FILLED_BY_RUNNER, preparationJobDefinition, readingMessage, runPreparationJob, type PreparationSources } from './dataset-prep.js';
import { deterministicUuid } from '../lib/ids.js';
import { copyPrefix, localPathFor } from '../lib/object-store.js';
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
      const prep = rawPreparationInput({
        id,
        organizationId: input.organization_id,
        requestedBy: input.requested_by,
        name: ds.name,
        tokenizer: input.base_model,
        split: { seed: ds.seed, ...ds.splits },
        tags: [],
        upload: { raw_uri: ds.source_uri, format: ds.format ?? (extname(new URL(ds.source_uri).pathname).toLowerCase() === '.csv' ? 'csv' : 'jsonl'), display_name: basename(new URL(ds.source_uri).pathname) },
      });
      const row = (await getDatasetAnyStatus(deps.db, input.organization_id, id)) ?? (await recordSourceVersion(deps, prep, a.pipelineId, `preprocess(validate, normalise to chat messages, dedup exact, split seed=${ds.seed} ${ds.splits.train}/${ds.splits.validation}/${ds.splits.test}) of ${ds.source_uri}`));
      if (row.status === 'failed') throw nonRetryable(FailureType.BadInput, `dataset version ${row.id} of ${ds.source_uri} was refused`, row.issues);
      if (row.status === 'ready') return datasetRef(row);
      // The job reads the copy in the datasets bucket, which a pod can fetch (the source may be a worker's file).
      const stored = (row.metadata as { source: { raw_uri: string } }).source.raw_uri;
      return datasetRef(await prepareRawVersion(deps, { ...prep, upload: { ...prep.upload!, raw_uri: stored } }, row));
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
  const { report, output } = await runUploadPreparation(deps, input, row, stage);
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
    (bucket, prefix) => copyPrefix(deps.store, output, bucket, prefix),
  );
}

/**
 * A pipeline's source file recorded as a preparing version, its bytes copied under the version's prefix in the
 * datasets bucket (as an upload's are) so the preparation job can fetch them on any executor.
 */
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
  const prefix = versionPrefix({ organizationId: prep.organization_id, name: prep.name, id: prep.dataset_id });
  const stored = await deps.store.putFile(deps.config.storage.buckets.datasets, `${prefix}/raw/source${formatSuffix(local)}`, local, sha256);
  const split = prep.request.split!;
  return insertDatasetVersion(deps.db, {
    id: prep.dataset_id,
    organizationId: prep.organization_id,
    name: prep.name,
    format: upload.format as UploadFormat,
    storagePath: `${stored.uri.slice(0, stored.uri.indexOf(`/${prefix}/`))}/${prefix}/`,
    sizeBytes: size,
    numRecords: 0,
    sha256,
    schema: {},
    splits: null,
    metadata: { source: { name: upload.display_name, uri: upload.raw_uri, raw_uri: stored.uri, sha256, size_bytes: size }, seed: split.seed, split_ratios: { train: split.train, validation: split.validation, test: split.test }, tokenizer: prep.tokenizer, pipeline_id: pipelineId },
    tags: [],
    lineage: { parent_datasets: [], transform },
    status: 'preparing',
    jobId: null,
    createdBy: prep.requested_by,
  });
}

/** The name's format extension with its compression's, if any: "a.jsonl.gz" -> ".jsonl.gz", "b.csv" -> ".csv". */
function formatSuffix(path: string): string {
  const last = extname(path);
  return /^\.(gz|zst)$/i.test(last) ? `${extname(path.slice(0, -last.length))}${last}` : last;
}

/**
 * prepare-dataset on the raw upload, through the job executor like a derive (datasets/dataset-prep.ts): the job
 * runner fetches the raw file with the job's own credentials. On bad input (the command's exit code 2) the version
 * ends failed with the issues the command wrote, and the job fails with them, not with a log tail.
 */
async function runUploadPreparation(deps: ActivityDeps, input: DatasetPreparationInput, row: DatasetRow, stage: (message: string) => Promise<void>): Promise<{ report: PrepareReport; output: string }> {
  const upload = input.upload!;
  const sources: PreparationSources = {
    sources: [{ path: FILLED_BY_RUNNER, format: upload.format, display_name: upload.display_name, text_unit: 'line', text_field: 'text' }],
    split_of: {},
    uris: [upload.raw_uri],
  };
  const job = preparationJobDefinition(input, sources, [], await baseModelInput(deps, input.tokenizer), deps.config.trainer.threads);
  return runPreparationJob(
    deps,
    job,
    (issues) => failDatasetVersion(deps.db, row.organizationId, row.id, issues.map(prepareIssueView)),
    (p) => stage(readingMessage(p)),
  );
}

// preprocess stage: a new file becomes an immutable dataset version, or an existing version is resolved.
import { extname, basename, join } from 'node:path';
import type { ActivityDeps } from './deps.js';
import type { PipelineWorkflowInput } from '../contracts/pipeline.js';
import { createDatasetVersion } from '../datasets/versions.js';
import { DatasetValidationError } from '../datasets/ingest/preprocess.js';
import { findDatasetVersion, type DatasetRow } from '../db/repo/datasets.js';
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
        if (!row) throw nonRetryable(FailureType.NotFound, `dataset "${ds.name}" has no version ${ds.version}`);
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
  };
}

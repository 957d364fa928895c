// Catalogue bookkeeping of a pipeline: its row, its stage, and its tracking run.
import type { ActivityDeps } from './deps.js';
import type { PipelineStage, PipelineWorkflowInput } from '../contracts/pipeline.js';
import { setPipelineStage as setStage, upsertPipeline } from '../db/repo/pipelines.js';
import { getOrCreateExperiment } from '../db/repo/experiments.js';
import { createRun, setRunStatus } from '../db/repo/runs.js';
import { deterministicUuid } from '../lib/ids.js';
import { artifactRootUri } from '../lib/object-store.js';
import type { DatasetRef } from './datasets.js';
import { recordPipelineStageJob } from '../jobs/child-jobs.js';

/** The pipeline's one tracking run, derived from its id. */
const pipelineRunId = (pipelineId: string): string => deterministicUuid(`pipeline:${pipelineId}:run`);

export function createPipelineRecordActivities(deps: ActivityDeps) {
  return {
    async recordPipeline(a: { pipelineId: string; input: PipelineWorkflowInput }): Promise<void> {
      await upsertPipeline(deps.db, {
        id: a.pipelineId,
        organizationId: a.input.organization_id,
        modelName: a.input.model_name,
        datasetName: a.input.dataset.name,
        stage: 'queued',
        input: a.input,
        createdBy: a.input.requested_by,
      });
    },

    async setPipelineStage(a: { pipelineId: string; stage: PipelineStage; outcome?: string | undefined }): Promise<void> {
      await setStage(deps.db, a.pipelineId, a.stage, a.outcome);
      await recordPipelineStageJob(deps, { ...a, runId: pipelineRunId(a.pipelineId) });
    },

    /** One run per pipeline, in the experiment named after the model; its ID is derived from the pipeline. */
    async createTrackingRun(a: { pipelineId: string; input: PipelineWorkflowInput; dataset: DatasetRef }): Promise<{ runId: string }> {
      const runId = pipelineRunId(a.pipelineId);
      const artifactRoot = artifactRootUri(deps);
      const experimentId = await getOrCreateExperiment(deps.db, a.input.organization_id, a.input.model_name, artifactRoot);
      const hp = a.input.hyperparameters;
      await createRun(deps.db, {
        id: runId,
        organizationId: a.input.organization_id,
        experimentId,
        name: `${a.input.model_name}-${a.input.method}-${a.pipelineId.slice(0, 8)}`,
        userId: a.input.requested_by,
        artifactRoot,
        config: { ...a.input, dataset_version: a.dataset },
        params: {
          model: a.input.base_model,
          method: a.input.method,
          dataset: a.dataset.name,
          dataset_version: String(a.dataset.version),
          dataset_sha256: a.dataset.sha256,
          ...Object.fromEntries(Object.entries(hp).map(([k, v]) => [k, Array.isArray(v) ? v.join(',') : String(v)])),
        },
      });
      return { runId };
    },

    async finishRun(a: { runId: string; status: 'completed' | 'failed' | 'cancelled' }): Promise<void> {
      await setRunStatus(deps.db, a.runId, a.status);
    },
  };
}

// The MLflow wire shapes of experiments and runs (service.proto Experiment, Run, RunInfo, RunData).
import type { KeyValue } from '../../../db/repo/common.js';
import type { ExperimentRow } from '../../../db/repo/experiments.js';
import type { RunIo } from '../../../db/repo/run-inputs.js';
import { MLFLOW_STATUS, type RunData, type RunRow } from '../../../db/repo/runs.js';
import { wireDouble, wireExperimentId } from './common.js';
import { wireExperimentLocation, wireRunArtifactUri } from './artifact-store.js';

export function experimentView(e: ExperimentRow, tags: KeyValue[]) {
  return {
    experiment_id: wireExperimentId(e.id, e.organizationId),
    name: e.name,
    artifact_location: wireExperimentLocation(e.artifactLocation, wireExperimentId(e.id, e.organizationId)),
    lifecycle_stage: e.lifecycleStage,
    creation_time: e.createdAt.getTime(),
    last_update_time: e.lastUpdateTime ?? e.createdAt.getTime(),
    tags,
  };
}

export function runInfoView(r: RunRow) {
  return {
    run_id: r.id,
    run_uuid: r.id,
    run_name: r.name,
    experiment_id: wireExperimentId(r.experimentId, r.organizationId),
    user_id: r.userId,
    status: MLFLOW_STATUS[r.status],
    start_time: r.startTime.getTime(),
    ...(r.endTime ? { end_time: r.endTime.getTime() } : {}),
    artifact_uri: wireRunArtifactUri(r.artifactUri, wireExperimentId(r.experimentId, r.organizationId), r.id),
    lifecycle_stage: r.lifecycleStage,
  };
}

export function runView(r: RunRow, data: RunData) {
  return {
    info: runInfoView(r),
    data: {
      metrics: (data.metrics.get(r.id) ?? []).map((m) => ({ ...m, value: wireDouble(m.value) })),
      params: data.params.get(r.id) ?? [],
      tags: data.tags.get(r.id) ?? [],
    },
    ...runIoView(data.io?.get(r.id)),
  };
}

/** RunInputs and RunOutputs, with empty lists left out as protobuf JSON does. */
function runIoView(io: RunIo | undefined) {
  return {
    inputs: {
      ...(io?.datasets.length ? { dataset_inputs: io.datasets.map((d) => ({ ...(d.tags.length ? { tags: d.tags } : {}), dataset: d.dataset })) } : {}),
      ...(io?.modelInputs.length ? { model_inputs: io.modelInputs } : {}),
    },
    outputs: io?.modelOutputs.length ? { model_outputs: io.modelOutputs } : {},
  };
}

// All activities of the worker, built from injected dependencies.
import type { ActivityDeps } from './deps.js';
import { createPipelineRecordActivities } from './pipeline-records.js';
import { createDatasetActivities } from './datasets.js';
import { createDatasetPrepActivities } from './dataset-prep.js';
import { createTrainingActivities } from './training.js';
import { createEvaluationActivities } from './evaluation.js';
import { createConversionActivities } from './conversion.js';
import { createRegistryActivities } from './registry.js';
import { createModelRegistrationActivities } from './model-registration.js';
import { createHpoActivities } from './hpo.js';
import { createReloadActivities } from './reload.js';
import { createSubmittedJobActivities } from './submitted-jobs.js';

export function createActivities(deps: ActivityDeps) {
  return {
    ...createPipelineRecordActivities(deps),
    ...createDatasetActivities(deps),
    ...createDatasetPrepActivities(deps),
    ...createTrainingActivities(deps),
    ...createEvaluationActivities(deps),
    ...createConversionActivities(deps),
    ...createRegistryActivities(deps),
    ...createModelRegistrationActivities(deps),
    ...createHpoActivities(deps),
    ...createReloadActivities(deps),
    ...createSubmittedJobActivities(deps),
  };
}

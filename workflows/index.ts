// The workflow bundle entry point: every workflow the worker runs.
export { fineTunePipelineWorkflow } from './pipeline.js';
export { hpoSweepWorkflow, hpoTrialWorkflow } from './hpo.js';
export { pbtWorkflow, pbtMemberRoundWorkflow } from './pbt.js';
export { modelRegistrationWorkflow } from './model-registration.js';
export { checkpointWatchWorkflow } from './checkpoint-watch.js';
export { submittedJobWorkflow } from './jobs.js';
export { productionReloadWorkflow } from './reload.js';
export { datasetPreparationWorkflow } from './dataset-prep.js';

// The workflow bundle entry point: every workflow the worker runs.
export { fineTunePipelineWorkflow } from './pipeline.js';

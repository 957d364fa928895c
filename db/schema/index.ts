export * from './organizations.js';
export * from './datasets.js';
export * from './tracking.js';
export * from './models.js';
export * from './pipelines.js';
export * from './hpo.js';
export * from './scheduling.js';
export * from './jobs.js';

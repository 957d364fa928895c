import { bigint, boolean, doublePrecision, index, jsonb, pgTable, primaryKey, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import { organizations } from './organizations.js';

export const experiments = pgTable(
  'experiments',
  {
    id: text('id').primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    name: text('name').notNull(),
    artifactLocation: text('artifact_location').notNull(),
    lifecycleStage: text('lifecycle_stage').notNull().default('active'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    lastUpdateTime: bigint('last_update_time', { mode: 'number' }),
  },
  (t) => [uniqueIndex('experiments_org_name_idx').on(t.organizationId, t.name)],
);

export const experimentTags = pgTable(
  'experiment_tags',
  {
    experimentId: text('experiment_id')
      .notNull()
      .references(() => experiments.id),
    key: text('key').notNull(),
    value: text('value').notNull(),
  },
  (t) => [primaryKey({ columns: [t.experimentId, t.key] })],
);

export const runs = pgTable(
  'runs',
  {
    id: text('id').primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    experimentId: text('experiment_id')
      .notNull()
      .references(() => experiments.id),
    name: text('name').notNull(),
    status: text('status', { enum: ['queued', 'running', 'completed', 'failed', 'cancelled'] }).notNull(),
    userId: text('user_id').notNull(),
    artifactUri: text('artifact_uri').notNull(),
    config: jsonb('config').notNull().default({}),
    startTime: timestamp('start_time', { withTimezone: true }).notNull().defaultNow(),
    endTime: timestamp('end_time', { withTimezone: true }),
    // MLflow's soft delete: 'active' | 'deleted'; a deleted run is hidden from searches and refuses writes.
    lifecycleStage: text('lifecycle_stage', { enum: ['active', 'deleted'] }).notNull().default('active'),
    deletedTime: bigint('deleted_time', { mode: 'number' }),
  },
  (t) => [
    index('runs_experiment_idx').on(t.experimentId, t.startTime),
    // run search: one experiment's live runs, newest first (the default order).
    index('runs_search_idx').on(t.organizationId, t.experimentId, t.lifecycleStage, t.startTime),
  ],
);

export const runTags = pgTable(
  'run_tags',
  {
    runId: text('run_id')
      .notNull()
      .references(() => runs.id),
    key: text('key').notNull(),
    value: text('value').notNull(),
  },
  (t) => [primaryKey({ columns: [t.runId, t.key] })],
);

export const runParams = pgTable(
  'run_params',
  {
    runId: text('run_id')
      .notNull()
      .references(() => runs.id),
    key: text('key').notNull(),
    value: text('value').notNull(),
  },
  (t) => [primaryKey({ columns: [t.runId, t.key] })],
);

/**
 * Metric history: the primary key doubles as the per-run, per-key index by step, and makes a replayed batch a
 * no-op (ON CONFLICT DO NOTHING). run_id has no foreign key: a per-row check cost a quarter of a 1,000-point batch's
 * time. The run is still checked on every write: logMetrics inserts into latest_metrics (which keeps its foreign
 * key) in the same statement, so a point for a missing run fails the whole statement. Runs are never deleted
 * (MLflow's delete is a lifecycle stage). The key also carries is_nan (INCLUDE, migration 0022: drizzle cannot
 * declare it), so the console's series read every column they need from the index alone.
 */
export const metrics = pgTable(
  'metrics',
  {
    runId: text('run_id').notNull(),
    key: text('key').notNull(),
    step: bigint('step', { mode: 'number' }).notNull(),
    timestamp: bigint('timestamp', { mode: 'number' }).notNull(),
    value: doublePrecision('value').notNull(),
    isNan: boolean('is_nan').notNull().default(false),
  },
  (t) => [primaryKey({ columns: [t.runId, t.key, t.step, t.timestamp, t.value] })],
);

/** The newest point of every (run, key), kept on write so run pages never scan the history. */
export const latestMetrics = pgTable(
  'latest_metrics',
  {
    runId: text('run_id')
      .notNull()
      .references(() => runs.id),
    key: text('key').notNull(),
    step: bigint('step', { mode: 'number' }).notNull(),
    timestamp: bigint('timestamp', { mode: 'number' }).notNull(),
    value: doublePrecision('value').notNull(),
    isNan: boolean('is_nan').notNull().default(false),
  },
  (t) => [primaryKey({ columns: [t.runId, t.key] }), index('latest_metrics_key_value_idx').on(t.key, t.value)],
);

export const runArtifacts = pgTable(
  'run_artifacts',
  {
    runId: text('run_id')
      .notNull()
      .references(() => runs.id),
    path: text('path').notNull(),
    uri: text('uri').notNull(),
    sizeBytes: bigint('size_bytes', { mode: 'number' }).notNull(),
    sha256: text('sha256').notNull(),
    metadata: jsonb('metadata').notNull().default({}),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.runId, t.path] })],
);

/**
 * Every object written through the artifact proxy or the /v1 artifact routes, by its key in the checkpoints
 * bucket. The catalogue answers listings (object stores have no directories) and keeps organizations apart:
 * a key belongs to the organization that first wrote it.
 */
export const artifactObjects = pgTable(
  'artifact_objects',
  {
    key: text('key').primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    sizeBytes: bigint('size_bytes', { mode: 'number' }).notNull(),
    sha256: text('sha256').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  // Listings are prefix scans: text_pattern_ops lets LIKE 'prefix/%' use the index under any collation.
  (t) => [index('artifact_objects_org_key_idx').on(t.organizationId, t.key.op('text_pattern_ops'))],
);

/** Datasets logged to an experiment (MLflow's datasets table): one row per (experiment, name, digest). */
export const mlflowDatasets = pgTable(
  'mlflow_datasets',
  {
    id: text('id').primaryKey(),
    experimentId: text('experiment_id')
      .notNull()
      .references(() => experiments.id),
    name: text('name').notNull(),
    digest: text('digest').notNull(),
    sourceType: text('source_type').notNull(),
    source: text('source').notNull(),
    schema: text('schema'),
    profile: text('profile'),
  },
  (t) => [uniqueIndex('mlflow_datasets_exp_name_digest_idx').on(t.experimentId, t.name, t.digest)],
);

/** A dataset used by a run, with the input's tags (e.g. mlflow.data.context = training). */
export const runDatasetInputs = pgTable(
  'run_dataset_inputs',
  {
    runId: text('run_id')
      .notNull()
      .references(() => runs.id),
    datasetId: text('dataset_id')
      .notNull()
      .references(() => mlflowDatasets.id),
    tags: jsonb('tags').$type<{ key: string; value: string }[]>().notNull().default([]),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.runId, t.datasetId] })],
);

/** MLflow 3 logged models: a model's metadata, its artifacts under <experiment>/models/<id>/artifacts. */
export const loggedModels = pgTable(
  'logged_models',
  {
    id: text('id').primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    experimentId: text('experiment_id')
      .notNull()
      .references(() => experiments.id),
    name: text('name').notNull(),
    artifactLocation: text('artifact_location').notNull(),
    modelType: text('model_type').notNull().default(''),
    sourceRunId: text('source_run_id'),
    status: text('status', { enum: ['LOGGED_MODEL_PENDING', 'LOGGED_MODEL_READY', 'LOGGED_MODEL_UPLOAD_FAILED'] }).notNull(),
    statusMessage: text('status_message').notNull().default(''),
    lifecycleStage: text('lifecycle_stage', { enum: ['active', 'deleted'] }).notNull().default('active'),
    creationTime: bigint('creation_time', { mode: 'number' }).notNull(),
    lastUpdatedTime: bigint('last_updated_time', { mode: 'number' }).notNull(),
  },
  (t) => [index('logged_models_search_idx').on(t.organizationId, t.experimentId, t.lifecycleStage, t.creationTime)],
);

export const loggedModelTags = pgTable(
  'logged_model_tags',
  {
    modelId: text('model_id')
      .notNull()
      .references(() => loggedModels.id),
    key: text('key').notNull(),
    value: text('value').notNull(),
  },
  (t) => [primaryKey({ columns: [t.modelId, t.key] })],
);

export const loggedModelParams = pgTable(
  'logged_model_params',
  {
    modelId: text('model_id')
      .notNull()
      .references(() => loggedModels.id),
    key: text('key').notNull(),
    value: text('value').notNull(),
  },
  (t) => [primaryKey({ columns: [t.modelId, t.key] })],
);

/**
 * Metrics logged for a logged model through a run (log-metric / log-batch with model_id), with the dataset they
 * were computed on: the model's `data.metrics` and what search by dataset matches.
 */
export const loggedModelMetrics = pgTable(
  'logged_model_metrics',
  {
    modelId: text('model_id')
      .notNull()
      .references(() => loggedModels.id),
    key: text('key').notNull(),
    timestamp: bigint('timestamp', { mode: 'number' }).notNull(),
    step: bigint('step', { mode: 'number' }).notNull(),
    runId: text('run_id').notNull(),
    value: doublePrecision('value').notNull(),
    isNan: boolean('is_nan').notNull().default(false),
    datasetName: text('dataset_name').notNull().default(''),
    datasetDigest: text('dataset_digest').notNull().default(''),
  },
  (t) => [primaryKey({ columns: [t.modelId, t.key, t.timestamp, t.step, t.runId] }), index('logged_model_metrics_dataset_idx').on(t.datasetName, t.datasetDigest)],
);

/** Models a run produced (outputs, with the step) or used (inputs). */
export const runModels = pgTable(
  'run_models',
  {
    runId: text('run_id')
      .notNull()
      .references(() => runs.id),
    modelId: text('model_id').notNull(),
    direction: text('direction', { enum: ['input', 'output'] }).notNull(),
    step: bigint('step', { mode: 'number' }).notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.runId, t.modelId, t.direction] })],
);

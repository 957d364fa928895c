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

// Metric history: the primary key doubles as the per-run, per-key index by step, and makes a replayed
// batch a no-op (ON CONFLICT DO NOTHING).
export const metrics = pgTable(
  'metrics',
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

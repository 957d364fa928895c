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
  },
  (t) => [uniqueIndex('experiments_org_name_idx').on(t.organizationId, t.name)],
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
  },
  (t) => [index('runs_experiment_idx').on(t.experimentId, t.startTime)],
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
  },
  (t) => [primaryKey({ columns: [t.runId, t.key] })],
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

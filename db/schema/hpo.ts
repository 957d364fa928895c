import { doublePrecision, index, integer, jsonb, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';
import { organizations } from './organizations.js';
import { experiments, runs } from './tracking.js';

/** Catalogue side of a sweep (workflow ID `hpo:<id>`): its configuration, status and best trial. */
export const hpoSweeps = pgTable(
  'hpo_sweeps',
  {
    id: text('id').primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    experimentId: text('experiment_id')
      .notNull()
      .references(() => experiments.id),
    strategy: text('strategy').notNull(),
    status: text('status', { enum: ['running', 'completed', 'cancelled', 'failed'] }).notNull(),
    config: jsonb('config').notNull(),
    /** sha256 of (base model or function, method, search space, objectives): warm start finds earlier sweeps by it. */
    spaceKey: text('space_key').notNull(),
    bestTrial: integer('best_trial'),
    createdBy: text('created_by').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('hpo_sweeps_org_created_idx').on(t.organizationId, t.createdAt), index('hpo_sweeps_space_idx').on(t.organizationId, t.spaceKey)],
);

/** One trial of a sweep (workflow ID `hpo:<sweep>:trial:<n>`), a tracked run in the sweep's experiment. */
export const hpoTrials = pgTable(
  'hpo_trials',
  {
    sweepId: text('sweep_id')
      .notNull()
      .references(() => hpoSweeps.id),
    number: integer('number').notNull(),
    runId: text('run_id')
      .notNull()
      .references(() => runs.id),
    status: text('status', { enum: ['running', 'completed', 'pruned', 'failed', 'cancelled'] }).notNull(),
    params: jsonb('params').notNull(),
    /** Final objective values in the sweep's objective order (completed trials). */
    objectiveValues: jsonb('objective_values'),
    metrics: jsonb('metrics').notNull().default({}),
    intermediate: jsonb('intermediate').notNull().default([]),
    steps: integer('steps').notNull().default(0),
    gpuSeconds: doublePrecision('gpu_seconds').notNull().default(0),
    reason: text('reason'),
    startedAt: timestamp('started_at', { withTimezone: true }).notNull().defaultNow(),
    endedAt: timestamp('ended_at', { withTimezone: true }),
  },
  (t) => [primaryKey({ columns: [t.sweepId, t.number] })],
);

/** Population-based training: what each member did in each round, and whose checkpoint it started from. */
export const pbtLineage = pgTable(
  'pbt_lineage',
  {
    sweepId: text('sweep_id')
      .notNull()
      .references(() => hpoSweeps.id),
    member: integer('member').notNull(),
    round: integer('round').notNull(),
    /** The member whose checkpoint this round started from (itself when it continued its own). */
    parentMember: integer('parent_member'),
    action: text('action', { enum: ['start', 'continue', 'exploit'] }).notNull(),
    params: jsonb('params').notNull(),
    step: integer('step').notNull(),
    value: doublePrecision('value'),
    checkpoint: text('checkpoint'),
    gpuSeconds: doublePrecision('gpu_seconds').notNull().default(0),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.sweepId, t.member, t.round] })],
);

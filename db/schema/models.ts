import { sql } from 'drizzle-orm';
import { integer, jsonb, pgTable, text, timestamp, uniqueIndex, index } from 'drizzle-orm/pg-core';
import { organizations } from './organizations.js';
import { runs } from './tracking.js';
import { datasets } from './datasets.js';

export const registeredModels = pgTable(
  'registered_models',
  {
    id: text('id').primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    name: text('name').notNull(),
    description: text('description').notNull().default(''),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [uniqueIndex('registered_models_org_name_idx').on(t.organizationId, t.name)],
);

export const MODEL_STAGES = ['none', 'staging', 'production', 'archived'] as const;

export const modelVersions = pgTable(
  'model_versions',
  {
    id: text('id').primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    modelId: text('model_id')
      .notNull()
      .references(() => registeredModels.id),
    version: integer('version').notNull(),
    stage: text('stage', { enum: MODEL_STAGES }).notNull(),
    runId: text('run_id').references(() => runs.id),
    datasetId: text('dataset_id').references(() => datasets.id),
    architecture: text('architecture').notNull(),
    baseModel: text('base_model').notNull(),
    method: text('method').notNull(),
    artifacts: jsonb('artifacts').notNull(),
    metrics: jsonb('metrics').notNull(),
    trainingConfig: jsonb('training_config').notNull(),
    lineage: jsonb('lineage').notNull(),
    tags: jsonb('tags').notNull().default({}),
    createdBy: text('created_by').notNull(),
    /** Idempotency key: the pipeline that registered this version (a retried activity finds it). */
    sourcePipeline: text('source_pipeline'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    stageChangedAt: timestamp('stage_changed_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    uniqueIndex('model_versions_model_version_idx').on(t.modelId, t.version),
    uniqueIndex('model_versions_source_pipeline_idx').on(t.sourcePipeline),
    // One production version per model name, enforced by the database, not by care.
    uniqueIndex('model_versions_one_production_idx').on(t.modelId).where(sql`${t.stage} = 'production'`),
    index('model_versions_org_idx').on(t.organizationId),
  ],
);

import { sql } from 'drizzle-orm';
import { integer, jsonb, pgTable, primaryKey, text, timestamp, uniqueIndex, index } from 'drizzle-orm/pg-core';
import { organizations } from './organizations.js';
import { runs } from './tracking.js';
import { datasets } from './datasets.js';
import { MODEL_STAGES, REGISTRATION_STATUSES } from '../../contracts/models.js';

export const registeredModels = pgTable(
  'registered_models',
  {
    id: text('id').primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    name: text('name').notNull(),
    description: text('description').notNull().default(''),
    /** Registered-model tags (MLflow's RegisteredModelTag), key -> value; updated with atomic jsonb operators. */
    tags: jsonb('tags').$type<Record<string, string>>().notNull().default({}),
    /** The highest version number ever issued: a deleted version's number is never reused. */
    lastVersion: integer('last_version').notNull().default(0),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    lastUpdatedAt: timestamp('last_updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [uniqueIndex('registered_models_org_name_idx').on(t.organizationId, t.name)],
);

export { MODEL_STAGES };

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
    /** Null for versions registered from a run's artifacts (MLflow, POST /v1/models/{name}/versions). */
    architecture: text('architecture'),
    baseModel: text('base_model'),
    method: text('method'),
    /** Format -> the copy of record: `{path, size_bytes, checksum, manifest, files}` (checksum: the manifest's SHA-256). */
    artifacts: jsonb('artifacts').notNull().default({}),
    /**
     * MLflow's ModelVersionStatus: a version is `pending_registration` while its files are copied under its own
     * prefix, then `ready`; a copy that failed leaves `failed_registration`. Only a ready version is pulled or served.
     */
    status: text('status', { enum: REGISTRATION_STATUSES }).notNull().default('ready'),
    /** Why a registration failed (MLflow's status_message), naming the file; null otherwise. */
    statusMessage: text('status_message'),
    /** The version's checksum of record: `sha256:` of its primary format's manifest (null: no files were registered). */
    checksum: text('checksum'),
    metrics: jsonb('metrics').notNull().default({}),
    trainingConfig: jsonb('training_config').notNull().default({}),
    lineage: jsonb('lineage').notNull().default({}),
    tags: jsonb('tags').$type<Record<string, string>>().notNull().default({}),
    /** Where the version's files are (MLflow's `source`): a run artifact URI or an object-store prefix. */
    source: text('source'),
    /** Where the files can be read when that differs from `source` (a `models:/<id>` source: the logged model's artifacts). */
    storageLocation: text('storage_location'),
    /** The MLflow logged model this version was registered from, if any. */
    loggedModelId: text('logged_model_id'),
    description: text('description').notNull().default(''),
    runLink: text('run_link'),
    createdBy: text('created_by').notNull(),
    /** Idempotency key: the pipeline that registered this version (a retried activity finds it). */
    sourcePipeline: text('source_pipeline'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    stageChangedAt: timestamp('stage_changed_at', { withTimezone: true }).notNull().defaultNow(),
    lastUpdatedAt: timestamp('last_updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    uniqueIndex('model_versions_model_version_idx').on(t.modelId, t.version),
    uniqueIndex('model_versions_source_pipeline_idx').on(t.sourcePipeline),
    // One production version per model name, enforced by the database, not by care.
    uniqueIndex('model_versions_one_production_idx').on(t.modelId).where(sql`${t.stage} = 'production'`),
    index('model_versions_org_idx').on(t.organizationId),
  ],
);

/** Named pointers to a version of a registered model (MLflow aliases: `models:/name@champion`). */
export const modelAliases = pgTable(
  'model_aliases',
  {
    modelId: text('model_id')
      .notNull()
      .references(() => registeredModels.id, { onDelete: 'cascade' }),
    alias: text('alias').notNull(),
    version: integer('version').notNull(),
  },
  (t) => [primaryKey({ columns: [t.modelId, t.alias] })],
);

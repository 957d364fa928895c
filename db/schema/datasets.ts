import { bigint, index, integer, jsonb, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import { organizations } from './organizations.js';
import { DATASET_STATUSES, UPLOAD_FORMATS } from '../../contracts/datasets.js';

// One row per immutable dataset version; a change is a new version with lineage to its parent. An upload's row
// exists from the request on (status preparing: the raw file stored, no splits yet); its preparation job fills in
// the splits and counts and makes it ready in one update, or marks it failed with the issues found.
export const datasets = pgTable(
  'datasets',
  {
    id: text('id').primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    name: text('name').notNull(),
    version: integer('version').notNull(),
    format: text('format', { enum: UPLOAD_FORMATS }).notNull(),
    storagePath: text('storage_path').notNull(),
    sizeBytes: bigint('size_bytes', { mode: 'number' }).notNull(),
    numRecords: integer('num_records').notNull(),
    sha256: text('sha256').notNull(),
    schema: jsonb('schema').notNull(),
    splits: jsonb('splits'),
    metadata: jsonb('metadata').notNull(),
    tags: text('tags').array().notNull(),
    lineage: jsonb('lineage').notNull(),
    status: text('status', { enum: DATASET_STATUSES }).notNull().default('ready'),
    /** failed: the issues that refused it (file, record, field, message) */
    issues: jsonb('issues'),
    /** the preparation job that makes (or made) this version ready */
    jobId: text('job_id'),
    createdBy: text('created_by').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    uniqueIndex('datasets_org_name_version_idx').on(t.organizationId, t.name, t.version),
    index('datasets_org_created_idx').on(t.organizationId, t.createdAt),
  ],
);

import { bigint, index, integer, jsonb, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import { organizations } from './organizations.js';
import { UPLOAD_FORMATS } from '../../contracts/datasets.js';

// One row per immutable dataset version; a change is a new version with lineage to its parent.
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
    splits: jsonb('splits').notNull(),
    metadata: jsonb('metadata').notNull(),
    tags: text('tags').array().notNull(),
    lineage: jsonb('lineage').notNull(),
    createdBy: text('created_by').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    uniqueIndex('datasets_org_name_version_idx').on(t.organizationId, t.name, t.version),
    index('datasets_org_created_idx').on(t.organizationId, t.createdAt),
  ],
);

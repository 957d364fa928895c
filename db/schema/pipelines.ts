import { sql } from 'drizzle-orm';
import { bigserial, index, jsonb, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import { organizations } from './organizations.js';

/** Catalogue side of a pipeline workflow (workflow ID `pipeline:<id>`), for listing without Temporal. */
export const pipelines = pgTable(
  'pipelines',
  {
    id: text('id').primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    modelName: text('model_name').notNull(),
    datasetName: text('dataset_name').notNull(),
    stage: text('stage').notNull(),
    outcome: text('outcome'),
    input: jsonb('input').notNull(),
    createdBy: text('created_by').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('pipelines_org_created_idx').on(t.organizationId, t.createdAt)],
);

export const schedules = pgTable(
  'schedules',
  {
    id: text('id').primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    name: text('name').notNull(),
    spec: jsonb('spec').notNull(),
    pipeline: jsonb('pipeline').notNull(),
    createdBy: text('created_by').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [uniqueIndex('schedules_org_name_idx').on(t.organizationId, t.name)],
);

// Transactional outbox: a state change and the event it emits commit together; a relay publishes to Kafka.
export const outbox = pgTable(
  'outbox',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    topic: text('topic').notNull(),
    key: text('key').notNull(),
    payload: jsonb('payload').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    publishedAt: timestamp('published_at', { withTimezone: true }),
  },
  (t) => [index('outbox_unpublished_idx').on(t.id).where(sql`${t.publishedAt} is null`)],
);

/**
 * Who may publish the outbox now. One holder at a time keeps per-key order; the lease expires so a crashed
 * relay is replaced without anyone holding a transaction open across a send to the broker.
 */
export const relayLeases = pgTable('relay_leases', {
  name: text('name').primaryKey(),
  holder: text('holder').notNull(),
  expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
});

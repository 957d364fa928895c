import { sql } from 'drizzle-orm';
import { check, integer, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';

// Tenancy from the first table: every other row names its organization.
export const organizations = pgTable('organizations', {
  id: text('id').primaryKey(),
  name: text('name').notNull().unique(),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
});

export const apiTokens = pgTable(
  'api_tokens',
  {
    id: text('id').primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    subject: text('subject').notNull(),
    role: text('role', { enum: ['admin', 'developer', 'approver', 'viewer'] }).notNull(),
    tokenSha256: text('token_sha256').notNull(),
    // A job's token: usable only to report metrics of this one run, and only until it expires.
    runId: text('run_id'),
    expiresAt: timestamp('expires_at', { withTimezone: true }),
    // Revocation is a timestamp, not a delete: the audit trail keeps naming the token it revoked.
    revokedAt: timestamp('revoked_at', { withTimezone: true }),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [uniqueIndex('api_tokens_token_sha256_idx').on(t.tokenSha256)],
);

export const auditLog = pgTable('audit_log', {
  id: text('id').primaryKey(),
  organizationId: text('organization_id')
    .notNull()
    .references(() => organizations.id),
  actor: text('actor').notNull(),
  action: text('action').notNull(),
  target: text('target').notNull(),
  detail: text('detail').notNull().default('{}'),
  outcome: text('outcome', { enum: ['ok', 'denied', 'failed'] }).notNull().default('ok'),
  requestId: text('request_id'),
  sourceAddress: text('source_address'),
  /** set on rows that aggregate repeats (401s per source address and minute): the key they are counted under */
  aggregateKey: text('aggregate_key'),
  /** how many identical events this row stands for (1 unless aggregated) */
  repeatCount: integer('repeat_count').notNull().default(1),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
}, (t) => [uniqueIndex('audit_log_aggregate_key_idx').on(t.aggregateKey)]);

/**
 * The catalogue's first administrator (`hanzo-ml admin bootstrap`). One row at most (the primary key is a
 * constant), so a second bootstrap of the same catalogue finds the claim and refuses, even when two run at once.
 */
export const catalogueBootstrap = pgTable(
  'catalogue_bootstrap',
  {
    id: integer('id').primaryKey().default(1),
    organizationId: text('organization_id').notNull(),
    subject: text('subject').notNull(),
    tokenId: text('token_id').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [check('catalogue_bootstrap_one_row', sql`${t.id} = 1`)],
);

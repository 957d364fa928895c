import { bigserial, index, jsonb, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import { organizations } from './organizations.js';

/**
 * Catalogue side of a submitted job (workflow ID `job:<id>`): listed and read without Temporal. `seq` orders the
 * list and is its cursor. The Idempotency-Key of the submit is unique per organization; a key older than its 24 h
 * window is released (set to null) by the next submit that reuses it. `parent` names what started a job that was
 * not submitted on its own ("pipeline:<id>" for a pipeline's stages, "sweep:<id>" for an HPO sweep's trials): such
 * rows are written by their parent's activities (db/repo/child-jobs.ts) and listed with `GET /v1/jobs?parent=`.
 */
export const jobs = pgTable(
  'jobs',
  {
    seq: bigserial('seq', { mode: 'number' }).notNull(),
    id: text('id').primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    name: text('name').notNull(),
    submittedBy: text('submitted_by').notNull(),
    type: text('type').notNull(),
    kind: text('kind').notNull(),
    spec: jsonb('spec').notNull(),
    status: text('status').notNull(),
    message: text('message'),
    workflowId: text('workflow_id').notNull(),
    runId: text('run_id'),
    /** while queued: its place in the queue ({queue, position, reason}); stale once the status moves on */
    queue: jsonb('queue'),
    /** one entry per start or resume (contracts/jobs.ts JobSegment) */
    segments: jsonb('segments').notNull().default([]),
    parent: text('parent'),
    idempotencyKey: text('idempotency_key'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    startedAt: timestamp('started_at', { withTimezone: true }),
    endedAt: timestamp('ended_at', { withTimezone: true }),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    index('jobs_org_seq_idx').on(t.organizationId, t.seq),
    index('jobs_org_parent_seq_idx').on(t.organizationId, t.parent, t.seq),
    uniqueIndex('jobs_org_idempotency_key_idx').on(t.organizationId, t.idempotencyKey),
  ],
);

import { bigserial, index, jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import { organizations } from './organizations.js';

/**
 * What happened to a submitted job, in order: status changes, messages, each training step's metrics, each
 * checkpoint and, while it waits, each change of its place in its queue. `seq` is global and only grows, so it is the cursor of GET /v1/jobs/{id}/events and the SSE event id
 * a reconnecting client resumes after (Last-Event-ID).
 */
export const jobEvents = pgTable(
  'job_events',
  {
    seq: bigserial('seq', { mode: 'number' }).primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    jobId: text('job_id').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    level: text('level', { enum: ['info', 'warn', 'error'] }).notNull(),
    type: text('type', { enum: ['status', 'message', 'metrics', 'checkpoint', 'queue'] }).notNull(),
    message: text('message').notNull(),
    data: jsonb('data').$type<Record<string, unknown>>().notNull().default({}),
  },
  (t) => [index('job_events_job_seq_idx').on(t.jobId, t.seq)],
);

import { bigint, index, integer, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

/**
 * The per-organization admission gate in front of the executor (jobs/queue/admission.ts): one row per logical job
 * that waits for or holds one of its organization's scheduler.quotas job slots (max_concurrent_jobs), and, in the
 * embedded mode, the machine's GPUs it was given. A row whose holder stopped heartbeating is taken back.
 */
export const jobAdmissions = pgTable(
  'job_admissions',
  {
    jobName: text('job_name').primaryKey(),
    organizationId: text('organization_id').notNull(),
    /** higher first (jobs/queue/kueue-objects.ts priorityValue) */
    priority: integer('priority').notNull(),
    gpus: integer('gpus').notNull(),
    /** local executor: the CUDA device indices it holds */
    gpuIndices: integer('gpu_indices').array().notNull().default([]),
    state: text('state', { enum: ['waiting', 'admitted'] }).notNull(),
    /** arrival order within a priority (a sequence, not a clock: two workers' clocks may differ) */
    seq: bigint('seq', { mode: 'number' }).generatedAlwaysAsIdentity(),
    requestedAt: timestamp('requested_at', { withTimezone: true }).notNull().defaultNow(),
    heartbeatAt: timestamp('heartbeat_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('job_admissions_org_state_idx').on(t.organizationId, t.state)],
);

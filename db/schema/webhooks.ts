import { bigserial, index, integer, jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import { organizations } from './organizations.js';

/**
 * An organization's webhook endpoints (POST /v1/webhooks, admins only): where the terminal state of each of its jobs
 * is POSTed, signed with the endpoint's secret (Standard Webhooks). The secret is kept to sign with, so it is
 * stored as given (shown once at creation, never listed).
 */
export const webhookEndpoints = pgTable(
  'webhook_endpoints',
  {
    id: text('id').primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    url: text('url').notNull(),
    events: text('events').array().notNull(),
    secret: text('secret').notNull(),
    createdBy: text('created_by').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    deletedAt: timestamp('deleted_at', { withTimezone: true }),
  },
  (t) => [index('webhook_endpoints_org_idx').on(t.organizationId)],
);

/**
 * One delivery of one event to one endpoint: written in the transaction that ends the job (so an ended job never
 * loses its deliveries), then sent by the delivery relay (events/webhooks.ts) until the receiver answers 2xx or the
 * attempts run out. Its id is the webhook-id header of every attempt, so a receiver can drop repeats.
 */
export const webhookDeliveries = pgTable(
  'webhook_deliveries',
  {
    seq: bigserial('seq', { mode: 'number' }).notNull(),
    id: text('id').primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    endpointId: text('endpoint_id')
      .notNull()
      .references(() => webhookEndpoints.id),
    eventType: text('event_type').notNull(),
    payload: jsonb('payload').notNull(),
    /** pending, delivered, or failed (attempts exhausted, or the endpoint was deleted) */
    state: text('state').notNull().default('pending'),
    attempts: integer('attempts').notNull().default(0),
    nextAttemptAt: timestamp('next_attempt_at', { withTimezone: true }).notNull().defaultNow(),
    /** a relay that claimed the row holds it until then; a crashed relay's claim lapses */
    claimedUntil: timestamp('claimed_until', { withTimezone: true }),
    lastError: text('last_error'),
    deliveredAt: timestamp('delivered_at', { withTimezone: true }),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('webhook_deliveries_due_idx').on(t.state, t.nextAttemptAt), index('webhook_deliveries_endpoint_idx').on(t.endpointId, t.seq)],
);

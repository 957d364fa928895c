// Webhook endpoints of an organization and the deliveries of its job events to them. A delivery row is written in
// the transaction that ends the job; the relay (events/webhooks.ts) claims due rows, sends and records the outcome.
import { randomUUID } from 'node:crypto';
import { and, asc, desc, eq, inArray, isNull, lte, or, sql } from 'drizzle-orm';
import type { Db } from '../client.js';
import { webhookDeliveries, webhookEndpoints } from '../schema/index.js';
import type { Tx } from './outbox.js';

export type WebhookEndpointRow = typeof webhookEndpoints.$inferSelect;
export type WebhookDeliveryRow = typeof webhookDeliveries.$inferSelect;

export async function insertWebhookEndpoint(db: Tx, row: Omit<typeof webhookEndpoints.$inferInsert, 'createdAt' | 'deletedAt'>): Promise<WebhookEndpointRow> {
  const [inserted] = await db.insert(webhookEndpoints).values(row).returning();
  return inserted!;
}

export async function listWebhookEndpoints(db: Db, organizationId: string): Promise<WebhookEndpointRow[]> {
  return db
    .select()
    .from(webhookEndpoints)
    .where(and(eq(webhookEndpoints.organizationId, organizationId), isNull(webhookEndpoints.deletedAt)))
    .orderBy(desc(webhookEndpoints.createdAt));
}

export async function getWebhookEndpoint(db: Db, organizationId: string, id: string): Promise<WebhookEndpointRow | null> {
  const [row] = await db
    .select()
    .from(webhookEndpoints)
    .where(and(eq(webhookEndpoints.organizationId, organizationId), eq(webhookEndpoints.id, id), isNull(webhookEndpoints.deletedAt)));
  return row ?? null;
}

/** Deletes an endpoint (kept as a row: its deliveries name it); its pending deliveries are not sent. */
export async function deleteWebhookEndpoint(db: Tx, organizationId: string, id: string): Promise<boolean> {
  const rows = await db
    .update(webhookEndpoints)
    .set({ deletedAt: new Date() })
    .where(and(eq(webhookEndpoints.organizationId, organizationId), eq(webhookEndpoints.id, id), isNull(webhookEndpoints.deletedAt)))
    .returning({ id: webhookEndpoints.id });
  if (!rows.length) return false;
  await db
    .update(webhookDeliveries)
    .set({ state: 'failed', lastError: 'endpoint deleted' })
    .where(and(eq(webhookDeliveries.endpointId, id), eq(webhookDeliveries.state, 'pending')));
  return true;
}

/**
 * Queues one delivery of `eventType` to each of the organization's endpoints that subscribed to it. Runs in the
 * caller's transaction: the event and the change it reports commit together.
 */
export async function enqueueWebhookDeliveries(tx: Tx, organizationId: string, eventType: string, data: Record<string, unknown>): Promise<number> {
  const endpoints = await tx
    .select({ id: webhookEndpoints.id, events: webhookEndpoints.events })
    .from(webhookEndpoints)
    .where(and(eq(webhookEndpoints.organizationId, organizationId), isNull(webhookEndpoints.deletedAt)));
  const targets = endpoints.filter((e) => e.events.includes(eventType));
  if (!targets.length) return 0;
  const createdAt = Math.floor(Date.now() / 1000);
  await tx.insert(webhookDeliveries).values(
    targets.map((e) => {
      const id = `msg_${randomUUID().replaceAll('-', '')}`;
      // OpenAI's webhook event shape: the event's own id, its type and the object it is about.
      return { id, organizationId, endpointId: e.id, eventType, payload: { id: `evt_${id.slice(4)}`, object: 'event', created_at: createdAt, type: eventType, data } };
    }),
  );
  return targets.length;
}

export interface ClaimedDelivery {
  delivery: WebhookDeliveryRow;
  endpoint: WebhookEndpointRow;
}

/**
 * Claims up to `limit` deliveries that are due for `claimMs` (the catalogue's clock): a row another relay claimed
 * is skipped until its claim lapses, so several processes may run the relay and a crashed one's rows come back.
 * A deleted endpoint's rows are never claimed. The claim is kept to the millisecond, so the returned row's
 * claimedUntil names it exactly for recordDeliveryAttempt.
 */
export async function claimDueDeliveries(db: Db, limit: number, claimMs: number): Promise<ClaimedDelivery[]> {
  return db.transaction(async (tx) => {
    const due = await tx
      .select({ id: webhookDeliveries.id })
      .from(webhookDeliveries)
      .where(
        and(
          eq(webhookDeliveries.state, 'pending'),
          lte(webhookDeliveries.nextAttemptAt, sql`now()`),
          or(isNull(webhookDeliveries.claimedUntil), lte(webhookDeliveries.claimedUntil, sql`now()`)),
          inArray(webhookDeliveries.endpointId, tx.select({ id: webhookEndpoints.id }).from(webhookEndpoints).where(isNull(webhookEndpoints.deletedAt))),
        ),
      )
      .orderBy(asc(webhookDeliveries.nextAttemptAt))
      .limit(limit)
      .for('update', { skipLocked: true });
    const claimed: ClaimedDelivery[] = [];
    for (const { id } of due) {
      const [delivery] = await tx
        .update(webhookDeliveries)
        .set({ claimedUntil: sql`date_trunc('milliseconds', now() + ${claimMs} * interval '1 millisecond')` })
        .where(eq(webhookDeliveries.id, id))
        .returning();
      const [endpoint] = await tx.select().from(webhookEndpoints).where(eq(webhookEndpoints.id, delivery!.endpointId));
      claimed.push({ delivery: delivery!, endpoint: endpoint! });
    }
    return claimed;
  });
}

/**
 * Records one attempt: delivered, or retried at `retryAt`, or failed for good when `retryAt` is null. Only while
 * the row is still pending under the claim the attempt was made on (`claimedUntil`, as claimDueDeliveries returned
 * it): a late result never overwrites a row failed by its endpoint's deletion or claimed again by another relay.
 * Resolves false when the row had moved on and nothing was written.
 */
export async function recordDeliveryAttempt(
  db: Db,
  id: string,
  claimedUntil: Date,
  outcome: { ok: true } | { ok: false; error: string; retryAt: Date | null },
): Promise<boolean> {
  const attempts = sql`${webhookDeliveries.attempts} + 1`;
  const underClaim = and(eq(webhookDeliveries.id, id), eq(webhookDeliveries.state, 'pending'), eq(webhookDeliveries.claimedUntil, claimedUntil));
  const set = outcome.ok
    ? { state: 'delivered', attempts, deliveredAt: new Date(), claimedUntil: null, lastError: null }
    : { attempts, lastError: outcome.error.slice(0, 1000), claimedUntil: null, ...(outcome.retryAt ? { nextAttemptAt: outcome.retryAt } : { state: 'failed' }) };
  const rows = await db.update(webhookDeliveries).set(set).where(underClaim).returning({ id: webhookDeliveries.id });
  return rows.length > 0;
}

export async function listDeliveries(db: Db, organizationId: string, endpointId: string, limit = 50): Promise<WebhookDeliveryRow[]> {
  return db
    .select()
    .from(webhookDeliveries)
    .where(and(eq(webhookDeliveries.organizationId, organizationId), eq(webhookDeliveries.endpointId, endpointId)))
    .orderBy(desc(webhookDeliveries.seq))
    .limit(limit);
}

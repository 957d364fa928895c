import { and, asc, eq, gt, inArray, isNotNull, isNull, lt, or, sql } from 'drizzle-orm';
import type { Db } from '../client.js';
import { outbox, relayLeases } from '../schema/index.js';
import type { EventTopic } from '../../contracts/events.js';

export type Tx = Parameters<Parameters<Db['transaction']>[0]>[0] | Db;

export const TOPICS = {
  jobs: 'jobs',
  metrics: 'metrics',
  models: 'models',
  gpu: 'gpu',
  datasets: 'datasets',
  pipelines: 'pipelines',
  audit: 'audit',
} as const satisfies Record<EventTopic, EventTopic>;

/** Records an event in the same transaction as the change it describes (the relay publishes it later). */
export async function emitEvent(
  tx: Tx,
  organizationId: string,
  topic: keyof typeof TOPICS,
  key: string,
  payload: Record<string, unknown>,
): Promise<void> {
  await tx.insert(outbox).values({ organizationId, topic: TOPICS[topic], key, payload: { ...payload, timestamp: new Date().toISOString() } });
}

export type OutboxRow = typeof outbox.$inferSelect;

/** The one lease a relay must hold to publish the outbox (relay_leases.name). */
const RELAY_LEASE = 'outbox';

/**
 * Takes the relay lease for `holder`, or renews it: false while another holder's lease runs. Expiry is the
 * catalogue's clock (now()), so relays on machines whose clocks differ agree on it.
 */
export async function acquireRelayLease(db: Db, holder: string, leaseMs: number): Promise<boolean> {
  const until = sql`now() + ${leaseMs} * interval '1 millisecond'`;
  const rows = await db
    .insert(relayLeases)
    .values({ name: RELAY_LEASE, holder, expiresAt: until })
    .onConflictDoUpdate({
      target: relayLeases.name,
      set: { holder, expiresAt: until },
      setWhere: or(eq(relayLeases.holder, holder), lt(relayLeases.expiresAt, sql`now()`)),
    })
    .returning({ holder: relayLeases.holder });
  return rows.length > 0;
}

/** Gives the lease up (a relay stopping cleanly), so the next relay need not wait for it to expire. */
export async function releaseRelayLease(db: Db, holder: string): Promise<void> {
  await db.delete(relayLeases).where(and(eq(relayLeases.name, RELAY_LEASE), eq(relayLeases.holder, holder)));
}

/**
 * Publishes the oldest unpublished rows with `publish`, then marks them published. No transaction is open while
 * `publish` waits on the broker: the relay holds a lease instead (a short write that commits at once), and only
 * its holder reads and sends, so rows go out one batch after another in id order and per-key order holds.
 * At least once: a crash after publishing and before marking sends the rows again (the same event ids), by
 * this relay or, once the lease has expired, by the next. Should a holder stall past its lease while another
 * takes over, both send a prefix of the same unpublished rows in id order: a consumer that skips event ids it
 * has seen still sees every key's events in order.
 * Returns how many rows were published, or -1 when another relay holds the lease.
 */
export async function relayBatch(
  db: Db,
  lease: { holder: string; leaseMs: number },
  limit: number,
  publish: (rows: OutboxRow[]) => Promise<void>,
): Promise<number> {
  if (!(await acquireRelayLease(db, lease.holder, lease.leaseMs))) return -1;
  const rows = await db.select().from(outbox).where(isNull(outbox.publishedAt)).orderBy(asc(outbox.id)).limit(limit);
  if (rows.length === 0) return 0;
  await publish(rows);
  await db.update(outbox).set({ publishedAt: new Date() }).where(inArray(outbox.id, rows.map((r) => r.id)));
  return rows.length;
}

/** Deletes rows past retention: published ones, or (brokers: false, where nothing publishes) any. */
export async function pruneOutbox(db: Db, olderThan: Date, opts: { brokers: boolean }): Promise<number> {
  const old = lt(outbox.createdAt, olderThan);
  const gone = await db
    .delete(outbox)
    .where(opts.brokers ? and(old, isNotNull(outbox.publishedAt)) : old)
    .returning({ id: outbox.id });
  return gone.length;
}

/** An organization's events after `afterId`, oldest first (the SSE stream). */
export async function eventsAfter(db: Db, organizationId: string, afterId: number, limit: number, topics?: string[]): Promise<OutboxRow[]> {
  const conds = [sql`${outbox.organizationId} = ${organizationId}`, gt(outbox.id, afterId)];
  if (topics?.length) conds.push(inArray(outbox.topic, topics));
  return db.select().from(outbox).where(and(...conds)).orderBy(asc(outbox.id)).limit(limit);
}

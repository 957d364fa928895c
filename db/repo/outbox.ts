import { and, asc, gt, inArray, isNotNull, isNull, lt, sql } from 'drizzle-orm';
import type { Db } from '../client.js';
import { outbox } from '../schema/index.js';
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

/** A constant key for pg_advisory_xact_lock: one relay publishes at a time, so per-key order holds. */
const RELAY_LOCK = 0x686d6c72;

/**
 * Publishes the oldest unpublished rows with `publish` and marks them published, in one transaction that holds
 * the relay lock. A crash after publishing and before the commit publishes the rows again (at least once).
 * Returns how many rows were published, or -1 when another relay holds the lock.
 */
export async function relayBatch(db: Db, limit: number, publish: (rows: OutboxRow[]) => Promise<void>): Promise<number> {
  return db.transaction(async (tx) => {
    const locked = (await tx.execute(sql`select pg_try_advisory_xact_lock(${RELAY_LOCK}) as ok`)) as unknown as { rows: { ok: boolean }[] };
    if (!locked.rows[0]?.ok) return -1;
    const rows = await tx.select().from(outbox).where(isNull(outbox.publishedAt)).orderBy(asc(outbox.id)).limit(limit);
    if (rows.length === 0) return 0;
    await publish(rows);
    await tx.update(outbox).set({ publishedAt: new Date() }).where(inArray(outbox.id, rows.map((r) => r.id)));
    return rows.length;
  });
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

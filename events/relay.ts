// The outbox relay: publishes committed events to Kafka with an idempotent producer, keyed per resource, and
// marks them published. At least once: a crash (its own, or the broker's) between publishing and marking sends
// the rows again, with the same event_id. One relay at a time holds the catalogue's relay lease (never a
// transaction across a send), so any number of processes may run it; rows older than stream.retention are pruned.
import { randomUUID } from 'node:crypto';
import { Kafka, Partitioners, logLevel, type Producer } from 'kafkajs';
import type { Config } from '../contracts/config.js';
import { EVENT_TOPICS, kafkaTopic, type EventEnvelope, type EventTopic } from '../contracts/events.js';
import type { Db } from '../db/client.js';
import { pruneOutbox, relayBatch, releaseRelayLease, type OutboxRow } from '../db/repo/outbox.js';
import { durationMs } from '../lib/config.js';
import type { Logger } from '../lib/log.js';

export function envelopeOf(row: OutboxRow): EventEnvelope {
  return {
    event_id: String(row.id),
    topic: row.topic as EventTopic,
    key: row.key,
    organization_id: row.organizationId,
    time: row.createdAt.toISOString(),
    data: row.payload as Record<string, unknown>,
  };
}

export interface EventRelay {
  /** one round: publish what is pending; resolves with the number of rows published */
  drain(): Promise<number>;
  stop(): Promise<void>;
}

const PRUNE_EVERY_MS = 60_000;
/**
 * How long the relay lease lasts past its holder's last batch: how long a crashed relay's successor waits. It is
 * renewed before every batch, and a send is bounded well inside it (REQUEST_TIMEOUT_MS); should retries stretch
 * a send past it, the successor only sends the same rows again (see relayBatch).
 */
export const RELAY_LEASE_MS = 15_000;
const REQUEST_TIMEOUT_MS = 5_000;

export async function startEventRelay(o: { db: Db; config: Config; log: Logger; idleMs?: number }): Promise<EventRelay> {
  const { stream } = o.config;
  if (!stream.brokers) throw new Error('stream.brokers is not set');
  const kafka = new Kafka({
    clientId: stream.client_id,
    brokers: stream.brokers.split(',').map((b) => b.trim()),
    logLevel: logLevel.NOTHING,
    requestTimeout: REQUEST_TIMEOUT_MS,
    retry: { retries: 5, initialRetryTime: 200, maxRetryTime: 5000 },
  });
  const lease = { holder: randomUUID(), leaseMs: RELAY_LEASE_MS };
  // Idempotent: a retried send is not written twice by the broker, and order holds per partition. After a
  // failure the producer is replaced: a restarted broker may have forgotten its sequence numbers.
  let producer: Producer | null = null;
  let topicsReady = false;
  const connected = async (): Promise<Producer> => {
    if (producer) return producer;
    // Topics exist before the first send: the broker may not auto-create them. Done here, not at start-up, so a
    // relay starts (and waits) while the broker is down.
    if (!topicsReady) {
      const admin = kafka.admin();
      await admin.connect();
      try {
        const have = new Set(await admin.listTopics());
        const missing = EVENT_TOPICS.map((t) => kafkaTopic(stream.topic_prefix, t)).filter((t) => !have.has(t));
        if (missing.length) await admin.createTopics({ waitForLeaders: true, topics: missing.map((topic) => ({ topic, numPartitions: 3 })) });
        topicsReady = true;
      } finally {
        await admin.disconnect();
      }
    }
    const p = kafka.producer({ idempotent: true, maxInFlightRequests: 1, createPartitioner: Partitioners.DefaultPartitioner });
    await p.connect();
    producer = p;
    return p;
  };
  const reset = async (): Promise<void> => {
    const p = producer;
    producer = null;
    await p?.disconnect().catch(() => undefined);
  };

  const publish = async (rows: OutboxRow[]): Promise<void> => {
    const byTopic = new Map<string, OutboxRow[]>();
    for (const r of rows) byTopic.set(r.topic, [...(byTopic.get(r.topic) ?? []), r]);
    await (await connected()).sendBatch({
      acks: -1,
      timeout: REQUEST_TIMEOUT_MS,
      topicMessages: [...byTopic].map(([topic, rs]) => ({
        topic: kafkaTopic(stream.topic_prefix, topic as EventTopic),
        messages: rs.map((r) => ({ key: r.key, value: JSON.stringify(envelopeOf(r)), headers: { event_id: String(r.id), organization_id: r.organizationId } })),
      })),
    });
  };
  const drain = async (): Promise<number> => {
    let total = 0;
    for (;;) {
      const n = await relayBatch(o.db, lease, stream.relay_batch, publish);
      if (n <= 0) return total;
      total += n;
    }
  };

  let stopped = false;
  let lastPrune = 0;
  const loop = (async () => {
    while (!stopped) {
      try {
        const n = await drain();
        if (Date.now() - lastPrune > PRUNE_EVERY_MS) {
          lastPrune = Date.now();
          await pruneOutbox(o.db, new Date(Date.now() - durationMs(stream.retention)), { brokers: true });
        }
        if (n === 0) await new Promise((r) => setTimeout(r, o.idleMs ?? 200));
      } catch (err) {
        // The broker is down or restarting: nothing was marked published, the next round sends it again.
        o.log.warn('event relay: publish failed, retrying', { error: (err as Error).message });
        await reset();
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  })();
  return {
    drain,
    async stop() {
      stopped = true;
      await loop;
      await reset();
      await releaseRelayLease(o.db, lease.holder).catch((err: unknown) => o.log.warn('event relay: lease not released; it expires', { error: String(err) }));
    },
  };
}

/** Without brokers nothing publishes: rows are kept for SSE readers for stream.retention, then deleted. */
export function startOutboxPruner(o: { db: Db; config: Config; log: Logger }): { stop(): void } {
  const timer = setInterval(() => {
    pruneOutbox(o.db, new Date(Date.now() - durationMs(o.config.stream.retention)), { brokers: false }).catch((err: unknown) =>
      o.log.warn('outbox pruning failed', { error: String(err) }),
    );
  }, PRUNE_EVERY_MS);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}

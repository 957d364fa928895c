// The outbox relay against a real Kafka broker (KRaft, single node, from the Apache jars) and a real Postgres
// catalogue: events committed while the relay is killed mid-stream and while the broker is killed and restarted
// all reach a consumer reading every topic, at least once, in order per key, none missing compared with the
// outbox; published rows are pruned after retention.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isNull, count } from 'drizzle-orm';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { emitEvent, pruneOutbox } from '../db/repo/outbox.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { outbox } from '../db/schema/index.js';
import { EVENT_TOPICS, EventEnvelopeSchema, PAYLOAD_SCHEMAS, kafkaTopic } from '../contracts/events.js';
import { repoRoot } from '../lib/config.js';
import { startPostgres, type TestPostgres } from './support/postgres.js';
import { kafkaLibs, KAFKA_MISSING, startKafka, type TestKafka } from './support/kafka.js';

const PREFIX = 'hanzo.ml';
let pgServer: TestPostgres;
let kafka: TestKafka;
let cat: Catalogue;
let dbUrl: string;

function startRelay(): ChildProcess {
  const child = spawn(join(repoRoot, 'bin', 'hanzo-ml'), ['relay'], {
    env: {
      ...process.env,
      HANZO_ML_HOME: mkdtempSync(join(tmpdir(), 'hanzo-ml-relay-')),
      HANZO_ML_DATABASE_URL: dbUrl,
      HANZO_ML_STREAM_BROKERS: kafka.brokers,
      HANZO_ML_STREAM_RELAY_BATCH: '25',
      HANZO_ML_LOGGING_LEVEL: 'error',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  return child;
}
const killed = (c: ChildProcess) => new Promise<void>((r) => (c.exitCode !== null ? r() : (c.once('exit', () => r()), c.kill('SIGKILL'))));

let seq = 0;
/** Events across every kind of key: runs' metrics, jobs, models and audit rows, each a valid payload. */
async function emitSome(n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const s = seq++;
    const kind = s % 4;
    await cat.db.transaction(async (tx) => {
      if (kind === 0) await emitEvent(tx, 'dev', 'metrics', `run-${s % 7}`, { run_id: `run-${s % 7}`, step: s, metrics: { 'train/loss': 1 / (s + 1) } });
      else if (kind === 1) await emitEvent(tx, 'dev', 'jobs', `job-${s % 5}`, { event: 'job.submitted', job_id: `job-${s % 5}`, user_id: 'u', type: 'pipeline' });
      else if (kind === 2) await emitEvent(tx, 'dev', 'models', `model-${s % 3}`, { event: 'model.registered', name: `model-${s % 3}`, version: s, run_id: null });
      else await emitEvent(tx, 'org-b', 'audit', `/v1/x/${s % 4}`, { event: 'audit', actor: 'a', action: 'POST /v1/x', resource: `/v1/x/${s % 4}`, outcome: 'ok', request_id: null, source_address: null });
    });
  }
}

const unpublished = async () => (await cat.db.select({ n: count() }).from(outbox).where(isNull(outbox.publishedAt)))[0]!.n;

async function until(what: string, pred: () => Promise<boolean>, ms = 120_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await pred())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe.skipIf(!kafkaLibs())(`event relay to Kafka${kafkaLibs() ? '' : ` (${KAFKA_MISSING})`}`, () => {
  beforeAll(async () => {
    pgServer = await startPostgres();
    dbUrl = await pgServer.createDatabase('events');
    cat = await openCatalogue({ url: dbUrl });
    await seedDevOrganization(cat.db, 'dev', 'hanzo-ml-dev-token');
    await seedDevOrganization(cat.db, 'org-b', 'org-b-token');
    kafka = await startKafka();
  }, 180_000);
  afterAll(async () => {
    await kafka?.stop();
    await cat?.close();
    await pgServer?.stop();
  });

  it('delivers every event at least once, in order per key, through a relay crash and a broker restart', { timeout: 10 * 60_000 }, async () => {
    await emitSome(400);
    let relay = startRelay();
    // Kill the relay while it publishes and while new events keep being committed.
    await until('the relay to start publishing', async () => (await unpublished()) < 400);
    const writing = emitSome(200);
    await killed(relay);
    await writing;
    const left = await unpublished();
    expect(left).toBeGreaterThan(0);
    // The broker dies too, with events still pending; they wait in the outbox.
    await kafka.kill();
    relay = startRelay();
    await emitSome(100);
    await new Promise((r) => setTimeout(r, 2000));
    expect(await unpublished()).toBeGreaterThanOrEqual(left);
    await kafka.start();
    await emitSome(100);
    await until('the outbox to drain', async () => (await unpublished()) === 0, 5 * 60_000);
    await killed(relay);

    const rows = await cat.db.select().from(outbox).orderBy(outbox.id);
    expect(rows.length).toBe(800);
    const client = new Kafka({ clientId: 'events-test', brokers: [kafka.brokers], logLevel: logLevel.NOTHING });
    const consumer = client.consumer({ groupId: `check-${Date.now()}` });
    await consumer.connect();
    await consumer.subscribe({ topics: EVENT_TOPICS.map((t) => kafkaTopic(PREFIX, t)), fromBeginning: true });
    const seen = new Map<string, number[]>();
    const ids = new Set<string>();
    let received = 0;
    await consumer.run({
      eachMessage: async ({ message }) => {
        const env = EventEnvelopeSchema.parse(JSON.parse(message.value!.toString()));
        PAYLOAD_SCHEMAS[env.topic].parse(env.data);
        expect(message.key!.toString()).toBe(env.key);
        seen.set(env.key, [...(seen.get(env.key) ?? []), Number(env.event_id)]);
        ids.add(env.event_id);
        received++;
      },
    });
    await until('the consumer to read every event', async () => ids.size >= rows.length, 120_000);
    await consumer.disconnect();
    // None missing: every outbox row arrived (duplicates allowed: at least once).
    expect(rows.filter((r) => !ids.has(String(r.id))).map((r) => r.id)).toEqual([]);
    expect(received).toBeGreaterThanOrEqual(rows.length);
    // In order per key: dropping redeliveries, each key's events arrive in commit order.
    for (const [key, list] of seen) {
      const firsts: number[] = [];
      const had = new Set<number>();
      for (const id of list) {
        if (had.has(id)) continue;
        had.add(id);
        firsts.push(id);
      }
      expect([key, firsts]).toEqual([key, [...firsts].sort((a, b) => a - b)]);
      expect([key, firsts]).toEqual([key, rows.filter((r) => r.key === key).map((r) => r.id)]);
    }
  });

  it('prunes published rows past retention and keeps unpublished ones', async () => {
    await emitSome(3);
    const before = (await cat.db.select({ n: count() }).from(outbox))[0]!.n;
    const pruned = await pruneOutbox(cat.db, new Date(Date.now() + 60_000), { brokers: true });
    expect(pruned).toBe(before - 3);
    expect((await cat.db.select({ n: count() }).from(outbox))[0]!.n).toBe(3);
    expect(await unpublished()).toBe(3);
  });
});

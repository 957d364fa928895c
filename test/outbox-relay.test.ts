// The outbox relay's catalogue side (db/repo/outbox.ts) on PGlite: one holder of the relay lease at a time, no
// transaction open while a batch is being sent (PGlite has one connection, so a write made during the send would
// wait forever behind an open transaction), rows marked published only after the send, resent after a failed
// one, and a lease that expires or is given back. The broker side is test/events-kafka.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { acquireRelayLease, emitEvent, relayBatch, releaseRelayLease, type OutboxRow } from '../db/repo/outbox.js';
import { outbox } from '../db/schema/index.js';
import { isNull } from 'drizzle-orm';

let cat: Catalogue;
const within = <T>(ms: number, p: Promise<T>, what: string): Promise<T> =>
  Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms))]);

beforeAll(async () => {
  cat = await openCatalogue({});
  await seedDevOrganization(cat.db, 'dev', 'relay-test-token');
});
afterAll(async () => {
  await cat?.close();
});

describe('the outbox relay', () => {
  it('holds no transaction while it sends, lets no second relay send meanwhile, and marks rows only after the send', async () => {
    for (let i = 0; i < 3; i++) await emitEvent(cat.db, 'dev', 'jobs', `job-${i}`, { event: 'job.submitted', job_id: `job-${i}`, user_id: 'u', type: 'pipeline' });
    const a = { holder: 'relay-a', leaseMs: 10_000 };
    const sent: OutboxRow[][] = [];
    const n = await relayBatch(cat.db, a, 100, async (rows) => {
      // An API request committing an event while the batch is in flight: it must not wait on the relay.
      await within(2000, emitEvent(cat.db, 'dev', 'jobs', 'job-during-send', { event: 'job.submitted', job_id: 'x', user_id: 'u', type: 'pipeline' }), 'a write during the send');
      expect(await within(2000, relayBatch(cat.db, { holder: 'relay-b', leaseMs: 10_000 }, 100, async () => undefined), 'a second relay')).toBe(-1);
      expect((await cat.db.select().from(outbox).where(isNull(outbox.publishedAt))).length).toBe(4);
      sent.push(rows);
    });
    expect(n).toBe(3);
    expect(sent[0]!.map((r) => r.key)).toEqual(['job-0', 'job-1', 'job-2']);
    const left = await cat.db.select().from(outbox).where(isNull(outbox.publishedAt));
    expect(left.map((r) => r.key)).toEqual(['job-during-send']);
    await releaseRelayLease(cat.db, a.holder);
  });

  it('sends the same rows again after a failed send, in id order', async () => {
    const a = { holder: 'relay-c', leaseMs: 10_000 };
    await expect(relayBatch(cat.db, a, 100, async () => Promise.reject(new Error('broker down')))).rejects.toThrow('broker down');
    const again: string[] = [];
    expect(await relayBatch(cat.db, a, 100, async (rows) => void again.push(...rows.map((r) => r.key)))).toBe(1);
    expect(again).toEqual(['job-during-send']);
    expect(await relayBatch(cat.db, a, 100, async () => undefined)).toBe(0);
    await releaseRelayLease(cat.db, a.holder);
  });

  it('passes the lease on when it expires or is given back, never while it runs', async () => {
    expect(await acquireRelayLease(cat.db, 'x', 300)).toBe(true);
    expect(await acquireRelayLease(cat.db, 'y', 300)).toBe(false);
    expect(await acquireRelayLease(cat.db, 'x', 300)).toBe(true); // renewal
    await new Promise((r) => setTimeout(r, 400));
    expect(await acquireRelayLease(cat.db, 'y', 10_000)).toBe(true);
    expect(await acquireRelayLease(cat.db, 'x', 300)).toBe(false);
    await releaseRelayLease(cat.db, 'y');
    expect(await acquireRelayLease(cat.db, 'x', 300)).toBe(true);
  });
});

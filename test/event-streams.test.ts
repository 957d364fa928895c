// GET /v1/events served from one listener per process: the catalogue's query count does not grow with the number
// of streams, one caller holds at most limits.event_streams_per_token streams (429 beyond, a closed stream frees
// its slot), an organization's stream never carries another's events, and a stream resumed from its last id
// misses nothing. The real app (createApp) on an embedded PGlite catalogue; Temporal is not used by these routes
// and stands in as an empty client.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appWithoutTemporal } from './support/api-app.js';
import { openCatalogue, type Catalogue, type Db } from '../db/client.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { insertJob } from '../db/repo/jobs.js';
import { emitEvent } from '../db/repo/outbox.js';
import { testConfig, DEV_TOKEN } from './support/config.js';
import { readSse } from './support/sse.js';

const TOKEN_B = 'token-of-org-b';
const CAP = 3;
let catalogue: Catalogue;
let app: ReturnType<typeof appWithoutTemporal>;
/** catalogue queries started through the app's database handle */
let queries = 0;

/** The catalogue's handle, counting every query built on it (select, insert, update, delete, execute). */
function counting(db: Db): Db {
  const counted = new Set(['select', 'selectDistinct', 'insert', 'update', 'delete', 'execute']);
  return new Proxy(db, {
    get(target, prop, receiver) {
      if (typeof prop === 'string' && counted.has(prop)) queries++;
      const value = Reflect.get(target, prop, receiver) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

interface Stream {
  status: number;
  events: { id: number; organization: string; key: string }[];
  /** resolves once `n` events have arrived */
  waitFor(n: number): Promise<void>;
  close(): Promise<void>;
}

async function open(token: string, query = 'topics=jobs', headers: Record<string, string> = {}): Promise<Stream> {
  const res = await app.request(`/v1/events?${query}`, { headers: { authorization: `Bearer ${token}`, ...headers } });
  const events: Stream['events'] = [];
  if (res.status !== 200) return { status: res.status, events, waitFor: async () => {}, close: async () => void (await res.body?.cancel()) };
  const sse = readSse(res, (f) => {
    if (!f.data) return undefined;
    const env = JSON.parse(f.data) as { event_id: string; organization_id: string; key: string };
    return { id: Number(env.event_id), organization: env.organization_id, key: env.key };
  });
  return { status: res.status, events: sse.items, waitFor: sse.waitFor, close: sse.close };
}

const emit = (org: string, key: string) => emitEvent(catalogue.db, org, 'jobs', key, { job_id: key, state: 'running' });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  const loaded = testConfig({ HANZO_ML_LIMITS_EVENT_STREAMS_PER_TOKEN: String(CAP) });
  catalogue = await openCatalogue({});
  await seedDevOrganization(catalogue.db, 'dev', DEV_TOKEN);
  await seedDevOrganization(catalogue.db, 'org-b', TOKEN_B);
  app = appWithoutTemporal(counting(catalogue.db), loaded);
});
afterAll(async () => catalogue?.close());

describe('GET /v1/events from one shared listener', () => {
  it('answers every stream from one poller: the query rate is the same for 1 stream as for 3 of 3 callers', async () => {
    await emit('dev', 'before');
    const rate = async (streams: Stream[]): Promise<number> => {
      await Promise.all(streams.map((s) => s.waitFor(1))); // joined and caught up
      const start = queries;
      await sleep(1500);
      return queries - start;
    };
    const one = [await open(DEV_TOKEN)];
    const alone = await rate(one);
    const many = [...one, await open(DEV_TOKEN), await open(DEV_TOKEN), await open(TOKEN_B), await open(TOKEN_B), await open(TOKEN_B)];
    await emit('org-b', 'b-before');
    const shared = await rate(many);
    // One poll every 250 ms: about 6 in 1.5 s, whether one stream listens or six do.
    expect(alone).toBeGreaterThanOrEqual(3);
    expect(alone).toBeLessThanOrEqual(8);
    expect(shared).toBeLessThanOrEqual(alone + 2);
    // Every stream receives a new event of its organization from that one poller.
    await emit('dev', 'live');
    await emit('org-b', 'b-live');
    for (const s of many) await s.waitFor(2);
    expect(many.map((s) => s.events.at(-1)!.key)).toEqual(['live', 'live', 'live', 'b-live', 'b-live', 'b-live']);
    await Promise.all(many.map((s) => s.close()));
  });

  it("keeps organization B's events out of organization A's streams", async () => {
    const a = await open(DEV_TOKEN);
    const b = await open(TOKEN_B);
    for (let i = 0; i < 5; i++) await emit('org-b', `b-${i}`);
    await emit('dev', 'a-0');
    await b.waitFor(7); // b-before, b-live and five more
    await a.waitFor(3);
    await sleep(600);
    expect(a.events.every((e) => e.organization === 'dev')).toBe(true);
    expect(b.events.every((e) => e.organization === 'org-b')).toBe(true);
    expect(a.events.map((e) => e.key)).toEqual(['before', 'live', 'a-0']);
    await Promise.all([a.close(), b.close()]);
  });

  it('answers 429 naming the limit at one stream over limits.event_streams_per_token, and a closed stream frees its slot', async () => {
    const held = [await open(DEV_TOKEN), await open(DEV_TOKEN), await open(DEV_TOKEN)];
    const over = await app.request('/v1/events?topics=jobs', { headers: { authorization: `Bearer ${DEV_TOKEN}` } });
    expect(over.status).toBe(429);
    const body = (await over.json()) as { error_code: string; message: string };
    expect(body.error_code).toBe('REQUEST_LIMIT_EXCEEDED');
    expect(body.message).toContain('dev/dev already holds 3 event streams (limits.event_streams_per_token)');
    // Another caller's streams are counted apart.
    const other = await open(TOKEN_B);
    expect(other.status).toBe(200);
    await held[0]!.close();
    await sleep(50);
    const again = await open(DEV_TOKEN);
    expect(again.status).toBe(200);
    await Promise.all([...held.slice(1), other, again].map((s) => s.close()));
  });

  it("counts a caller's job streams with its event streams: at the limit on /v1/events, a job's stream is refused", async () => {
    await insertJob(catalogue.db, { id: 'job-streams-1', organizationId: 'dev', name: 'j', submittedBy: 'dev', type: 'training', kind: 'command', spec: {}, status: 'running', workflowId: 'job:job-streams-1' });
    const held = [await open(DEV_TOKEN), await open(DEV_TOKEN), await open(DEV_TOKEN)];
    const headers = { authorization: `Bearer ${DEV_TOKEN}`, accept: 'text/event-stream' };
    for (const path of ['/v1/jobs/job-streams-1/events', '/v1/jobs/job-streams-1/logs']) {
      const over = await app.request(path, { headers });
      expect(over.status).toBe(429);
      expect(((await over.json()) as { message: string }).message).toContain('dev/dev already holds 3 event streams');
    }
    await Promise.all(held.map((s) => s.close()));
  });

  it('resumes from Last-Event-ID after a reconnect without missing or repeating an event', async () => {
    const first = await open(DEV_TOKEN);
    await first.waitFor(3);
    const lastSeen = first.events.at(-1)!.id;
    await first.close();
    // Events committed while no stream of this caller listens (the listener may even stop meanwhile).
    for (let i = 0; i < 4; i++) await emit('dev', `missed-${i}`);
    const resumed = await open(DEV_TOKEN, 'topics=jobs', { 'last-event-id': String(lastSeen) });
    await emit('dev', 'after-reconnect');
    await resumed.waitFor(5);
    await sleep(600);
    expect(resumed.events.map((e) => e.key)).toEqual(['missed-0', 'missed-1', 'missed-2', 'missed-3', 'after-reconnect']);
    expect(resumed.events.every((e) => e.id > lastSeen)).toBe(true);
    await resumed.close();
  });

  it('stops polling when the last stream closes', async () => {
    await sleep(100);
    const start = queries;
    await sleep(1000);
    expect(queries - start).toBe(0);
  });
});

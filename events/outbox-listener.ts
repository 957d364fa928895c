// One listener per process serves every GET /v1/events stream: one poller reads the outbox rows committed after
// the last it saw, of every organization, and fans them out in memory to the streams of their organization whose
// topics match. The database sees one query per poll whatever the number of streams.
//
// Why a poller and not Postgres LISTEN/NOTIFY: the embedded catalogue is PGlite, whose notifications reach only
// its own process, and a notification carries no more than "something changed" (the rows are read anyway). A
// poll of `id > last` on the outbox's primary key is one index range scan and works the same on PGlite and
// Postgres; its 250 ms interval is the latency streams had before, now paid once per process, not per stream.
//
// Resume is as before: a stream starts from its cursor (Last-Event-ID or ?after=). It reads what it missed itself,
// page by page like a stream of old (its own organization and topics), and it is subscribed before its first
// page is read, so a row committed meanwhile comes from the poller if not from the page; ids at or below the
// cursor are never sent twice. A stream that falls too far behind is dropped back to reading pages, so a slow
// client holds at most MAX_QUEUED rows of memory.
import { asc, gt, sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { eventsAfter, type OutboxRow } from '../db/repo/outbox.js';
import { outbox } from '../db/schema/index.js';

export const POLL_MS = 250;
/** rows one poll reads; a full batch is followed by another poll at once */
const POLL_BATCH = 1000;
/** rows one catch-up page reads (as the per-stream reader did) */
const PAGE = 500;
/** rows queued for one stream before it is sent back to reading pages */
const MAX_QUEUED = 10_000;

export interface StreamFilter {
  organizationId: string;
  topics: readonly string[];
  /** the last event id the client has: the stream sends ids above it */
  cursor: number;
}

export interface EventSubscription {
  /** The next rows above the cursor, oldest first, at most `max`; waits for some. Empty once closed. */
  next(max: number): Promise<OutboxRow[]>;
  close(): void;
}

interface Subscriber {
  filter: StreamFilter;
  topics: Set<string>;
  queue: OutboxRow[];
  /** reading pages from the database (joining, or dropped back after falling behind) */
  catchingUp: boolean;
  closed: boolean;
  wake: (() => void) | null;
}

export interface OutboxListener {
  /** Subscribes a stream; the poller starts with the first subscription and stops when the last one closes. */
  subscribe(filter: StreamFilter): EventSubscription;
}

export function createOutboxListener(db: Db, o: { pollMs?: number; onError?: (err: unknown) => void } = {}): OutboxListener {
  const pollMs = o.pollMs ?? POLL_MS;
  const byOrg = new Map<string, Set<Subscriber>>();
  let count = 0;
  /** the last outbox id the poller has read (null until the first poll of this run of the poller) */
  let head: number | null = null;
  let ready: Promise<void> | null = null;
  let timer: NodeJS.Timeout | null = null;
  let generation = 0;

  const fanOut = (rows: OutboxRow[]): void => {
    for (const row of rows) {
      for (const s of byOrg.get(row.organizationId) ?? []) {
        // Queued while a stream still reads pages too: a row its last page missed must not be lost.
        if (!s.topics.has(row.topic) || row.id <= s.filter.cursor) continue;
        s.queue.push(row);
        if (s.queue.length > MAX_QUEUED) {
          s.queue = [];
          s.catchingUp = true;
        }
        s.wake?.();
      }
    }
  };

  const poll = async (gen: number): Promise<void> => {
    let rows: OutboxRow[] = [];
    try {
      rows = await db.select().from(outbox).where(gt(outbox.id, head!)).orderBy(asc(outbox.id)).limit(POLL_BATCH);
      if (gen !== generation) return;
      if (rows.length) head = rows[rows.length - 1]!.id;
      fanOut(rows);
    } catch (err) {
      // The catalogue is briefly unreachable: the next poll reads the same rows again.
      o.onError?.(err);
    }
    if (gen === generation) schedule(gen, rows.length === POLL_BATCH ? 0 : pollMs);
  };
  const schedule = (gen: number, ms: number): void => {
    timer = setTimeout(() => void poll(gen), ms);
    timer.unref();
  };

  /** Starts the poller from the outbox's newest row: older rows reach a stream through its own pages. */
  const start = (): Promise<void> => {
    const gen = ++generation;
    const started = db
      .select({ max: sql<string | null>`max(${outbox.id})` })
      .from(outbox)
      .then(([r]) => {
        if (gen !== generation) return;
        head = Number(r?.max ?? 0);
        schedule(gen, pollMs);
      });
    // A failed start is retried by the next subscription's start, not left as an unhandled rejection.
    started.catch(() => {
      if (gen === generation) ready = null;
    });
    return started;
  };
  const stop = (): void => {
    generation++;
    if (timer) clearTimeout(timer);
    timer = null;
    head = null;
    ready = null;
  };

  const remove = (s: Subscriber): void => {
    if (s.closed) return;
    s.closed = true;
    s.wake?.();
    const set = byOrg.get(s.filter.organizationId);
    set?.delete(s);
    if (set?.size === 0) byOrg.delete(s.filter.organizationId);
    if (--count === 0) stop();
  };

  const next = async (s: Subscriber, max: number): Promise<OutboxRow[]> => {
    while (!s.closed) {
      await (ready ??= start());
      if (s.closed) break;
      // Caught up once the cursor reaches the poller's head: every later row comes from the poller.
      if (s.catchingUp && s.filter.cursor >= head!) s.catchingUp = false;
      if (s.catchingUp) {
        const page = await eventsAfter(db, s.filter.organizationId, s.filter.cursor, Math.min(PAGE, max), [...s.topics]);
        if (page.length < Math.min(PAGE, max)) s.catchingUp = false;
        if (page.length) return advance(s, page);
        continue;
      }
      s.queue = s.queue.filter((r) => r.id > s.filter.cursor);
      const rows = s.queue.splice(0, max);
      if (rows.length) return advance(s, rows);
      await new Promise<void>((resolve) => (s.wake = resolve));
      s.wake = null;
    }
    return [];
  };
  const advance = (s: Subscriber, rows: OutboxRow[]): OutboxRow[] => {
    s.filter.cursor = rows[rows.length - 1]!.id;
    return rows;
  };

  return {
    subscribe(filter) {
      const s: Subscriber = { filter: { ...filter }, topics: new Set(filter.topics), queue: [], catchingUp: true, closed: false, wake: null };
      let set = byOrg.get(filter.organizationId);
      if (!set) byOrg.set(filter.organizationId, (set = new Set()));
      set.add(s);
      count++;
      ready ??= start();
      return { next: (max) => next(s, max), close: () => remove(s) };
    },
  };
}

// GET /v1/events: the organization's events as server-sent events, the same envelopes the relay publishes to
// Kafka (contracts/events.ts), for deployments without stream.brokers and for quick consumers. Resume with the
// Last-Event-ID header (or ?after=); the `audit` topic is for admins. Every stream of the process is served by one
// listener (events/outbox-listener.ts), and one caller holds at most limits.event_streams_per_token of them.
import { Hono, type Context } from 'hono';
import { streamSSE, type SSEStreamingApi } from 'hono/streaming';
import { z } from 'zod';
import type { ApiDeps, AppEnv } from '../deps.js';
import { EVENT_TOPICS } from '../../contracts/events.js';
import { envelopeOf } from '../../events/relay.js';
import { createOutboxListener, type OutboxListener } from '../../events/outbox-listener.js';
import type { OutboxRow } from '../../db/repo/outbox.js';
import { queryParams } from '../validate.js';
import { requireRole } from '../auth.js';
import { ApiError } from '../errors.js';

const EventsQuerySchema = z.strictObject({
  topics: z
    .string()
    .optional()
    .transform((t) => (t ? t.split(',').map((s) => s.trim()) : [...EVENT_TOPICS]))
    .pipe(z.array(z.enum(EVENT_TOPICS))),
  after: z.coerce.number().int().nonnegative().optional(),
  /** stop after this many events (a finite read: tests, scripts); default: follow forever */
  limit: z.coerce.number().int().positive().optional(),
});

/**
 * Streams one caller holds open, by organization and subject: over limits.event_streams_per_token a stream is
 * refused with 429 before it subscribes. A stream frees its slot when it ends, however it ends. One instance counts
 * every kind of stream (api/app.ts hands it to /v1/events and the job streams alike), so the limit is the caller's.
 */
export function streamSlots(limit: number) {
  const open = new Map<string, number>();
  return {
    take(key: string): boolean {
      const n = open.get(key) ?? 0;
      if (n >= limit) return false;
      open.set(key, n + 1);
      return true;
    },
    give(key: string): void {
      const n = (open.get(key) ?? 1) - 1;
      if (n > 0) open.set(key, n);
      else open.delete(key);
    },
  };
}
export type StreamSlots = ReturnType<typeof streamSlots>;

const KEEPALIVE_MS = 15_000;

/**
 * A stream under the caller's limit of open streams (limits.event_streams_per_token, 429 beyond): the body runs
 * with keep-alive comments and frees the slot however the stream ends. An error ends it quietly: the client
 * reconnects from its last id and misses nothing, and the cause stays in the log as `what`.
 */
export function limitedStream(
  c: Context<AppEnv>,
  deps: Pick<ApiDeps, 'config' | 'log'>,
  slots: StreamSlots,
  what: string,
  body: (stream: SSEStreamingApi) => Promise<void>,
): Response {
  const p = c.get('principal');
  const key = `${p.organizationId}/${p.subject}`;
  if (!slots.take(key)) {
    c.header('retry-after', '5');
    const message = `${key} already holds ${deps.config.limits.event_streams_per_token} event streams (limits.event_streams_per_token): close one first`;
    return c.json({ error_code: 'REQUEST_LIMIT_EXCEEDED', message, request_id: c.get('requestId') }, 429);
  }
  let freed = false;
  const free = (): void => {
    if (!freed) slots.give(key);
    freed = true;
  };
  return streamSSE(c, async (stream) => {
    stream.onAbort(free);
    const keepalive = setInterval(() => void stream.write(': keep-alive\n\n').catch(() => undefined), KEEPALIVE_MS);
    try {
      await body(stream);
    } catch (err) {
      deps.log.warn(`${what} ended on an error`, { error: String(err) });
    } finally {
      clearInterval(keepalive);
      free();
    }
  });
}

/**
 * An event's server-sent-events frame (the envelope as `data`, its outbox id as `id`), made once per row however
 * many streams send it: the listener hands every stream of an organization the same row object.
 */
const frames = new WeakMap<OutboxRow, string>();
function frameOf(row: OutboxRow): string {
  let frame = frames.get(row);
  // JSON.stringify escapes line breaks, so the envelope is one `data:` line.
  if (frame === undefined) frames.set(row, (frame = `event: ${row.topic}\ndata: ${JSON.stringify(envelopeOf(row))}\nid: ${row.id}\n\n`));
  return frame;
}

export function eventRoutes(
  deps: ApiDeps,
  slots: StreamSlots = streamSlots(deps.config.limits.event_streams_per_token),
  listener: OutboxListener = createOutboxListener(deps.db, { onError: (err) => deps.log.warn('event stream poll failed', { error: String(err) }) }),
) {
  const app = new Hono<AppEnv>();
  const limit = deps.config.limits.event_streams_per_token;
  app.get('/', (c) => {
    const p = requireRole(c, 'viewer');
    const q = queryParams(c, EventsQuerySchema);
    if (q.topics.includes('audit') && p.role !== 'admin') {
      if (c.req.query('topics')) throw new ApiError('PERMISSION_DENIED', 'the audit topic is for ml-admin');
      q.topics = q.topics.filter((t) => t !== 'audit');
    }
    let cursor = q.after ?? Number(c.req.header('last-event-id') ?? 0);
    if (!Number.isFinite(cursor)) cursor = 0;
    const key = `${p.organizationId}/${p.subject}`;
    if (!slots.take(key)) {
      c.header('retry-after', '5');
      const message = `${key} already holds ${limit} event streams (limits.event_streams_per_token): close one first`;
      return c.json({ error_code: 'REQUEST_LIMIT_EXCEEDED', message, request_id: c.get('requestId') }, 429);
    }
    const sub = listener.subscribe({ organizationId: p.organizationId, topics: q.topics, cursor });
    let ended = false;
    const end = (): void => {
      if (ended) return;
      ended = true;
      sub.close();
      slots.give(key);
    };
    return streamSSE(c, async (stream) => {
      stream.onAbort(end);
      try {
        let sent = 0;
        while (!stream.aborted && (q.limit === undefined || sent < q.limit)) {
          const rows = await sub.next(Math.min(500, (q.limit ?? 500) - sent));
          if (rows.length === 0) break; // closed
          await stream.write(rows.map(frameOf).join(''));
          sent += rows.length;
        }
      } catch (err) {
        // The client reconnects with its Last-Event-ID and misses nothing; the cause stays in the log.
        deps.log.warn('event stream ended on an error', { error: String(err) });
      } finally {
        end();
      }
    });
  });
  return app;
}

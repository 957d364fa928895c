// GET /v1/events: the organization's events as server-sent events, the same envelopes the relay publishes to
// Kafka (contracts/events.ts), for deployments without stream.brokers and for quick consumers. Resume with the
// Last-Event-ID header (or ?after=); the `audit` topic is for admins.
import { Hono } from 'hono';
import { streamSSE } from 'hono/streaming';
import { z } from 'zod';
import type { ApiDeps, AppEnv } from '../deps.js';
import { EVENT_TOPICS } from '../../contracts/events.js';
import { eventsAfter } from '../../db/repo/outbox.js';
import { envelopeOf } from '../../events/relay.js';
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

const POLL_MS = 250;

export function eventRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();
  app.get('/', (c) => {
    const p = requireRole(c, 'viewer');
    const q = queryParams(c, EventsQuerySchema);
    if (q.topics.includes('audit') && p.role !== 'admin') {
      if (c.req.query('topics')) throw new ApiError('PERMISSION_DENIED', 'the audit topic is for ml-admin');
      q.topics = q.topics.filter((t) => t !== 'audit');
    }
    let cursor = q.after ?? Number(c.req.header('last-event-id') ?? 0);
    if (!Number.isFinite(cursor)) cursor = 0;
    return streamSSE(c, async (stream) => {
      let sent = 0;
      let closed = false;
      stream.onAbort(() => void (closed = true));
      while (!closed && (q.limit === undefined || sent < q.limit)) {
        const rows = await eventsAfter(deps.db, p.organizationId, cursor, Math.min(500, (q.limit ?? 500) - sent), q.topics);
        for (const r of rows) {
          await stream.writeSSE({ id: String(r.id), event: r.topic, data: JSON.stringify(envelopeOf(r)) });
          cursor = r.id;
          sent++;
        }
        if (rows.length === 0) await stream.sleep(POLL_MS);
      }
    });
  });
  return app;
}

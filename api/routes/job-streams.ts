// GET /v1/jobs/{id}/events and /v1/jobs/{id}/logs: what happened to a job and what it printed, both resumable.
// Events are the job_events rows in seq order, as a JSON page (?after= cursor) or, with `Accept: text/event-stream`,
// a stream whose event ids are the seqs (resume with Last-Event-ID) that ends once the job has ended. The log is
// the job's job.log in the object store (lib/job-log.ts) as a stream from a byte offset, each event's id the offset
// after its text, ending with an `end` event carrying the job's outcome. Followers of one job share their reads of
// the job's status and newest event (SHARED_MS), so the catalogue sees a few queries per job, not per follower.
import { Hono, type Context } from 'hono';
import type { SSEStreamingApi } from 'hono/streaming';
import { z } from 'zod';
import type { ApiDeps, AppEnv } from '../deps.js';
import { TERMINAL_JOB_STATUSES, type JobEventView, type JobStatus } from '../../contracts/jobs.js';
import { getJob, type JobRow } from '../../db/repo/jobs.js';
import { lastJobEventSeq, listJobEvents, type JobEventRow } from '../../db/repo/job-events.js';
import { POLL_MS } from '../../events/outbox-listener.js';
import { JobLog, jobLogNames } from '../../lib/job-log.js';
import { requireRole } from '../auth.js';
import { notFound, invalid } from '../errors.js';
import { queryParams } from '../validate.js';
import { limitedStream, streamSlots, type StreamSlots } from './events.js';

/** How long one read of a job's status or newest event serves every follower of the job. */
const SHARED_MS = 200;
/** How often a log follower looks for new bytes (the job runner mirrors job.log every few seconds). */
const LOG_POLL_MS = 500;
/** The most text one log event carries; also the most a follower buffers of an unfinished line. */
const MAX_LOG_EVENT_BYTES = 64 * 1024;
/** A comment line this often keeps idle streams open through proxies while a job waits. */

const cursor = z.coerce.number().int().nonnegative();
export const JobEventsQuerySchema = z.strictObject({
  after: cursor.optional().describe('events after this id (a JSON page); with Accept: text/event-stream, or the Last-Event-ID header, where the stream resumes'),
  limit: z.coerce.number().int().min(1).max(1000).default(100).describe('the most events of a JSON page'),
});
export const JobLogsQuerySchema = z.strictObject({
  offset: cursor.optional().describe('the byte of the log to start at (or the Last-Event-ID header: the id of the last event received)'),
  follow: z.enum(['true', 'false']).default('true').describe('false: send what is there now and close'),
});

const eventView = (e: JobEventRow): JobEventView => ({ id: e.seq, created_at: e.createdAt.toISOString(), level: e.level, type: e.type, message: e.message, data: e.data });
const ended = (status: string): boolean => TERMINAL_JOB_STATUSES.includes(status as JobStatus);
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A value read at most once per `ms` per key, however many callers ask meanwhile. */
function sharedReads<T>(ms: number) {
  const cache = new Map<string, { at: number; value: Promise<T> }>();
  return (key: string, read: () => Promise<T>): Promise<T> => {
    const hit = cache.get(key);
    if (hit && Date.now() - hit.at < ms) return hit.value;
    const value = read();
    cache.set(key, { at: Date.now(), value });
    value.catch(() => cache.delete(key));
    if (cache.size > 10_000) for (const [k, v] of cache) if (Date.now() - v.at >= ms) cache.delete(k);
    return value;
  };
}

/** The resume point of a stream: the query's, else the Last-Event-ID header's, else none. */
function resumeFrom(c: Context<AppEnv>, fromQuery: number | undefined): number | undefined {
  if (fromQuery !== undefined) return fromQuery;
  const header = c.req.header('last-event-id');
  if (header === undefined || header === '') return undefined;
  const parsed = cursor.safeParse(header);
  if (!parsed.success) throw invalid(`Last-Event-ID: expected a non-negative integer, got "${header}"`);
  return parsed.data;
}

/** `slots`: the caller's open streams, shared with /v1/events (api/app.ts) so that the limit covers both. */
export function jobStreamRoutes(deps: ApiDeps, slots: StreamSlots = streamSlots(deps.config.limits.event_streams_per_token)) {
  const app = new Hono<AppEnv>();
  const statusReads = sharedReads<JobRow | null>(SHARED_MS);
  const headReads = sharedReads<number>(SHARED_MS);

  async function owned(c: Context<AppEnv>): Promise<JobRow> {
    const id = c.req.param('id')!;
    const row = await getJob(deps.db, c.get('principal').organizationId, id);
    if (!row) throw notFound(`job ${id}`);
    return row;
  }
  const statusOf = (job: JobRow) => statusReads(job.id, () => getJob(deps.db, job.organizationId, job.id)).then((r) => r?.status ?? job.status);

  app.get('/:id/events', async (c) => {
    requireRole(c, 'viewer');
    const q = queryParams(c, JobEventsQuerySchema);
    const job = await owned(c);
    if (!/text\/event-stream/.test(c.req.header('accept') ?? '')) {
      const rows = await listJobEvents(deps.db, job.organizationId, job.id, { after: q.after, limit: q.limit + 1 });
      const page = rows.slice(0, q.limit);
      return c.json({ object: 'list', data: page.map(eventView), has_more: rows.length > q.limit, next_cursor: page.at(-1)?.seq ?? q.after ?? null });
    }
    let after = resumeFrom(c, q.after) ?? 0;
    return limitedStream(c, deps, slots, 'job stream', async (stream) => {
      const send = async (rows: JobEventRow[]) => {
        await stream.write(rows.map((e) => `event: ${e.type}\ndata: ${JSON.stringify(eventView(e))}\nid: ${e.seq}\n\n`).join(''));
        after = rows.at(-1)!.seq;
      };
      // Pages until none is left; the status is read before the last page, so a job that had ended by then has
      // had its last event sent when the loop ends.
      while (!stream.aborted) {
        const status = await statusOf(job);
        const head = ended(status) ? Infinity : await headReads(job.id, () => lastJobEventSeq(deps.db, job.id));
        let drained = head <= after;
        while (!drained && !stream.aborted) {
          const rows = await listJobEvents(deps.db, job.organizationId, job.id, { after, limit: 500 });
          if (rows.length) await send(rows);
          drained = rows.length < 500;
        }
        if (ended(status)) return;
        await sleep(POLL_MS);
      }
    });
  });

  app.get('/:id/logs', async (c) => {
    requireRole(c, 'viewer');
    const q = queryParams(c, JobLogsQuerySchema);
    const job = await owned(c);
    const start = resumeFrom(c, q.offset) ?? 0;
    // The names grow as the job is resumed: each new segment's executor jobs follow those before.
    const names = () => statusReads(job.id, () => getJob(deps.db, job.organizationId, job.id)).then((r) => jobLogNames(r ?? job));
    const log = new JobLog(deps.store, deps.config, job.organizationId, names);
    return limitedStream(c, deps, slots, 'job stream', async (stream) => {
      const out = new LogLines(stream, start);
      for (;;) {
        if (stream.aborted) return;
        const row = await statusReads(job.id, () => getJob(deps.db, job.organizationId, job.id));
        const done = ended(row?.status ?? job.status);
        // Read after the status: once the job has ended its log is whole, so this read reaches its end.
        for (let r = await log.readFrom(out.readAt); r && !stream.aborted; r = await log.readFrom(out.readAt)) await out.add(r.body);
        if (done) {
          await out.flush();
          await stream.write(`event: end\ndata: ${JSON.stringify({ status: row?.status ?? job.status, message: row?.message ?? null })}\nid: ${out.sent}\n\n`);
          return;
        }
        if (q.follow === 'false') return out.flush();
        await sleep(LOG_POLL_MS);
      }
    });
  });

  return app;
}

/**
 * Turns log bytes into events of whole lines ({"text": ...} with the offset after them as id), so that a stream
 * resumed at an id never splits a line or a UTF-8 character. An unfinished line waits for its end up to
 * MAX_LOG_EVENT_BYTES, then goes out as it is (cut at a character boundary).
 */
class LogLines {
  private pending: Buffer = Buffer.alloc(0);
  constructor(
    private readonly stream: SSEStreamingApi,
    /** the offset after the last byte sent */
    public sent: number,
  ) {}

  get readAt(): number {
    return this.sent + this.pending.length;
  }

  /** Sends the whole lines of a read; a read cut short (the store's connection dropped) resumes at readAt. */
  async add(body: AsyncIterable<Uint8Array>): Promise<void> {
    for await (const bytes of body) {
      const chunk = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      this.pending = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
      await this.sendWhole();
    }
  }

  private async sendWhole(): Promise<void> {
    for (;;) {
      const window = this.pending.subarray(0, MAX_LOG_EVENT_BYTES);
      const newline = window.lastIndexOf(0x0a);
      let cut = newline + 1;
      if (cut === 0) {
        if (this.pending.length < MAX_LOG_EVENT_BYTES) return;
        cut = MAX_LOG_EVENT_BYTES;
        while (cut > 0 && (this.pending[cut]! & 0xc0) === 0x80) cut--;
      }
      await this.send(cut);
    }
  }

  async flush(): Promise<void> {
    await this.sendWhole();
    if (this.pending.length) await this.send(this.pending.length);
  }

  private async send(bytes: number): Promise<void> {
    const text = this.pending.subarray(0, bytes).toString('utf8');
    this.pending = this.pending.subarray(bytes);
    this.sent += bytes;
    await this.stream.write(`data: ${JSON.stringify({ text })}\nid: ${this.sent}\n\n`);
  }
}

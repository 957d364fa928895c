// GET /v1/stream?topics=job:<id>,job:<id>:logs,pipeline:<id>,run:<id>:metrics: every live subject of a console page
// on one server-sent-events connection, which counts as one stream against limits.event_streams_per_token.
// The subjects come from the sources that already exist: the outbox listener (events/outbox-listener.ts: metric
// points as logged, pipeline stage changes), a job's events in seq order (as GET /v1/jobs/{id}/events reads them;
// one shared read per tick says which followed jobs changed) and its log by byte offset (lib/job-log.ts, as
// GET /v1/jobs/{id}/logs). Each event's id is the cursor of every
// subject at once (base64url JSON), so a reconnect with Last-Event-ID resumes each subject after its last event.
import { Hono, type Context } from 'hono';
import type { SSEStreamingApi } from 'hono/streaming';
import { inArray, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import type { ApiDeps, AppEnv } from '../deps.js';
import { StreamQuerySchema, type StreamEvent } from '../../contracts/console.js';
import { TERMINAL_JOB_STATUSES, type JobStatus } from '../../contracts/jobs.js';
import type { Principal } from '../../db/repo/auth.js';
import { getJob, type JobRow } from '../../db/repo/jobs.js';
import { listJobEvents, type JobEventRow } from '../../db/repo/job-events.js';
import type { OutboxRow } from '../../db/repo/outbox.js';
import { getPipelineRow } from '../../db/repo/pipelines.js';
import { getRun } from '../../db/repo/runs.js';
import { jobEvents, jobs, outbox } from '../../db/schema/index.js';
import { POLL_MS, type OutboxListener } from '../../events/outbox-listener.js';
import { JobLog, jobLogNames } from '../../lib/job-log.js';
import { requireRole } from '../auth.js';
import { invalid, notFound } from '../errors.js';
import { queryParams } from '../validate.js';
import { limitedStream, type StreamSlots } from './events.js';

/** How often a log subject looks for new bytes (the job runner mirrors job.log every few seconds). */
const LOG_POLL_MS = 500;
/** The most text one log event carries; also the most held back of an unfinished line. */
const MAX_LOG_EVENT_BYTES = 64 * 1024;
/** A comment line this often keeps an idle stream open through proxies. */

/** Where each subject of a stream stands: the outbox id (metrics, pipelines), each job's event seq and log offset. */
interface PageCursor {
  o: number;
  j: Record<string, number>;
  l: Record<string, number>;
}

const encodeCursor = (c: PageCursor): string => Buffer.from(JSON.stringify(c)).toString('base64url');

function decodeCursor(header: string): PageCursor {
  try {
    const c = JSON.parse(Buffer.from(header, 'base64url').toString('utf8')) as Partial<PageCursor>;
    const counts = (r: unknown) => typeof r === 'object' && r !== null && Object.values(r).every((v) => Number.isSafeInteger(v) && (v as number) >= 0);
    if (Number.isSafeInteger(c.o) && c.o! >= 0 && counts(c.j) && counts(c.l)) return c as PageCursor;
  } catch {
    // answered below
  }
  throw invalid('Last-Event-ID: not an id this stream sent');
}

interface Subjects {
  jobs: JobRow[];
  logs: JobRow[];
  pipelines: string[];
  runs: string[];
}

/** The caller's subjects, each checked as its own route checks it: another organization's id is a 404. */
async function resolveSubjects(deps: ApiDeps, p: Principal, topics: string[]): Promise<Subjects> {
  const out: Subjects = { jobs: [], logs: [], pipelines: [], runs: [] };
  for (const topic of topics) {
    const [kind, id, sub] = topic.split(':') as [string, string, string | undefined];
    if (kind === 'job') {
      const job = await getJob(deps.db, p.organizationId, id);
      if (!job) throw notFound(`topics: job ${id}`);
      (sub === 'logs' ? out.logs : out.jobs).push(job);
    } else if (kind === 'pipeline') {
      if (!(await getPipelineRow(deps.db, p.organizationId, id))) throw notFound(`topics: pipeline ${id}`);
      out.pipelines.push(id);
    } else {
      if (!(await getRun(deps.db, p.organizationId, id))) throw notFound(`topics: run ${id}`);
      out.runs.push(id);
    }
  }
  return out;
}

const ended = (status: string): boolean => TERMINAL_JOB_STATUSES.includes(status as JobStatus);

/**
 * One page stream: the frames of every subject written in the order they were made, each with the cursor as it
 * stands after it. Writes are chained, so subjects that produce at the same time never interleave a frame. The
 * stream is over when the client leaves or `limit` events have gone out: `signal` tells every subject.
 */
class PageStream {
  private readonly ended = new AbortController();
  private chain: Promise<void> = Promise.resolve();
  private sent = 0;
  constructor(
    private readonly stream: SSEStreamingApi,
    readonly cursor: PageCursor,
    private readonly limit: number | undefined,
  ) {
    stream.onAbort(() => this.ended.abort());
  }

  get signal(): AbortSignal {
    return this.ended.signal;
  }

  get finished(): boolean {
    return this.ended.signal.aborted;
  }

  /** Sends an event after moving its subject's cursor (`advance`), unless the stream is over. */
  emit(event: StreamEvent, advance: (c: PageCursor) => void): Promise<void> {
    if (this.finished) return this.chain;
    advance(this.cursor);
    const frame = `event: ${event.type}\ndata: ${JSON.stringify(event)}\nid: ${encodeCursor(this.cursor)}\n\n`;
    if (this.limit !== undefined && ++this.sent >= this.limit) this.ended.abort();
    this.chain = this.chain.then(() => this.stream.write(frame)).then(() => undefined);
    return this.chain;
  }

  /** Every frame emitted, written. */
  flushed(): Promise<void> {
    return this.chain;
  }
}

/** A followed job as one read of the watch saw it: its row and its newest event's seq. */
interface JobState {
  row: JobRow;
  head: number;
}

/**
 * Every page stream's jobs, read together: one query per POLL_MS gives each followed job's row and newest event
 * seq (an index probe each), and wakes the followers of a job whose status or newest event changed. A follower
 * then reads only its new events, so the catalogue sees one query per tick however many pages follow jobs, not
 * two per job per tick.
 */
function jobWatch(db: Db, onError: (err: unknown) => void) {
  const waiting = new Map<string, Set<(s: JobState) => void>>();
  let polling = false;

  const read = async (ids: string[]): Promise<JobState[]> => {
    const head = sql<string | null>`(select max(${jobEvents.seq}) from ${jobEvents} where ${jobEvents.jobId} = ${jobs.id})`;
    const rows = await db.select({ row: jobs, head }).from(jobs).where(inArray(jobs.id, ids));
    return rows.map((r) => ({ row: r.row, head: Number(r.head ?? 0) }));
  };

  const poll = async (): Promise<void> => {
    while (waiting.size) {
      try {
        for (const state of await read([...waiting.keys()])) for (const wake of waiting.get(state.row.id) ?? []) wake(state);
      } catch (err) {
        onError(err); // the next tick reads again
      }
      await new Promise((r) => setTimeout(r, POLL_MS).unref());
    }
    polling = false;
  };

  return {
    /** The job as it is now. */
    now: async (job: JobRow): Promise<JobState> => (await read([job.id]))[0] ?? { row: job, head: 0 },
    /**
     * The job once its status or newest event differs from `seen`, or as the watch last saw it after `maxMs`, or
     * `seen` when the stream ends first.
     */
    next(seen: JobState, signal: AbortSignal, maxMs = Infinity): Promise<JobState> {
      const id = seen.row.id;
      return new Promise((resolve) => {
        let latest = seen;
        const done = (state: JobState) => {
          clearTimeout(timer);
          signal.removeEventListener('abort', aborted);
          const set = waiting.get(id);
          set?.delete(wake);
          if (set?.size === 0) waiting.delete(id);
          resolve(state);
        };
        const wake = (state: JobState) => {
          latest = state;
          if (state.head !== seen.head || state.row.status !== seen.row.status) done(state);
        };
        const aborted = () => done(seen);
        const timer = Number.isFinite(maxMs) ? setTimeout(() => done(latest), maxMs) : undefined;
        signal.addEventListener('abort', aborted);
        if (!waiting.has(id)) waiting.set(id, new Set());
        waiting.get(id)!.add(wake);
        if (!polling) {
          polling = true;
          void poll();
        }
      });
    },
  };
}
type JobWatch = ReturnType<typeof jobWatch>;

/** Outbox rows of the stream's runs (metric points) and pipelines (stage changes, training events), as events. */
async function followOutbox(page: PageStream, listener: OutboxListener, organizationId: string, s: Subjects): Promise<void> {
  if (s.runs.length === 0 && s.pipelines.length === 0) return;
  const runs = new Set(s.runs);
  const pipelines = new Set(s.pipelines);
  const topics = [...(runs.size ? ['metrics'] : []), ...(pipelines.size ? ['pipelines', 'jobs'] : [])];
  const sub = listener.subscribe({ organizationId, topics, cursor: page.cursor.o });
  // The subscription waits for rows; the end of the stream closes it, which wakes it empty-handed.
  page.signal.addEventListener('abort', () => sub.close());
  try {
    while (!page.finished) {
      const rows = await sub.next(500);
      if (rows.length === 0) return; // closed
      for (const row of rows) {
        const event = outboxEvent(row, runs, pipelines);
        // A row of another subject only moves the cursor: the next event sent carries it.
        if (event) await page.emit(event, (c) => void (c.o = row.id));
        else page.cursor.o = row.id;
      }
    }
  } finally {
    sub.close();
  }
}

/** A row as its subject's event: metric points of a run, or a pipeline's event (keyed by the pipeline); else null. */
function outboxEvent(row: OutboxRow, runs: Set<string>, pipelines: Set<string>): StreamEvent | null {
  const payload = row.payload as Record<string, unknown>;
  if (row.topic === 'metrics')
    return runs.has(row.key) ? { type: 'run.metrics', topic: `run:${row.key}:metrics`, step: Number(payload.step), metrics: payload.metrics as Record<string, number | null>, timestamp: String(payload.timestamp) } : null;
  return pipelines.has(row.key) ? { type: 'pipeline.event', topic: `pipeline:${row.key}`, event: { topic: row.topic, ...payload } } : null;
}

/** A job's events in seq order until the job has ended, then its `job.end`. */
async function followJobEvents(page: PageStream, deps: ApiDeps, watch: JobWatch, job: JobRow): Promise<void> {
  const topic = `job:${job.id}`;
  let state = await watch.now(job);
  while (!page.finished) {
    // Status and newest seq come from one read: a job that had ended by then has had its last event committed.
    const done = ended(state.row.status);
    const head = done ? Infinity : state.head;
    while ((page.cursor.j[job.id] ?? 0) < head && !page.finished) {
      const rows: JobEventRow[] = await listJobEvents(deps.db, job.organizationId, job.id, { after: page.cursor.j[job.id] ?? 0, limit: 500 });
      for (const e of rows) {
        const event = { id: e.seq, created_at: e.createdAt.toISOString(), level: e.level, type: e.type, message: e.message, data: e.data };
        await page.emit({ type: 'job.event', topic, event }, (c) => void (c.j[job.id] = e.seq));
      }
      if (rows.length < 500) break;
    }
    if (done) return void (await page.emit({ type: 'job.end', topic, status: state.row.status, message: state.row.message ?? null }, () => undefined));
    state = await watch.next(state, page.signal);
  }
}

/** A job's log as events of whole lines, from the cursor's byte offset, until the job has ended and its log with it. */
async function followJobLog(page: PageStream, deps: ApiDeps, watch: JobWatch, job: JobRow): Promise<void> {
  const topic = `job:${job.id}:logs`;
  let state = await watch.now(job);
  // The names grow as the job is resumed (each new segment's executor jobs): read from the watch's row.
  const names = () => Promise.resolve(jobLogNames(state.row));
  const log = new JobLog(deps.store, deps.config, job.organizationId, names);
  let pending = Buffer.alloc(0);
  const sendUpTo = async (bytes: number) => {
    const text = pending.subarray(0, bytes).toString('utf8');
    pending = pending.subarray(bytes);
    await page.emit({ type: 'job.log', topic, text }, (c) => void (c.l[job.id] = (c.l[job.id] ?? 0) + bytes));
  };
  /** Whole lines go out; a line longer than MAX_LOG_EVENT_BYTES is cut at a character boundary. */
  const sendWhole = async (flush: boolean) => {
    while (pending.length && !page.finished) {
      const newline = pending.subarray(0, MAX_LOG_EVENT_BYTES).lastIndexOf(0x0a);
      let cut = newline + 1;
      if (cut === 0) {
        if (pending.length < MAX_LOG_EVENT_BYTES && !flush) return;
        cut = Math.min(pending.length, MAX_LOG_EVENT_BYTES);
        while (cut > 0 && cut < pending.length && (pending[cut]! & 0xc0) === 0x80) cut--;
      }
      await sendUpTo(cut);
    }
  };
  while (!page.finished) {
    const done = ended(state.row.status);
    // Read after the status: once the job has ended its log is whole, so this read reaches its end.
    for (let r = await log.readFrom((page.cursor.l[job.id] ?? 0) + pending.length); r && !page.finished; r = await log.readFrom((page.cursor.l[job.id] ?? 0) + pending.length)) {
      let read = 0;
      for await (const chunk of r.body as AsyncIterable<Buffer>) {
        pending = Buffer.concat([pending, chunk]);
        read += chunk.length;
        await sendWhole(false);
      }
      if (read === 0) break;
    }
    if (done) {
      await sendWhole(true);
      return void (await page.emit({ type: 'job.end', topic, status: state.row.status, message: state.row.message ?? null }, () => undefined));
    }
    // Output arrives without a catalogue change: look again after LOG_POLL_MS, or at once when the job ends.
    state = await watch.next(state, page.signal, LOG_POLL_MS);
  }
}

/** The outbox's newest id: where a new page starts following metric points and pipeline events (not their history). */
async function outboxHead(deps: ApiDeps): Promise<number> {
  const [row] = await deps.db.select({ max: sql<string | null>`max(${outbox.id})` }).from(outbox);
  return Number(row?.max ?? 0);
}

/** `slots`: the caller's open streams, shared with /v1/events and the job streams (api/app.ts). */
export function pageStreamRoutes(deps: ApiDeps, slots: StreamSlots, listener: OutboxListener) {
  const app = new Hono<AppEnv>();
  const watch = jobWatch(deps.db, (err) => deps.log.warn('page stream: job read failed', { error: String(err) }));

  app.get('/', async (c: Context<AppEnv>) => {
    const p = requireRole(c, 'viewer');
    const q = queryParams(c, StreamQuerySchema);
    const header = c.req.header('last-event-id');
    const subjects = await resolveSubjects(deps, p, q.topics);
    const cursor: PageCursor = header ? decodeCursor(header) : { o: await outboxHead(deps), j: {}, l: {} };
    return limitedStream(c, deps, slots, 'page stream', async (stream) => {
      const page = new PageStream(stream, cursor, q.limit);
      await Promise.all([
        followOutbox(page, listener, p.organizationId, subjects),
        ...subjects.jobs.map((job) => followJobEvents(page, deps, watch, job)),
        ...subjects.logs.map((job) => followJobLog(page, deps, watch, job)),
      ]);
      await page.flushed();
    });
  });
  return app;
}

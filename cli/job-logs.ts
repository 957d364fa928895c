// `hanzo-ml job logs <id> [--follow] [--offset N]` and `hanzo-ml job events <id> [--follow]`: a job's log and events
// over the API's server-sent-event streams (api/routes/job-streams.ts). A follower waits through queued and pending
// (the server holds the stream open), keeps one event in memory at a time, and after a dropped connection (an API
// restart) reconnects from the last offset or event id it printed, so nothing is lost or printed twice. It exits 0
// when the job succeeded and 1 otherwise.
import type { Command } from 'commander';
import { ApiClientError, type ApiClient } from './api-client.js';
import type { JobCliIo } from './job.js';
import { TERMINAL_JOB_STATUSES, type JobEventView, type JobStatus, type JobView } from '../contracts/jobs.js';

export interface SseEvent {
  event: string;
  data: string;
  id: string | null;
}

/** How long a follower waits before reconnecting after a dropped connection. */
const RECONNECT_MS = 1000;

/** Server-sent events of a response body, one at a time (the buffer holds at most one unfinished event). */
export async function* sseEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<SseEvent> {
  const decoder = new TextDecoder();
  let buffer = '';
  let event: SseEvent = { event: 'message', data: '', id: null };
  let hasData = false;
  for await (const chunk of body) {
    buffer += decoder.decode(chunk, { stream: true });
    for (let nl = buffer.indexOf('\n'); nl >= 0; nl = buffer.indexOf('\n')) {
      const line = buffer.slice(0, nl).replace(/\r$/, '');
      buffer = buffer.slice(nl + 1);
      if (line === '') {
        if (hasData) yield event;
        event = { event: 'message', data: '', id: null };
        hasData = false;
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (field === 'event') event.event = value;
      else if (field === 'id') event.id = value;
      else if (field === 'data') {
        event.data = hasData ? `${event.data}\n${value}` : value;
        hasData = true;
      }
    }
  }
}

export interface JobOutcome {
  status: string;
  message: string | null;
}

/** Whether an error is worth a reconnect: the API unreachable or restarting, not a refusal of the request. */
function transient(err: unknown): boolean {
  if (err instanceof ApiClientError) return err.status === 0 || err.status >= 500 || err.status === 429;
  return true; // the body stream broke off (the connection dropped)
}

/**
 * Prints a job's log from `offset` (its bytes exactly, via `write`) until the job ends, reconnecting after drops.
 * Returns the outcome from the stream's `end` event; null when not following and the job has not ended.
 */
export async function followJobLog(api: ApiClient, id: string, o: { offset?: number; follow: boolean; write: (text: string) => void; onReconnect?: (offset: number) => void }): Promise<JobOutcome | null> {
  let offset = o.offset ?? 0;
  for (;;) {
    try {
      const res = await api.stream(`/v1/jobs/${encodeURIComponent(id)}/logs?offset=${offset}&follow=${o.follow}`);
      for await (const e of sseEvents(res.body!)) {
        if (e.event === 'end') return JSON.parse(e.data) as JobOutcome;
        o.write((JSON.parse(e.data) as { text: string }).text);
        if (e.id !== null) offset = Number(e.id);
      }
      if (!o.follow) return null;
    } catch (err) {
      if (!transient(err)) throw err;
    }
    o.onReconnect?.(offset);
    await new Promise((r) => setTimeout(r, RECONNECT_MS));
  }
}

/**
 * Prints a job's events after `after` until the job ends, reconnecting after drops with the last id. A stream that
 * closes is asked once more once the job has ended: a close may be an API going away just as the job ended.
 */
export async function followJobEvents(api: ApiClient, id: string, o: { after?: number; print: (e: JobEventView) => void; onReconnect?: (after: number) => void }): Promise<JobOutcome> {
  let after = o.after ?? 0;
  let endedBefore = false;
  for (;;) {
    try {
      const res = await api.stream(`/v1/jobs/${encodeURIComponent(id)}/events?after=${after}`, { accept: 'text/event-stream' });
      for await (const e of sseEvents(res.body!)) {
        const event = JSON.parse(e.data) as JobEventView;
        o.print(event);
        after = event.id;
      }
      const job = await api.get<JobView>(`/v1/jobs/${encodeURIComponent(id)}`);
      if (TERMINAL_JOB_STATUSES.includes(job.status as JobStatus)) {
        if (endedBefore) return { status: job.status, message: job.message };
        endedBefore = true;
        continue;
      }
    } catch (err) {
      if (!transient(err)) throw err;
    }
    o.onReconnect?.(after);
    await new Promise((r) => setTimeout(r, RECONNECT_MS));
  }
}

/** Every event of a job (JSON pages, ascending). */
export async function listAllJobEvents(api: ApiClient, id: string, print: (e: JobEventView) => void): Promise<void> {
  let after: number | null = null;
  for (;;) {
    const page: { data: JobEventView[]; has_more: boolean; next_cursor: number | null } = await api.get(`/v1/jobs/${encodeURIComponent(id)}/events?limit=1000${after !== null ? `&after=${after}` : ''}`);
    page.data.forEach(print);
    if (!page.has_more) return;
    after = page.next_cursor;
  }
}

const eventLine = (e: JobEventView): string => `${e.created_at} ${e.level.padEnd(5)} ${e.type.padEnd(10)} ${e.message}\n`;

function exitWith(outcome: JobOutcome | null): void {
  if (!outcome) return;
  process.stderr.write(`job ${outcome.status}${outcome.message ? `: ${outcome.message}` : ''}\n`);
  if (outcome.status !== 'succeeded') process.exitCode = 1;
}

const nonNegative = (name: string) => (v: string): number => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name}: expected a non-negative integer, got "${v}"`);
  return n;
};

export function registerJobLogCommands(job: Command, io: Pick<JobCliIo, 'api'>): void {
  job
    .command('logs <id>')
    .description("a job's log (stdout and stderr); --follow streams it until the job ends and exits 1 unless it succeeded")
    .option('-f, --follow', 'wait through queued, stream while it runs, reconnect after a dropped connection')
    .option('--offset <bytes>', 'start at this byte of the log (the id of the last event you have)', nonNegative('--offset'))
    .action(async (id: string, o: { follow?: boolean; offset?: number }) => {
      const outcome = await followJobLog(io.api(), id, {
        follow: o.follow ?? false,
        ...(o.offset !== undefined ? { offset: o.offset } : {}),
        write: (text) => process.stdout.write(text),
        onReconnect: (offset) => process.stderr.write(`connection lost; reconnecting at byte ${offset}\n`),
      });
      exitWith(outcome);
    });
  job
    .command('events <id>')
    .description("a job's events, oldest first (status changes, metrics of each step, checkpoints); --follow until it ends")
    .option('-f, --follow', 'stream new events until the job ends; exit 1 unless it succeeded')
    .option('--after <id>', 'only events after this event id', nonNegative('--after'))
    .option('--json', 'one JSON object a line')
    .action(async (id: string, o: { follow?: boolean; after?: number; json?: boolean }) => {
      const print = (e: JobEventView) => process.stdout.write(o.json ? `${JSON.stringify(e)}\n` : eventLine(e));
      if (!o.follow) return listAllJobEvents(io.api(), id, print);
      exitWith(await followJobEvents(io.api(), id, { ...(o.after !== undefined ? { after: o.after } : {}), print, onReconnect: (after) => process.stderr.write(`connection lost; reconnecting after event ${after}\n`) }));
    });
}

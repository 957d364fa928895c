// Calls to the API on this origin. The browser sends the session cookie by itself; writes repeat the session's
// CSRF token in the x-csrf-token header (api/auth.ts refuses a cookie-authenticated write without it).
import type { SessionView } from '../../contracts/console-session.js';
import type { DatasetIssue } from '../../contracts/datasets.js';
import type { StreamEvent } from '../../contracts/console.js';

const CSRF_HEADER = 'x-csrf-token';
let csrfToken: string | null = null;

/** An answer of the API that is not 2xx: its error code and message, as the API wrote them. */
export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export function rememberSession(session: SessionView | null): void {
  csrfToken = session?.csrf_token ?? null;
}

/** Who hears that the signed-in session has ended (the app shell, which shows the login), and why it ended. */
let sessionEnded: ((why: string) => void) | null = null;
let endedWhy: string | null = null;

/** Calls `listener` when a request of the signed-in console is answered 401: its session is over. */
export function whenSessionEnds(listener: (why: string) => void): void {
  sessionEnded = listener;
}

/** Why the last session ended (once: the login page shows it, then it is forgotten). */
export function takeSessionEndedReason(): string | null {
  const why = endedWhy;
  endedWhy = null;
  return why;
}

/**
 * A 401 to a page signed in by cookie: the session expired, was signed out elsewhere, or the IAM would not renew its
 * token. Asked once more with the cookie the browser holds now: a request that left with the cookie a renewal had
 * just replaced may be refused while the session lives on.
 */
let checking: Promise<void> | null = null;
function endSession(why: string): void {
  if (csrfToken === null || checking) return;
  checking = fetch('/v1/session', { headers: { accept: 'application/json' }, credentials: 'same-origin' })
    .then(async (res) => {
      if (res.ok) return rememberSession((await res.json()) as SessionView);
      csrfToken = null;
      endedWhy = why;
      sessionEnded?.(why);
    })
    .catch(() => undefined)
    .finally(() => (checking = null));
}

/** `signal` aborts the call (a page of a table scrolled past before it answered). */
export async function api<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET' && method !== 'HEAD' && csrfToken) headers[CSRF_HEADER] = csrfToken;
  const res = await fetch(path, { method, headers, credentials: 'same-origin', body: body === undefined ? undefined : JSON.stringify(body), signal });
  const text = await res.text();
  const parsed = text ? (JSON.parse(text) as unknown) : null;
  if (!res.ok) {
    const err = (parsed ?? {}) as { error_code?: string; message?: string };
    const message = err.message ?? `${method} ${path}: HTTP ${res.status}`;
    if (res.status === 401) endSession(message);
    throw new ApiFailure(res.status, err.error_code ?? 'ERROR', message);
  }
  return parsed as T;
}

/** Who is signed in, or null (no session, or it ended). */
export async function currentSession(): Promise<SessionView | null> {
  try {
    const session = await api<SessionView>('GET', '/v1/session');
    rememberSession(session);
    return session;
  } catch (err) {
    if (err instanceof ApiFailure && (err.status === 401 || err.status === 403)) return null;
    throw err;
  }
}

export async function signIn(token: string): Promise<SessionView> {
  const session = await api<SessionView>('POST', '/v1/session', { token });
  rememberSession(session);
  return session;
}

export async function signOut(): Promise<void> {
  await api('DELETE', '/v1/session');
  rememberSession(null);
}

/**
 * An SSE stream of the API (the cookie goes with it). EventSource reconnects by itself with Last-Event-ID, so a
 * dropped connection resumes where it left off. Returns the function that closes it.
 */
export function stream(path: string, handlers: Record<string, (data: unknown) => void>, onEnd?: () => void): () => void {
  const source = new EventSource(path, { withCredentials: true });
  for (const [event, handle] of Object.entries(handlers)) source.addEventListener(event, (e) => handle(JSON.parse((e as MessageEvent<string>).data)));
  source.addEventListener('end', () => {
    source.close();
    onEnd?.();
  });
  return () => source.close();
}

/** An upload the API refused for its content: each problem by file, line or record, and field. */
export class UploadRefused extends ApiFailure {
  constructor(
    status: number,
    code: string,
    message: string,
    readonly issues: DatasetIssue[],
  ) {
    super(status, code, message);
  }
}

/**
 * POST a file as the request body: the browser streams it from disk (a File body is never read into the page's
 * memory). A 4xx with `issues` (a dataset the API refused) throws UploadRefused.
 */
export async function uploadFile<T>(path: string, file: File): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json', 'content-type': 'application/octet-stream', 'x-filename': file.name };
  if (csrfToken) headers[CSRF_HEADER] = csrfToken;
  const res = await fetch(path, { method: 'POST', headers, credentials: 'same-origin', body: file });
  const text = await res.text();
  const parsed = text ? (JSON.parse(text) as unknown) : null;
  if (res.ok) return parsed as T;
  const err = (parsed ?? {}) as { error_code?: string; message?: string; issues?: DatasetIssue[] };
  const message = err.message ?? `POST ${path}: HTTP ${res.status}`;
  if (err.issues?.length) throw new UploadRefused(res.status, err.error_code ?? 'ERROR', message, err.issues);
  throw new ApiFailure(res.status, err.error_code ?? 'ERROR', message);
}

const PAGE_STREAM_EVENTS: StreamEvent['type'][] = ['job.event', 'job.log', 'job.end', 'pipeline.event', 'run.metrics', 'error'];

/**
 * The page's one multiplexed stream (GET /v1/stream?topics=...): every subject's events on one connection. A
 * dropped connection is reopened by EventSource itself with Last-Event-ID, the cursor of every subject, so each
 * resumes after its last event; `onResumed` is told when that happened. Returns the function that closes it.
 */
export function pageStream(topics: string[], onEvent: (e: StreamEvent) => void, onResumed?: () => void): () => void {
  const source = new EventSource(`/v1/stream?topics=${encodeURIComponent(topics.join(','))}`, { withCredentials: true });
  let dropped = false;
  for (const type of PAGE_STREAM_EVENTS)
    source.addEventListener(type, (e) => {
      // The connection's own failures are `error` events too, without data.
      if (e instanceof MessageEvent && typeof e.data === 'string') onEvent(JSON.parse(e.data) as StreamEvent);
      else {
        dropped = true;
        // Refused rather than dropped (EventSource gives up on a 4xx): ask whether the session has ended.
        if (source.readyState === EventSource.CLOSED) void currentSession().catch(() => undefined);
      }
    });
  source.addEventListener('open', () => {
    if (dropped) onResumed?.();
    dropped = false;
  });
  return () => source.close();
}

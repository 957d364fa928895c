// Signing and sending the promotion reload hook (contracts/reload-hook.ts says what a receiver gets).
import { createHmac, timingSafeEqual } from 'node:crypto';
import { RELOAD_HEADERS, RELOAD_TOLERANCE_SECONDS } from '../contracts/reload-hook.js';

/** "sha256=" + hex HMAC-SHA256 of `${timestamp}.${rawBody}`: the timestamp is signed so it cannot be swapped. */
export function reloadSignature(secret: string, timestamp: number, rawBody: string): string {
  return 'sha256=' + createHmac('sha256', secret).update(`${timestamp}.${rawBody}`).digest('hex');
}

/**
 * What a receiver does (and the README shows): recompute the signature over the raw body as received, compare in
 * constant time, and refuse a timestamp outside the tolerance (a replayed capture). Returns why it is refused, or null.
 */
export function verifyReloadRequest(
  secret: string,
  headers: { signature: string | undefined; timestamp: string | undefined },
  rawBody: string,
  nowSeconds = Math.floor(Date.now() / 1000),
): string | null {
  if (!headers.signature || !headers.timestamp) return `missing ${RELOAD_HEADERS.signature} or ${RELOAD_HEADERS.timestamp}`;
  const ts = Number(headers.timestamp);
  if (!Number.isInteger(ts)) return `${RELOAD_HEADERS.timestamp} is not a unix time in seconds`;
  if (Math.abs(nowSeconds - ts) > RELOAD_TOLERANCE_SECONDS) return `${RELOAD_HEADERS.timestamp} is more than ${RELOAD_TOLERANCE_SECONDS}s from now`;
  const want = Buffer.from(reloadSignature(secret, ts, rawBody));
  const got = Buffer.from(headers.signature);
  return got.length === want.length && timingSafeEqual(got, want) ? null : 'signature does not match';
}

/** The URL without credentials or query, for messages that end up on the pipeline and in logs. */
export function displayUrl(url: string): string {
  const u = new URL(url);
  return `${u.protocol}//${u.host}${u.pathname}`;
}

export interface ReloadAnswer {
  ok: boolean;
  status: number;
  /** The start of the receiver's answer, for the error when it refused. */
  text: string;
}

/** One attempt: POST the body signed now. Redirects are not followed (a signed body goes where it was configured). */
export async function postReloadHook(o: { url: string; secret: string; eventId: string; rawBody: string; timeoutMs: number }): Promise<ReloadAnswer> {
  const timestamp = Math.floor(Date.now() / 1000);
  const res = await fetch(o.url, {
    method: 'POST',
    redirect: 'manual',
    signal: AbortSignal.timeout(o.timeoutMs),
    headers: {
      'content-type': 'application/json',
      'user-agent': 'hanzo-ml-reload-hook',
      [RELOAD_HEADERS.signature]: reloadSignature(o.secret, timestamp, o.rawBody),
      [RELOAD_HEADERS.timestamp]: String(timestamp),
      [RELOAD_HEADERS.eventId]: o.eventId,
    },
    body: o.rawBody,
  });
  const text = (await res.text().catch(() => '')).slice(0, 300);
  return { ok: res.status >= 200 && res.status < 300, status: res.status, text };
}

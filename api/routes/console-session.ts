// The console's login session. POST /v1/session takes a token, checks it as a bearer token is checked, and answers
// with two cookies: the session, HttpOnly and SameSite=Strict, which seals the token (JWE, A256GCM, with a key made
// once under HANZO_ML_HOME/secrets) so that the browser never holds it readable, and the CSRF token, readable by
// the page, which every write authenticated by the cookie repeats in the x-csrf-token header (api/auth.ts). The
// token is checked again on every request, so revoking it, or its expiry, ends the session at once. Each session has
// an id: signing out records it (db/repo/console-sessions.ts), so a copy of the cookie is refused afterwards too.
// A session signed in through the IAM (console-oidc.ts) also seals the IAM's refresh token, when it gave one, and
// when its access token expires: the token is renewed near its expiry and the cookie sealed again with the new one.
import { hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Hono, type Context } from 'hono';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import { EncryptJWT, jwtDecrypt } from 'jose';
import { SESSION_COOKIE, SessionLoginSchema, type SessionView } from '../../contracts/console-session.js';
import type { Db } from '../../db/client.js';
import type { Principal } from '../../db/repo/auth.js';
import { isConsoleSessionRevoked, revokeConsoleSession } from '../../db/repo/console-sessions.js';
import { durationMs } from '../../lib/config.js';
import type { ApiDeps, AppEnv } from '../deps.js';
import { canApprove, specOfRole } from '../auth.js';
import { ApiError } from '../errors.js';
import { jsonBody } from '../validate.js';

/** The CSRF cookie: readable by the console's script (not HttpOnly), so it can repeat the value in the header. */
export const CSRF_COOKIE = 'hanzo_ml_csrf';

/** What a session cookie opens to: its id, the token it was made from and its CSRF token. */
export interface OpenedSession {
  /** random, per sign-in: what signing out revokes */
  id: string;
  token: string;
  csrf: string;
  /** when the session ends (auth.session_ttl after sign-in; renewing its token does not extend it) */
  expiresAt: Date;
  /** the IAM's refresh token (an IAM sign-in whose token answer had one), never readable outside the cookie */
  refreshToken?: string;
  /** when `token` expires, where known (an IAM access token): it is renewed a little before */
  tokenExpiresAt?: Date;
}

/** The IAM tokens of a session beside its access token. */
export type SessionRenewal = Pick<OpenedSession, 'refreshToken' | 'tokenExpiresAt'>;

/** Seals and opens session cookies (and the OIDC login's short-lived state) with this installation's key. */
export interface SessionSealer {
  seal(token: string, ttlMs: number, renewal?: SessionRenewal): Promise<{ cookie: string } & OpenedSession>;
  /** The same session (id, CSRF token, end) sealed again with a renewed token. */
  reseal(session: OpenedSession): Promise<string>;
  /** null for a cookie that is not ours, was changed, or has expired */
  open(cookie: string): Promise<OpenedSession | null>;
  sealClaims(claims: Record<string, string>, expiresAt: Date): Promise<string>;
  openClaims(sealed: string): Promise<(Record<string, unknown> & { exp: number }) | null>;
}

/** `secret` (auth.session_secret): the key of every replica; else one made once under `home`. */
export function sessionSealer(home: string, secret?: string): SessionSealer {
  let key: Promise<Uint8Array> | null = null;
  const keyOf = (): Promise<Uint8Array> => (key ??= secret ? Promise.resolve(keyOfSecret(secret)) : sessionKey(home));
  const sealClaims = async (claims: Record<string, string>, expiresAt: Date): Promise<string> =>
    new EncryptJWT(claims)
      .setProtectedHeader({ alg: 'dir', enc: 'A256GCM' })
      .setIssuedAt()
      .setExpirationTime(Math.floor(expiresAt.getTime() / 1000))
      .encrypt(await keyOf());
  const openClaims = async (sealed: string) => {
    try {
      const { payload } = await jwtDecrypt(sealed, await keyOf(), { keyManagementAlgorithms: ['dir'], contentEncryptionAlgorithms: ['A256GCM'], requiredClaims: ['exp'] });
      return payload as Record<string, unknown> & { exp: number };
    } catch {
      return null;
    }
  };
  const sealSession = (s: OpenedSession): Promise<string> =>
    sealClaims(
      {
        sid: s.id,
        tok: s.token,
        csrf: s.csrf,
        ...(s.refreshToken ? { rt: s.refreshToken } : {}),
        ...(s.tokenExpiresAt ? { tex: String(s.tokenExpiresAt.getTime()) } : {}),
      },
      s.expiresAt,
    );
  return {
    sealClaims,
    openClaims,
    async seal(token, ttlMs, renewal = {}) {
      const session: OpenedSession = { id: randomBytes(16).toString('base64url'), token, csrf: randomBytes(32).toString('base64url'), expiresAt: new Date(Date.now() + ttlMs), ...renewal };
      return { cookie: await sealSession(session), ...session };
    },
    reseal: sealSession,
    async open(cookie) {
      const claims = await openClaims(cookie);
      // A cookie without a session id could not be signed out: it is not one of ours.
      if (!claims || typeof claims.sid !== 'string' || typeof claims.tok !== 'string' || typeof claims.csrf !== 'string') return null;
      return {
        id: claims.sid,
        token: claims.tok,
        csrf: claims.csrf,
        expiresAt: new Date(claims.exp * 1000),
        ...(typeof claims.rt === 'string' ? { refreshToken: claims.rt } : {}),
        ...(typeof claims.tex === 'string' ? { tokenExpiresAt: new Date(Number(claims.tex)) } : {}),
      };
    },
  };
}

/** The sealer whose `open` also refuses a session signed out on any replica (a revocation row in the catalogue). */
export function revocableSessions(db: Db, sealer: SessionSealer): SessionSealer & { revoke(session: OpenedSession): Promise<void> } {
  return {
    ...sealer,
    async open(cookie) {
      const session = await sealer.open(cookie);
      return session && !(await isConsoleSessionRevoked(db, session.id)) ? session : null;
    },
    revoke: (session) => revokeConsoleSession(db, session.id, session.expiresAt),
  };
}

export type RevocableSessions = ReturnType<typeof revocableSessions>;

/** A 256-bit key from the configured secret (HKDF-SHA256, labelled so it keys nothing else). */
const keyOfSecret = (secret: string): Uint8Array => new Uint8Array(hkdfSync('sha256', secret, 'hanzo-ml', 'console session cookie', 32));

/** The installation's session key, made on first use under HANZO_ML_HOME (readable by its owner only). */
async function sessionKey(home: string): Promise<Uint8Array> {
  const path = join(home, 'secrets', 'console-session.key');
  const existing = await readFile(path).catch(() => null);
  if (existing && existing.length === 32) return existing;
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  // 'wx': two requests racing to make it keep the first one written.
  await writeFile(path, randomBytes(32), { flag: 'wx', mode: 0o600 }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'EEXIST') throw err;
  });
  await chmod(path, 0o600);
  return readFile(path);
}

/** Whether a write carries the session's CSRF token in its header (compared in constant time). */
export function csrfMatches(session: OpenedSession, header: string | undefined): boolean {
  if (!header) return false;
  const given = Buffer.from(header);
  const expected = Buffer.from(session.csrf);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/** Seals the token into a new session and sets its two cookies on the response. */
export async function startSession(c: Context, sealer: SessionSealer, token: string, ttlMs: number, renewal?: SessionRenewal): Promise<OpenedSession> {
  const session = await sealer.seal(token, ttlMs, renewal);
  setSessionCookies(c, session.cookie, session);
  return session;
}

/** The session's two cookies on the response, kept until the session ends. */
export function setSessionCookies(c: Context, cookie: string, session: Pick<OpenedSession, 'csrf' | 'expiresAt'>): void {
  const secure = isHttps(c);
  const maxAge = Math.max(0, Math.round((session.expiresAt.getTime() - Date.now()) / 1000));
  setCookie(c, SESSION_COOKIE, cookie, { path: '/', httpOnly: true, secure, sameSite: 'Strict', maxAge });
  setCookie(c, CSRF_COOKIE, session.csrf, { path: '/', httpOnly: false, secure, sameSite: 'Strict', maxAge });
}

/** Both cookies of a session gone from the browser (signed out, or ended by the IAM). */
export function clearSessionCookies(c: Context): void {
  deleteCookie(c, SESSION_COOKIE, { path: '/', secure: isHttps(c) });
  deleteCookie(c, CSRF_COOKIE, { path: '/', secure: isHttps(c) });
}

/** The session cookie of a request, if any. */
export const sessionCookieOf = (c: Context): string | undefined => getCookie(c, SESSION_COOKIE);

/** Secure cookies on HTTPS (directly, or behind a proxy that says so): a plain-HTTP local stack keeps working. */
export const isHttps = (c: Context): boolean => new URL(c.req.url).protocol === 'https:' || c.req.header('x-forwarded-proto') === 'https';

/**
 * The routes that take no credentials of their own: signing in (the token is in the body) and signing out.
 * Mounted before authentication; GET /v1/session (who am I) is an ordinary authenticated route.
 */
export function sessionLoginRoutes(deps: ApiDeps, sealer: RevocableSessions, principalOf: (token: string) => Promise<Principal | null>) {
  const app = new Hono<AppEnv>();
  const ttl = durationMs(deps.config.auth.session_ttl);

  app.post('/', async (c) => {
    checkSameOrigin(c);
    const { token } = await jsonBody(c, SessionLoginSchema);
    const principal = await principalOf(token);
    if (!principal) throw new ApiError('UNAUTHENTICATED', 'token: unknown, expired or revoked token');
    if (principal.runId !== undefined && principal.runId !== null) throw new ApiError('PERMISSION_DENIED', "token: a job's token cannot sign in to the console");
    return c.json(sessionView(deps, principal, await startSession(c, sealer, token, ttl)));
  });

  // Signing out revokes the session for good, not only the browser's copy of its cookie.
  app.delete('/', async (c) => {
    const cookie = sessionCookieOf(c);
    const session = cookie ? await sealer.open(cookie) : null;
    if (session) await sealer.revoke(session);
    clearSessionCookies(c);
    return c.body(null, 204);
  });
  return app;
}

/** GET /v1/session: who the caller is, by cookie or bearer token, and the CSRF token of a cookie session. */
export function sessionRoutes(deps: ApiDeps, sealer: SessionSealer) {
  const app = new Hono<AppEnv>();
  app.get('/', async (c) => {
    const cookie = sessionCookieOf(c);
    const session = cookie && !c.req.header('authorization') ? await sealer.open(cookie) : null;
    return c.json(sessionView(deps, c.get('principal'), session));
  });
  return app;
}

/**
 * Signing in from another site's page would sign the browser in as someone else (login CSRF): a login names this
 * server as its Origin when the browser sends one, and is JSON (a form cannot send it without a CORS preflight).
 */
function checkSameOrigin(c: Context): void {
  const origin = c.req.header('origin');
  if (origin !== undefined && origin !== new URL(c.req.url).origin && c.req.header('sec-fetch-site') !== 'same-origin')
    throw new ApiError('PERMISSION_DENIED', `a login from a page of another site (Origin "${origin}") is refused`);
  const type = (c.req.header('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/json') throw new ApiError('BAD_REQUEST', `a login is JSON (Content-Type: application/json, got "${type || 'none'}")`);
}

function sessionView(deps: ApiDeps, p: Principal, session: OpenedSession | null): SessionView {
  return {
    subject: p.subject,
    organization: p.organizationId,
    role: specOfRole(p.role).role,
    approver: canApprove(p),
    csrf_token: session?.csrf ?? null,
    expires_at: session?.expiresAt.toISOString() ?? null,
    temporal_ui_url: deps.temporalUiUrl ? `${deps.temporalUiUrl}/namespaces/${encodeURIComponent(deps.config.temporal.namespace)}` : null,
  };
}

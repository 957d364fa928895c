// Signing in to the console through the IAM (with auth.iam_url and auth.console_client_id): OpenID Connect's
// authorization code flow with PKCE for a public client. /v1/session/oidc/start sends the browser to the IAM's
// authorization endpoint (from its discovery document) with a fresh state, nonce and S256 code challenge, kept in
// a short-lived sealed cookie; /v1/session/oidc/callback checks the state, exchanges the code with the verifier,
// verifies the ID token (the issuer's JWKS, audience = the client id, the nonce), and starts a console session
// with the access token, which authenticates every later request exactly as a bearer IAM token does. When the IAM
// also gave a refresh token, the session keeps it sealed, and a request that finds the access token expired or
// about to expire renews it at the token endpoint (sessionRenewer): once per session at a time, the cookie sealed
// again on that response; an IAM that refuses ends the session.
import { createHash, randomBytes } from 'node:crypto';
import { Hono, type Context } from 'hono';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import { createRemoteJWKSet, decodeJwt, jwtVerify } from 'jose';
import { z } from 'zod';
import type { Principal } from '../../db/repo/auth.js';
import { durationMs } from '../../lib/config.js';
import type { ApiDeps, AppEnv } from '../deps.js';
import { ApiError } from '../errors.js';
import { isHttps, setSessionCookies, startSession, type OpenedSession, type SessionRenewal, type SessionSealer } from './console-session.js';

const FLOW_COOKIE = 'hanzo_ml_oidc';
const FLOW_PATH = '/v1/session/oidc';
/** How long the IAM's login page may take before the flow must start again. */
const FLOW_TTL_MS = 10 * 60_000;

const DiscoverySchema = z.object({
  issuer: z.string(),
  authorization_endpoint: z.string().url(),
  token_endpoint: z.string().url(),
  jwks_uri: z.string().url(),
});
type Discovery = z.infer<typeof DiscoverySchema>;

const TokenAnswerSchema = z.object({ id_token: z.string(), access_token: z.string(), refresh_token: z.string().min(1).optional(), expires_in: z.coerce.number().positive().optional() });
/** A refresh's answer: a new access token, and a new refresh token when the IAM rotates them. */
const RefreshAnswerSchema = TokenAnswerSchema.omit({ id_token: true });
type Tokens = z.infer<typeof RefreshAnswerSchema>;

/** How long before its access token expires a session renews it: no request goes out with one about to lapse. */
export const RENEW_MARGIN_MS = 60_000;
/**
 * How long a renewal answers the requests that still carry the cookie it replaced (sent before the new cookie
 * arrived): they are given its tokens rather than spending a refresh token the IAM may take only once.
 */
const RENEWED_GRACE_MS = 60_000;

/** A console page to return to: a path of this site only (never `//host` or a URL). */
const safeNext = (next: string | undefined): string => (next && /^\/(?![/\\])/.test(next) ? next : '/jobs');

export function oidcLoginRoutes(deps: ApiDeps, sealer: SessionSealer, principalOf: (token: string) => Promise<Principal | null>) {
  const app = new Hono<AppEnv>();
  const { iam_url, console_client_id: clientId } = deps.config.auth;
  app.get('/options', (c) => c.json({ oidc: Boolean(iam_url && clientId) }));
  if (!iam_url || !clientId) return app;
  const discovery = discoveryOf(iam_url);
  const redirectUri = (c: Context) => `${(deps.config.server.public_url ?? new URL(c.req.url).origin).replace(/\/$/, '')}${FLOW_PATH}/callback`;

  app.get('/oidc/start', async (c) => {
    const d = await discovery();
    const verifier = randomBytes(32).toString('base64url');
    const flow = { state: randomBytes(16).toString('base64url'), nonce: randomBytes(16).toString('base64url'), verifier, next: safeNext(c.req.query('next')) };
    // Lax: the IAM sends the browser back with a top-level GET from its own site, which a Strict cookie would miss.
    setCookie(c, FLOW_COOKIE, await sealer.sealClaims(flow, new Date(Date.now() + FLOW_TTL_MS)), { path: FLOW_PATH, httpOnly: true, secure: isHttps(c), sameSite: 'Lax', maxAge: FLOW_TTL_MS / 1000 });
    const url = new URL(d.authorization_endpoint);
    for (const [k, v] of Object.entries({ response_type: 'code', client_id: clientId, redirect_uri: redirectUri(c), scope: 'openid profile', state: flow.state, nonce: flow.nonce, code_challenge: challengeOf(verifier), code_challenge_method: 'S256' }))
      url.searchParams.set(k, v);
    return c.redirect(url.href, 302);
  });

  app.get('/oidc/callback', async (c) => {
    const fail = (why: string) => c.redirect(`/login?error=${encodeURIComponent(why)}`, 302);
    const flow = await sealer.openClaims(getCookie(c, FLOW_COOKIE) ?? '');
    deleteCookie(c, FLOW_COOKIE, { path: FLOW_PATH, secure: isHttps(c) });
    if (c.req.query('error')) return fail(`the IAM refused the login: ${c.req.query('error_description') ?? c.req.query('error')}`);
    if (!flow || typeof flow.state !== 'string' || flow.state !== c.req.query('state')) return fail('the login took too long or did not start here: sign in again');
    const code = c.req.query('code');
    if (!code) return fail('the IAM sent no authorization code');
    try {
      const d = await discovery();
      const tokens = await exchange(d, { code, verifier: String(flow.verifier), clientId, redirectUri: redirectUri(c) });
      await jwtVerify(tokens.id_token, jwksOf(d.jwks_uri), { issuer: d.issuer, audience: clientId, algorithms: [...deps.config.auth.algorithms], requiredClaims: ['exp', 'nonce'] }).then(({ payload }) => {
        if (payload.nonce !== flow.nonce) throw new Error('the ID token is not of this login (nonce)');
      });
      if (!(await principalOf(tokens.access_token))) throw new Error('the IAM access token is not accepted by this API');
      await startSession(c, sealer, tokens.access_token, durationMs(deps.config.auth.session_ttl), renewalOf(tokens));
      return c.redirect(safeNext(String(flow.next)), 302);
    } catch (err) {
      deps.log.warn('console OIDC login failed', { error: String(err) });
      return fail(err instanceof Error ? err.message : String(err));
    }
  });
  return app;
}

const challengeOf = (verifier: string): string => createHash('sha256').update(verifier).digest('base64url');

/** The issuer's discovery document, fetched once (again after a failure). */
function discoveryOf(issuer: string): () => Promise<Discovery> {
  let cached: Promise<Discovery> | null = null;
  return () =>
    (cached ??= (async () => {
      const res = await fetch(`${issuer.replace(/\/$/, '')}/.well-known/openid-configuration`, { signal: AbortSignal.timeout(5000) });
      if (!res.ok) throw new Error(`the IAM's discovery document answered HTTP ${res.status}`);
      const doc = DiscoverySchema.parse(await res.json());
      if (doc.issuer.replace(/\/$/, '') !== issuer.replace(/\/$/, '')) throw new Error(`the IAM's discovery document names issuer "${doc.issuer}", not auth.iam_url "${issuer}"`);
      return doc;
    })().catch((err: unknown) => {
      cached = null;
      throw err;
    }));
}

const jwksSets = new Map<string, ReturnType<typeof createRemoteJWKSet>>();
function jwksOf(uri: string): ReturnType<typeof createRemoteJWKSet> {
  let set = jwksSets.get(uri);
  if (!set) jwksSets.set(uri, (set = createRemoteJWKSet(new URL(uri), { timeoutDuration: 5000 })));
  return set;
}

/** The code for tokens at the token endpoint, proving with the PKCE verifier that this server asked for it. */
async function exchange(d: Discovery, p: { code: string; verifier: string; clientId: string; redirectUri: string }): Promise<z.infer<typeof TokenAnswerSchema>> {
  const body = new URLSearchParams({ grant_type: 'authorization_code', code: p.code, redirect_uri: p.redirectUri, client_id: p.clientId, code_verifier: p.verifier });
  const { ok, status, answer } = await postToken(d, body);
  if (!ok) throw new Error(`the IAM's token endpoint refused the code: ${whyRefused(answer, status)}`);
  const parsed = TokenAnswerSchema.safeParse(answer);
  if (!parsed.success) throw new Error("the IAM's token answer has no id_token and access_token");
  return parsed.data;
}

/** A form POST to the token endpoint (the public client: its id in the form, no secret) and its JSON answer. */
async function postToken(d: Discovery, body: URLSearchParams): Promise<{ ok: boolean; status: number; answer: Record<string, unknown> }> {
  const res = await fetch(d.token_endpoint, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' }, body, signal: AbortSignal.timeout(10_000) });
  return { ok: res.ok, status: res.status, answer: (await res.json().catch(() => ({}))) as Record<string, unknown> };
}

const whyRefused = (answer: Record<string, unknown>, status: number): string => String(answer.error_description ?? answer.error ?? `HTTP ${status}`);

/** The IAM said no to a refresh token (an OAuth error answer): the session it belongs to is over. */
class RefreshRefused extends Error {}

/**
 * A refresh token for new tokens (grant_type=refresh_token, RFC 6749 section 6). A 4xx answer is a refusal; a
 * 5xx, a timeout or an unreadable answer is the IAM out of reach, which a later request may try again.
 */
async function refresh(d: Discovery, clientId: string, refreshToken: string): Promise<Tokens> {
  const { ok, status, answer } = await postToken(d, new URLSearchParams({ grant_type: 'refresh_token', refresh_token: refreshToken, client_id: clientId }));
  if (!ok && status >= 400 && status < 500) throw new RefreshRefused(whyRefused(answer, status));
  if (!ok) throw new Error(`the IAM's token endpoint answered HTTP ${status}`);
  const parsed = RefreshAnswerSchema.safeParse(answer);
  if (!parsed.success) throw new Error("the IAM's refresh answer has no access_token");
  return parsed.data;
}

/**
 * What a session keeps beside an access token: the refresh token, and when the access token expires (`expires_in`,
 * else the token's own `exp` when it is a JWT; neither: it is never renewed ahead of time).
 */
function renewalOf(tokens: Tokens, previousRefreshToken?: string): SessionRenewal {
  const refreshToken = tokens.refresh_token ?? previousRefreshToken;
  let expiresAt: number | null = tokens.expires_in !== undefined ? Date.now() + tokens.expires_in * 1000 : null;
  if (expiresAt === null) {
    try {
      const { exp } = decodeJwt(tokens.access_token);
      expiresAt = typeof exp === 'number' ? exp * 1000 : null;
    } catch {
      expiresAt = null; // an opaque token: its expiry is the IAM's to know
    }
  }
  return { ...(refreshToken ? { refreshToken } : {}), ...(expiresAt !== null ? { tokenExpiresAt: new Date(expiresAt) } : {}) };
}

/** A renewed access token and what the session keeps beside it. */
interface Renewed {
  token: string;
  renewal: SessionRenewal;
}

/** Renews a session's access token when needed; answers the session to authenticate the request with. */
export type SessionRenewer = (c: Context, session: OpenedSession) => Promise<OpenedSession>;

/**
 * With auth.iam_url and auth.console_client_id: renews a session's IAM access token once it is within
 * RENEW_MARGIN_MS of its expiry, with the refresh token the session keeps, and seals the cookie again on the
 * response. Requests of one session that need it together share one refresh (an IAM may take a refresh token once
 * only, and a second use may even revoke the session), and so do, for RENEWED_GRACE_MS, requests that still carry
 * the cookie it replaced. This is per API process: with several replicas behind no session affinity, two of them may
 * each try the same refresh token, and the one the IAM refuses answers 401 (the console then asks GET /v1/session
 * with the cookie the browser holds by then before it shows the login). A refused refresh ends the session: its
 * access token has expired and the IAM will not renew it, so every request of it is answered 401.
 */
export function sessionRenewer(deps: ApiDeps, sessions: SessionSealer): SessionRenewer | null {
  const { iam_url, console_client_id: clientId } = deps.config.auth;
  if (!iam_url || !clientId) return null;
  const discovery = discoveryOf(iam_url);
  /** by session id: the refresh token a renewal spent, and what it got */
  const renewals = new Map<string, { from: string; renewed: Promise<Renewed> }>();

  const renew = async (session: OpenedSession & { refreshToken: string }): Promise<Renewed> => {
    const known = renewals.get(session.id);
    if (known && known.from === session.refreshToken) {
      const renewed = await known.renewed;
      const expiresAt = renewed.renewal.tokenExpiresAt;
      if (!expiresAt || expiresAt.getTime() > Date.now()) return renewed;
    }
    const renewed = discovery()
      .then((d) => refresh(d, clientId, session.refreshToken))
      .then((tokens) => ({ token: tokens.access_token, renewal: renewalOf(tokens, session.refreshToken) }));
    const entry = { from: session.refreshToken, renewed };
    renewals.set(session.id, entry);
    const forget = () => void (renewals.get(session.id) === entry && renewals.delete(session.id));
    // A refusal is kept as long as a success: the requests that share the cookie hear it without asking again.
    renewed.then(
      () => setTimeout(forget, RENEWED_GRACE_MS).unref(),
      (err: unknown) => (err instanceof RefreshRefused ? setTimeout(forget, RENEWED_GRACE_MS).unref() : forget()),
    );
    return renewed;
  };

  return async (c, session) => {
    const { refreshToken, tokenExpiresAt } = session;
    if (!refreshToken || !tokenExpiresAt || tokenExpiresAt.getTime() - Date.now() > RENEW_MARGIN_MS) return session;
    let next: Renewed;
    try {
      next = await renew({ ...session, refreshToken });
    } catch (err) {
      // Neither signed out nor its cookies cleared here: with several API replicas, the refusal may be of a refresh
      // token another replica has just spent for this session, whose new cookie must keep working.
      if (err instanceof RefreshRefused) throw new ApiError('UNAUTHENTICATED', `the console session has ended: the IAM refused to renew its access token (${err.message}): sign in again`);
      deps.log.warn('console session: the IAM access token could not be renewed', { error: String(err) });
      // The IAM out of reach: a token that has not expired yet still serves, and the next request tries again.
      if (tokenExpiresAt.getTime() > Date.now()) return session;
      throw new ApiError('TEMPORARILY_UNAVAILABLE', `the console session's IAM access token has expired and the IAM could not renew it: ${(err as Error).message}`);
    }
    const renewed: OpenedSession = { id: session.id, csrf: session.csrf, expiresAt: session.expiresAt, token: next.token, ...next.renewal };
    setSessionCookies(c, await sessions.reseal(renewed), renewed);
    return renewed;
  };
}

// Signing in to the console through the IAM (with auth.iam_url and auth.console_client_id): OpenID Connect's
// authorization code flow with PKCE for a public client. /v1/session/oidc/start sends the browser to the IAM's
// authorization endpoint (from its discovery document) with a fresh state, nonce and S256 code challenge, kept in
// a short-lived sealed cookie; /v1/session/oidc/callback checks the state, exchanges the code with the verifier,
// verifies the ID token (the issuer's JWKS, audience = the client id, the nonce), and starts a console session
// with the access token, which authenticates every later request exactly as a bearer IAM token does.
import { createHash, randomBytes } from 'node:crypto';
import { Hono, type Context } from 'hono';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import { z } from 'zod';
import type { Principal } from '../../db/repo/auth.js';
import { durationMs } from '../../lib/config.js';
import type { ApiDeps, AppEnv } from '../deps.js';
import { isHttps, startSession, type SessionSealer } from './console-session.js';

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

const TokenAnswerSchema = z.object({ id_token: z.string(), access_token: z.string() });

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
      await startSession(c, sealer, tokens.access_token, durationMs(deps.config.auth.session_ttl));
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
  const res = await fetch(d.token_endpoint, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' }, body, signal: AbortSignal.timeout(10_000) });
  const answer = (await res.json().catch(() => ({}))) as Record<string, unknown>;
  if (!res.ok) throw new Error(`the IAM's token endpoint refused the code: ${String(answer.error_description ?? answer.error ?? `HTTP ${res.status}`)}`);
  const parsed = TokenAnswerSchema.safeParse(answer);
  if (!parsed.success) throw new Error("the IAM's token answer has no id_token and access_token");
  return parsed.data;
}

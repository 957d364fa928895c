// Console login through the IAM: OIDC authorization code with PKCE, on the real app (createApp) over PGlite. The
// IAM is a stand-in served on loopback by this test (discovery document, authorization endpoint that signs the user
// in at once, token endpoint that checks the PKCE verifier and renews tokens with single-use refresh tokens, JWKS),
// since no IAM runs here; Temporal is not used by these routes (a stand-in client that is never called).
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appWithoutTemporal } from './support/api-app.js';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { loadConfig } from '../lib/config.js';
import { testConfig } from './support/config.js';
import { freePort } from './support/ports.js';

const ORIGIN = 'http://127.0.0.1:8057';
const CLIENT_ID = 'hanzo-ml-console';
const AUDIENCE = 'hanzo-ml-api';
let iam: Server;
let issuer = '';
let catalogue: Catalogue;
let app: ReturnType<typeof appWithoutTemporal>;
/** what the stand-in IAM remembers of each code it issued */
const codes = new Map<string, { challenge: string; nonce: string; redirectUri: string }>();
/** the stand-in IAM's refresh tokens: each may be used once (rotated on every refresh) */
const refreshTokens = new Map<string, 'unused' | 'used'>();
/** how the stand-in IAM behaves, and what it saw of refreshes */
const iamState = { accessTtl: 600, refuseRefresh: false, refreshDelayMs: 0, refreshes: 0, lastRefreshForm: null as URLSearchParams | null, lastRefreshToken: '' };

async function standInIam(port: number): Promise<Server> {
  const keys = await generateKeyPair('RS256', { extractable: true });
  const jwk = { ...(await exportJWK(keys.publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' };
  const now = () => Math.floor(Date.now() / 1000);
  const sign = (claims: Record<string, unknown>) => new SignJWT({ iss: issuer, sub: 'alice', org: 'iam-acme', iat: now(), exp: now() + 600, ...claims }).setProtectedHeader({ alg: 'RS256', kid: 'k1' }).sign(keys.privateKey);
  const accessToken = () => sign({ aud: AUDIENCE, roles: ['ml-researcher'], exp: now() + iamState.accessTtl });
  const newRefreshToken = () => {
    const token = `rt-${randomBytes(16).toString('hex')}`;
    refreshTokens.set(token, 'unused');
    iamState.lastRefreshToken = token;
    return token;
  };
  const server = createServer((req, res) => {
    const url = new URL(req.url!, issuer);
    const json = (status: number, body: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    if (url.pathname === '/iam/.well-known/openid-configuration')
      return json(200, { issuer, authorization_endpoint: `${issuer}/authorize`, token_endpoint: `${issuer}/token`, jwks_uri: `${issuer}/jwks` });
    if (url.pathname === '/iam/jwks') return json(200, { keys: [jwk] });
    if (url.pathname === '/iam/authorize') {
      const q = url.searchParams;
      if (q.get('client_id') !== CLIENT_ID || q.get('code_challenge_method') !== 'S256' || !q.get('code_challenge')) return json(400, { error: 'invalid_request' });
      const code = randomBytes(8).toString('hex');
      codes.set(code, { challenge: q.get('code_challenge')!, nonce: q.get('nonce')!, redirectUri: q.get('redirect_uri')! });
      return res.writeHead(302, { location: `${q.get('redirect_uri')}?code=${code}&state=${encodeURIComponent(q.get('state')!)}` }).end();
    }
    if (url.pathname === '/iam/token' && req.method === 'POST') {
      let body = '';
      req.on('data', (d: Buffer) => (body += d.toString()));
      req.on('end', () => {
        const form = new URLSearchParams(body);
        if (form.get('grant_type') === 'refresh_token') return void refreshGrant(form);
        const issued = codes.get(form.get('code') ?? '');
        const verified = issued && createHash('sha256').update(form.get('code_verifier') ?? '').digest('base64url') === issued.challenge;
        if (!issued || !verified || form.get('redirect_uri') !== issued.redirectUri) return json(400, { error: 'invalid_grant', error_description: 'PKCE verification failed' });
        codes.delete(form.get('code')!);
        void Promise.all([sign({ aud: CLIENT_ID, nonce: issued.nonce }), accessToken()]).then(([id, access]) => json(200, { id_token: id, access_token: access, token_type: 'Bearer', refresh_token: newRefreshToken() }));
      });
      return;
    }
    /** A public client's refresh: its id, no secret; a refresh token used once is refused ever after. */
    async function refreshGrant(form: URLSearchParams) {
      iamState.refreshes++;
      iamState.lastRefreshForm = form;
      const token = form.get('refresh_token') ?? '';
      const known = refreshTokens.get(token);
      refreshTokens.set(token, 'used');
      await new Promise((r) => setTimeout(r, iamState.refreshDelayMs));
      if (form.get('client_id') !== CLIENT_ID || form.has('client_secret')) return json(401, { error: 'invalid_client' });
      if (iamState.refuseRefresh || known !== 'unused') return json(400, { error: 'invalid_grant', error_description: 'the refresh token is expired, revoked or already used' });
      json(200, { access_token: await accessToken(), token_type: 'Bearer', refresh_token: newRefreshToken() });
    }
    json(404, {});
  });
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', () => r()));
  return server;
}

beforeAll(async () => {
  const port = await freePort();
  issuer = `http://127.0.0.1:${port}/iam`;
  iam = await standInIam(port);
  const loaded = testConfig({ HANZO_ML_AUTH_IAM_URL: issuer, HANZO_ML_AUTH_JWKS_URL: `${issuer}/jwks`, HANZO_ML_AUTH_AUDIENCE: AUDIENCE, HANZO_ML_AUTH_ORGANIZATIONS: 'iam-acme=acme', HANZO_ML_AUTH_CONSOLE_CLIENT_ID: CLIENT_ID });
  catalogue = await openCatalogue({});
  app = appWithoutTemporal(catalogue.db, loaded);
});
afterAll(async () => {
  await catalogue?.close();
  iam?.close();
});

const cookiesOf = (res: Response): string => res.headers.getSetCookie().map((c) => c.split(';')[0]!).filter((c) => !/=$/.test(c)).join('; ');

/** Starts a login: the IAM URL the browser is sent to, and the flow cookie. */
async function start(next = '/jobs/abc'): Promise<{ authorize: URL; flowCookie: string; setCookie: string[] }> {
  const res = await app.request(`${ORIGIN}/v1/session/oidc/start?next=${encodeURIComponent(next)}`);
  expect(res.status).toBe(302);
  return { authorize: new URL(res.headers.get('location')!), flowCookie: cookiesOf(res), setCookie: res.headers.getSetCookie() };
}

/** What the IAM's login answers: the callback URL with the code and state. */
async function atIam(authorize: URL): Promise<URL> {
  const res = await fetch(authorize, { redirect: 'manual' });
  expect(res.status).toBe(302);
  return new URL(res.headers.get('location')!);
}

/** Signs in through the IAM: the session's cookie header and its Set-Cookie lines. */
async function signedIn(): Promise<{ cookie: string; setCookie: string[] }> {
  const { authorize, flowCookie } = await start('/jobs');
  const landed = await app.request((await atIam(authorize)).href, { headers: { cookie: flowCookie } });
  expect(landed.headers.get('location')).toBe('/jobs');
  return { cookie: cookiesOf(landed), setCookie: landed.headers.getSetCookie() };
}

/** A session whose access token has expired: signed in with one that lives 1 s, then 1.1 s later. */
async function signedInExpired(): Promise<string> {
  iamState.accessTtl = 1;
  const { cookie } = await signedIn();
  iamState.accessTtl = 600;
  await new Promise((r) => setTimeout(r, 1100));
  return cookie;
}

const me = (cookie: string) => app.request(`${ORIGIN}/v1/session`, { headers: { cookie } });

describe('console login through the IAM (OIDC, PKCE)', () => {
  it('tells the login page that the IAM login is on', async () => {
    expect(await (await app.request(`${ORIGIN}/v1/session/options`)).json()).toEqual({ oidc: true });
  });

  it('signs in through the IAM with an S256 code challenge and lands on the page asked for, signed in by cookie', async () => {
    const { authorize, flowCookie, setCookie } = await start('/jobs/abc');
    expect(authorize.origin + authorize.pathname).toBe(`${issuer}/authorize`);
    expect(Object.fromEntries(authorize.searchParams)).toMatchObject({ response_type: 'code', client_id: CLIENT_ID, code_challenge_method: 'S256', redirect_uri: `${ORIGIN}/v1/session/oidc/callback` });
    expect(setCookie[0]).toMatch(/HttpOnly/);
    expect(setCookie[0]).toMatch(/SameSite=Lax/);
    const callback = await atIam(authorize);
    const landed = await app.request(callback.href, { headers: { cookie: flowCookie } });
    expect(landed.status).toBe(302);
    expect(landed.headers.get('location')).toBe('/jobs/abc');
    const session = cookiesOf(landed);
    expect(session).toMatch(/hanzo_ml_session=/);
    const me = await app.request(`${ORIGIN}/v1/session`, { headers: { cookie: session } });
    expect(await me.json()).toMatchObject({ subject: 'alice', organization: 'acme', role: 'ml-researcher', approver: false });
  });

  it('refuses a callback whose state is not of the login this browser started', async () => {
    const a = await start();
    const b = await start();
    const callbackA = await atIam(a.authorize);
    const res = await app.request(callbackA.href, { headers: { cookie: b.flowCookie } });
    expect(res.status).toBe(302);
    expect(decodeURIComponent(res.headers.get('location')!)).toMatch(/^\/login\?error=.*sign in again/);
    expect(cookiesOf(res)).not.toMatch(/hanzo_ml_session/);
  });

  it("refuses a code exchanged without its login's PKCE verifier", async () => {
    const a = await start();
    const b = await start();
    const callbackA = await atIam(a.authorize);
    // Flow B's cookie with flow A's state and code: the state matches B's only if forged, so forge it.
    const forged = new URL(callbackA.href);
    forged.searchParams.set('state', b.authorize.searchParams.get('state')!);
    const res = await app.request(forged.href, { headers: { cookie: b.flowCookie } });
    expect(decodeURIComponent(res.headers.get('location')!)).toMatch(/PKCE verification failed/);
    expect(cookiesOf(res)).not.toMatch(/hanzo_ml_session/);
  });

  it('sends a next that is not a path of this site to the jobs page', async () => {
    const { authorize, flowCookie } = await start('//evil.example/x');
    const landed = await app.request((await atIam(authorize)).href, { headers: { cookie: flowCookie } });
    expect(landed.headers.get('location')).toBe('/jobs');
  });

  it('refuses auth.console_client_id without auth.iam_url at start-up', () => {
    expect(() => loadConfig({ HANZO_ML_HOME: '/tmp/unused', HANZO_ML_AUTH_CONSOLE_CLIENT_ID: CLIENT_ID })).toThrow(/auth\.console_client_id.*auth\.iam_url/s);
  });
});

describe("the IAM session's access token renewal", () => {
  it('renews an expired access token with the refresh token (public client, no secret), answers the request and seals the cookie again', async () => {
    const cookie = await signedInExpired();
    const before = iamState.refreshes;
    const res = await me(cookie);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ subject: 'alice', organization: 'acme' });
    expect(iamState.refreshes - before).toBe(1);
    expect(Object.fromEntries(iamState.lastRefreshForm!)).toEqual({ grant_type: 'refresh_token', refresh_token: expect.stringMatching(/^rt-/), client_id: CLIENT_ID });
    const resealed = cookiesOf(res);
    expect(resealed).toMatch(/hanzo_ml_session=/);
    expect(resealed).not.toBe(cookie);
    // The new cookie holds a token good for 10 minutes: no refresh. The replaced cookie, still sent by requests
    // that left before the new one arrived, is answered with the same renewal, not a second use of its refresh token.
    for (const c of [resealed, cookie]) expect((await me(c)).status).toBe(200);
    expect(iamState.refreshes - before).toBe(1);
  });

  it('refreshes once for two requests of one session at the same time', async () => {
    const cookie = await signedInExpired();
    const before = iamState.refreshes;
    iamState.refreshDelayMs = 300;
    try {
      const answers = await Promise.all([me(cookie), app.request(`${ORIGIN}/v1/jobs`, { headers: { cookie } })]);
      expect(answers.map((r) => r.status)).toEqual([200, 200]);
      for (const r of answers) expect(cookiesOf(r)).toMatch(/hanzo_ml_session=/);
    } finally {
      iamState.refreshDelayMs = 0;
    }
    expect(iamState.refreshes - before).toBe(1);
  });

  it('ends the session when the IAM refuses the refresh: 401 naming why, and the cookie refused after', async () => {
    const cookie = await signedInExpired();
    iamState.refuseRefresh = true;
    try {
      const res = await me(cookie);
      expect(res.status).toBe(401);
      expect(((await res.json()) as { message: string }).message).toMatch(/IAM refused to renew its access token.*sign in again/);
      expect(cookiesOf(res)).not.toMatch(/hanzo_ml_session=/);
    } finally {
      iamState.refuseRefresh = false;
    }
    expect((await me(cookie)).status).toBe(401);
  });

  it('keeps the refresh token sealed: not readable in any cookie, before or after a renewal', async () => {
    const { setCookie } = await signedIn();
    const issued = iamState.lastRefreshToken;
    expect(issued).toMatch(/^rt-/);
    const readable = (lines: string[]) => lines.flatMap((l) => [l, ...l.split(/[=;.]/).map((part) => Buffer.from(part, 'base64url').toString('latin1'))]).join('\n');
    expect(readable(setCookie)).not.toContain(issued);
    expect(readable(setCookie)).not.toContain(issued.slice(3));
    const renewed = await me(await signedInExpired());
    expect(renewed.status).toBe(200);
    expect(readable(renewed.headers.getSetCookie())).not.toContain(iamState.lastRefreshToken.slice(3));
    expect(setCookie.find((c) => c.startsWith('hanzo_ml_session='))).toMatch(/HttpOnly/);
  });
});

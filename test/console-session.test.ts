// The console's login session and how the API serves the console, on the real app (createApp) over an embedded
// PGlite catalogue; Temporal is not used by these routes (a stand-in client that is never called). The console and
// MLflow UI builds are two small stand-in directories: what is tested is the serving, not the pages.
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appWithoutTemporal } from './support/api-app.js';
import { CONSOLE_CSP } from '../api/routes/console.js';
import { sessionSealer } from '../api/routes/console-session.js';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { isConsoleSessionRevoked, purgeExpiredRevocations, revokeConsoleSession } from '../db/repo/console-sessions.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { DEV_TOKEN, testConfig } from './support/config.js';

const ORIGIN = 'http://127.0.0.1:8057';
let catalogue: Catalogue;
let app: ReturnType<typeof appWithoutTemporal>;

function staticBuild(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'hanzo-ml-build-'));
  for (const [path, body] of Object.entries(files)) {
    mkdirSync(join(dir, path, '..'), { recursive: true });
    writeFileSync(join(dir, path), body);
  }
  return dir;
}

beforeAll(async () => {
  const consoleDir = staticBuild({ 'index.html': '<!doctype html><title>console</title>', 'assets/index-abc123.js': 'console.log(1)' });
  const mlflowDir = staticBuild({ 'index.html': '<!doctype html><title>mlflow</title>' });
  const loaded = testConfig({ HANZO_ML_SERVER_CONSOLE_DIR: consoleDir, HANZO_ML_SERVER_MLFLOW_UI_DIR: mlflowDir, HANZO_ML_AUTH_SESSION_TTL: '1h' });
  catalogue = await openCatalogue({});
  await seedDevOrganization(catalogue.db, 'dev', DEV_TOKEN);
  app = appWithoutTemporal(catalogue.db, loaded, { temporalUiUrl: 'http://temporal-ui.example' });
});
afterAll(async () => catalogue?.close());

const request = (path: string, init: RequestInit & { headers?: Record<string, string> } = {}) => app.request(`${ORIGIN}${path}`, init);
const json = (body: unknown, headers: Record<string, string> = {}) => ({ method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

/** Signs in and answers the cookie header to send back and the CSRF token. */
async function signIn(token: string): Promise<{ cookie: string; csrf: string; setCookie: string[] }> {
  const res = await request('/v1/session', json({ token }));
  expect(res.status).toBe(200);
  const setCookie = res.headers.getSetCookie();
  const cookie = setCookie.map((c) => c.split(';')[0]).join('; ');
  return { cookie, csrf: ((await res.json()) as { csrf_token: string }).csrf_token, setCookie };
}

describe('console login session', () => {
  it('refuses an unknown token, naming the field, and sets no cookie', async () => {
    const res = await request('/v1/session', json({ token: 'not-a-token' }));
    expect(res.status).toBe(401);
    expect(((await res.json()) as { message: string }).message).toMatch(/^token: unknown/);
    expect(res.headers.getSetCookie()).toEqual([]);
    const empty = await request('/v1/session', json({ token: '' }));
    expect(empty.status).toBe(400);
    expect(((await empty.json()) as { message: string }).message).toMatch(/token/);
  });

  it('sets an HttpOnly SameSite=Strict session cookie that does not hold the token, and a readable CSRF cookie', async () => {
    const { setCookie, csrf } = await signIn(DEV_TOKEN);
    const session = setCookie.find((c) => c.startsWith('hanzo_ml_session='))!;
    expect(session).toMatch(/HttpOnly/);
    expect(session).toMatch(/SameSite=Strict/);
    expect(session).toMatch(/Path=\//);
    expect(session).not.toMatch(/Secure/); // plain HTTP here; a local stack must keep working
    expect(session).not.toContain(DEV_TOKEN);
    const csrfCookie = setCookie.find((c) => c.startsWith('hanzo_ml_csrf='))!;
    expect(csrfCookie).not.toMatch(/HttpOnly/);
    expect(csrfCookie).toContain(`hanzo_ml_csrf=${csrf}`);
    const https = await request('/v1/session', json({ token: DEV_TOKEN }, { 'x-forwarded-proto': 'https' }));
    expect(https.headers.getSetCookie().every((c) => /; Secure/.test(c))).toBe(true);
  });

  it('authenticates reads by the cookie with the same role as the token, and says who is signed in', async () => {
    const { cookie, csrf } = await signIn(DEV_TOKEN);
    const me = await request('/v1/session', { headers: { cookie } });
    expect(await me.json()).toMatchObject({ subject: 'dev', organization: 'dev', role: 'ml-admin', approver: true, csrf_token: csrf, temporal_ui_url: 'http://temporal-ui.example/namespaces/default' });
    expect((await request('/v1/jobs', { headers: { cookie } })).status).toBe(200);
    expect((await request('/v1/jobs')).status).toBe(401);
  });

  it('refuses a write by cookie without the CSRF header or with a wrong one, and accepts it with the right one', async () => {
    const { cookie, csrf } = await signIn(DEV_TOKEN);
    const create = (headers: Record<string, string>) => request('/api/2.0/mlflow/experiments/create', json({ name: `csrf-${Object.keys(headers).length}-${Math.random()}` }, { cookie, ...headers }));
    const missing = await create({});
    expect(missing.status).toBe(403);
    expect(((await missing.json()) as { message: string }).message).toContain('x-csrf-token');
    expect((await create({ 'x-csrf-token': 'x'.repeat(csrf.length) })).status).toBe(403);
    expect((await create({ 'x-csrf-token': csrf })).status).toBe(200);
  });

  it("lets the read-only MLflow UI's search posts through by cookie alone, but not the same post sent directly", async () => {
    const { cookie } = await signIn(DEV_TOKEN);
    const viaUi = await request('/mlflow/ajax-api/2.0/mlflow/experiments/search', json({ max_results: 5 }, { cookie }));
    expect(viaUi.status).toBe(200);
    expect((await request('/ajax-api/2.0/mlflow/experiments/search', json({ max_results: 5 }, { cookie }))).status).toBe(403);
    expect((await request('/mlflow/ajax-api/2.0/mlflow/experiments/create', json({ name: 'x' }, { cookie }))).status).toBe(403);
  });

  it('ends the session when its token is revoked, when the cookie is altered, and on sign-out', async () => {
    const made = await request('/v1/tokens', json({ subject: 'short-lived', role: 'ml-viewer' }, { authorization: `Bearer ${DEV_TOKEN}` }));
    const { id, token } = (await made.json()) as { id: string; token: string };
    const { cookie } = await signIn(token);
    expect((await request('/v1/session', { headers: { cookie } })).status).toBe(200);
    expect((await request(`/v1/tokens/${id}`, { method: 'DELETE', headers: { authorization: `Bearer ${DEV_TOKEN}` } })).status).toBe(200);
    const revoked = await request('/v1/session', { headers: { cookie } });
    expect(revoked.status).toBe(401);
    expect(((await revoked.json()) as { message: string }).message).toMatch(/revoked/);

    const own = await signIn(DEV_TOKEN);
    const altered = own.cookie.replace(/hanzo_ml_session=([^;]{10})/, 'hanzo_ml_session=AAAAAAAAAA');
    expect((await request('/v1/session', { headers: { cookie: altered } })).status).toBe(401);
    const out = await request('/v1/session', { method: 'DELETE', headers: { cookie: own.cookie } });
    expect(out.status).toBe(204);
    expect(out.headers.getSetCookie().every((c) => /Max-Age=0/.test(c))).toBe(true);
    expect((await request('/v1/session', { headers: { cookie: own.cookie } })).status).toBe(401);
  });

  it('refuses a session cookie captured before sign-out afterwards, on every replica sharing the catalogue', async () => {
    // Two API replicas: the same catalogue and session secret, each its own app (and its own HANZO_ML_HOME).
    const secret = { HANZO_ML_AUTH_SESSION_SECRET: 'a-shared-secret-of-at-least-32-characters' };
    const [one, two] = [testConfig(secret), testConfig(secret)].map((l) => appWithoutTemporal(catalogue.db, l));
    const login = await one!.request(`${ORIGIN}/v1/session`, json({ token: DEV_TOKEN }));
    expect(login.status).toBe(200);
    const captured = login.headers.getSetCookie().map((c) => c.split(';')[0]).join('; ');
    expect((await two!.request(`${ORIGIN}/v1/session`, { headers: { cookie: captured } })).status).toBe(200);
    // A second sign-in of the same token is a session of its own: signing the first out leaves it open.
    const other = (await signIn(DEV_TOKEN)).cookie;

    expect((await one!.request(`${ORIGIN}/v1/session`, { method: 'DELETE', headers: { cookie: captured } })).status).toBe(204);
    for (const replica of [one!, two!]) {
      const after = await replica.request(`${ORIGIN}/v1/session`, { headers: { cookie: captured } });
      expect(after.status).toBe(401);
      expect(((await after.json()) as { message: string }).message).toMatch(/sign in again/);
      expect((await replica.request(`${ORIGIN}/api/2.0/mlflow/experiments/search`, json({}, { cookie: captured }))).status).toBe(401);
    }
    expect((await request('/v1/session', { headers: { cookie: other } })).status).toBe(200);
    // Signing out again with the revoked cookie changes nothing and still clears the browser's copy.
    expect((await two!.request(`${ORIGIN}/v1/session`, { method: 'DELETE', headers: { cookie: captured } })).status).toBe(204);
  });

  it('keeps a revocation only until the session would have expired by itself', async () => {
    await revokeConsoleSession(catalogue.db, 'expired-session', new Date(Date.now() - 1000));
    await revokeConsoleSession(catalogue.db, 'live-session', new Date(Date.now() + 3_600_000));
    expect(await isConsoleSessionRevoked(catalogue.db, 'live-session')).toBe(true);
    // The second revocation purged the first's row: past its expiry the cookie is refused by the expiry alone.
    expect(await isConsoleSessionRevoked(catalogue.db, 'expired-session')).toBe(false);
    expect(await purgeExpiredRevocations(catalogue.db, new Date(Date.now() + 7_200_000))).toBeGreaterThanOrEqual(1);
    expect(await isConsoleSessionRevoked(catalogue.db, 'live-session')).toBe(false);
  });

  it("refuses a login from another site's page and a login that is not JSON", async () => {
    const foreign = await request('/v1/session', json({ token: DEV_TOKEN }, { origin: 'https://evil.example' }));
    expect(foreign.status).toBe(403);
    expect(foreign.headers.getSetCookie()).toEqual([]);
    const form = await request('/v1/session', { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `token=${DEV_TOKEN}` });
    expect(form.status).toBe(400);
  });
});

describe('session keys', () => {
  it('opens a session sealed by another API replica with the same auth.session_secret, and not one of another key', async () => {
    const secret = 'a-shared-secret-of-at-least-32-characters';
    const homes = [0, 1, 2].map(() => mkdtempSync(join(tmpdir(), 'hanzo-ml-home-')));
    const sealed = await sessionSealer(homes[0]!, secret).seal('some-token', 60_000);
    expect(await sessionSealer(homes[1]!, secret).open(sealed.cookie)).toMatchObject({ token: 'some-token', csrf: sealed.csrf });
    expect(await sessionSealer(homes[2]!).open(sealed.cookie)).toBeNull();
    // Without a secret each home makes its own key: another replica's cookie is not valid there.
    const own = await sessionSealer(homes[2]!).seal('t', 60_000);
    expect(await sessionSealer(homes[2]!).open(own.cookie)).toMatchObject({ token: 't' });
    expect(await sessionSealer(homes[1]!).open(own.cookie)).toBeNull();
    expect(() => testConfig({ HANZO_ML_AUTH_SESSION_SECRET: 'short' })).toThrow(/auth\.session_secret.*32/s);
  });
});

describe('serving the console', () => {
  it('answers every console path with index.html under a strict CSP, not cached', async () => {
    for (const path of ['/', '/jobs', '/jobs/abc', '/pipelines/p-1/approval', '/login']) {
      const res = await request(path);
      expect(res.status, path).toBe(200);
      expect(await res.text(), path).toContain('<title>console</title>');
      expect(res.headers.get('content-security-policy'), path).toBe(CONSOLE_CSP);
      expect(res.headers.get('cache-control'), path).toBe('no-cache');
      expect(res.headers.get('x-frame-options'), path).toBe('DENY');
    }
    expect(CONSOLE_CSP).toMatch(/default-src 'self'/);
    expect(CONSOLE_CSP).toMatch(/frame-ancestors 'none'/);
    expect(CONSOLE_CSP).not.toMatch(/unsafe-inline|unsafe-eval/);
  });

  it('caches hashed assets for a year and answers a missing or escaping asset 404', async () => {
    const asset = await request('/assets/index-abc123.js');
    expect(asset.status).toBe(200);
    expect(asset.headers.get('content-type')).toContain('javascript');
    expect(asset.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    expect((await request('/assets/index-missing.js')).status).toBe(404);
    expect((await request('/assets/..%2f..%2f..%2fetc%2fpasswd')).status).toBe(404);
  });

  it("keeps the API's, MLflow's and OpenAPI's own 404s, and answers index.html to no write", async () => {
    for (const path of ['/v1/no-such-route', '/api/2.0/mlflow/nothing', '/ajax-api/2.0/mlflow/nothing', '/mlflow/nothing', '/openapi.json/x']) {
      const res = await request(path, { headers: { authorization: `Bearer ${DEV_TOKEN}` } });
      expect(res.status, path).toBe(404);
      expect(res.headers.get('content-type'), path).toContain('application/json');
    }
    const post = await request('/jobs', { method: 'POST' });
    expect(post.status).toBe(404);
    expect(post.headers.get('content-type')).toContain('application/json');
  });
});

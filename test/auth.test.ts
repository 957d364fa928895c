// Token-less requests: accepted as a developer of the dev organization only on a loopback-only local stack
// (so the stock mlflow client works with just MLFLOW_TRACKING_URI), refused elsewhere unless configured.
import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { anonymousPrincipal, authenticate, requireRole } from '../api/auth.js';
import type { AppEnv } from '../api/deps.js';
import { ApiError, ERROR_STATUS } from '../api/errors.js';
import { loadConfig } from '../lib/config.js';
import type { Db } from '../db/client.js';

const config = (env: Record<string, string>) => loadConfig({ HANZO_ML_HOME: '/tmp/unused', ...env }).config;

describe('anonymous access', () => {
  it('is a developer of the dev organization on a loopback-only server', () => {
    expect(anonymousPrincipal(config({}))).toEqual({ organizationId: 'dev', subject: 'anonymous', role: 'developer' });
    expect(anonymousPrincipal(config({ HANZO_ML_SERVER_HOST: 'localhost' }))?.role).toBe('developer');
  });

  it('is off on a server reachable from other machines unless the operator turns it on', () => {
    expect(anonymousPrincipal(config({ HANZO_ML_SERVER_HOST: '0.0.0.0' }))).toBeNull();
    expect(anonymousPrincipal(config({ HANZO_ML_SERVER_HOST: '0.0.0.0', HANZO_ML_AUTH_ANONYMOUS_ROLE: 'viewer' }))?.role).toBe('viewer');
    expect(anonymousPrincipal(config({ HANZO_ML_AUTH_ANONYMOUS_ROLE: 'none' }))).toBeNull();
  });

  it('lets a token-less request through as that principal, who still cannot approve', async () => {
    const app = new Hono<AppEnv>();
    app.onError((err, c) => c.json({ error_code: err instanceof ApiError ? err.code : 'INTERNAL_ERROR' }, err instanceof ApiError ? ERROR_STATUS[err.code] : 500));
    // No database access happens without a token.
    app.use('*', authenticate(null as unknown as Db, { anonymous: anonymousPrincipal(config({})) }));
    app.get('/who', (c) => c.json(c.get('principal')));
    app.post('/approve', (c) => c.json(requireRole(c, 'approver')));
    expect(await (await app.request('/who')).json()).toMatchObject({ subject: 'anonymous', role: 'developer' });
    expect(await (await app.request('/approve', { method: 'POST' })).json()).toEqual({ error_code: 'PERMISSION_DENIED' });
  });
});

describe('job tokens', () => {
  it('reach only their own run\'s reporting calls, and stop working when they expire', async () => {
    const { openCatalogue } = await import('../db/client.js');
    const { createJobToken, seedDevOrganization } = await import('../db/repo/auth.js');
    const cat = await openCatalogue({});
    try {
      await seedDevOrganization(cat.db, 'dev', 'hanzo-ml-dev-token');
      const token = await createJobToken(cat.db, { organizationId: 'dev', job: 'p-train', runId: 'run-1', ttlMs: 60_000 });
      const expired = await createJobToken(cat.db, { organizationId: 'dev', job: 'p-eval', runId: 'run-1', ttlMs: -1 });
      const app = new Hono<AppEnv>();
      app.onError((err, c) => c.json({ error_code: err instanceof ApiError ? err.code : 'INTERNAL_ERROR' }, err instanceof ApiError ? ERROR_STATUS[err.code] : 500));
      app.use('*', authenticate(cat.db));
      app.post('/api/2.0/mlflow/runs/log-batch', (c) => c.json(c.get('principal')));
      app.get('/v1/models', (c) => c.json({ ok: true }));
      const call = (path: string, t: string, body?: unknown) =>
        app.request(path, { method: body ? 'POST' : 'GET', headers: { authorization: `Bearer ${t}`, 'content-type': 'application/json' }, ...(body ? { body: JSON.stringify(body) } : {}) });
      const own = await call('/api/2.0/mlflow/runs/log-batch', token, { run_id: 'run-1', metrics: [] });
      expect(own.status).toBe(200);
      expect(await own.json()).toMatchObject({ organizationId: 'dev', subject: 'job:p-train', role: 'developer', runId: 'run-1' });
      expect((await call('/api/2.0/mlflow/runs/log-batch', token, { run_id: 'run-2', metrics: [] })).status).toBe(404);
      expect((await call('/v1/models', token)).status).toBe(403);
      expect((await call('/api/2.0/mlflow/runs/log-batch', expired, { run_id: 'run-1', metrics: [] })).status).toBe(401);
    } finally {
      await cat.close();
    }
  });
});

describe('token-less loopback access', () => {
  const app = new Hono<AppEnv>();
  app.onError((err, c) => c.json({ error_code: err instanceof ApiError ? err.code : 'INTERNAL_ERROR', message: err.message }, err instanceof ApiError ? ERROR_STATUS[err.code] : 500));
  app.use('*', authenticate(null as unknown as Db, { anonymous: anonymousPrincipal(config({})), port: 8057 }));
  app.all('/v1/*', (c) => c.json({ ok: true }));
  const req = (path: string, init: RequestInit & { headers?: Record<string, string> } = {}) => app.request(`http://127.0.0.1:8057${path}`, init);

  it('accepts the local CLI and scripts', async () => {
    expect((await req('/v1/models')).status).toBe(200);
    expect((await req('/v1/models', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })).status).toBe(200);
    expect((await req('/v1/models', { headers: { origin: 'http://127.0.0.1:8057' } })).status).toBe(200);
    expect((await req('/v1/datasets?name=x', { method: 'POST', headers: { 'content-type': 'application/x-ndjson' }, body: '{}' })).status).toBe(200);
  });

  it('refuses a rebound DNS name (foreign Host), a foreign Origin and a form post', async () => {
    const host = await req('/v1/models', { headers: { host: 'evil.example:8057' } });
    expect(host.status).toBe(403);
    expect(((await host.json()) as { message: string }).message).toMatch(/Host "evil\.example:8057"/);
    expect((await req('/v1/models', { headers: { host: '127.0.0.1:9999' } })).status).toBe(403);
    expect((await req('/v1/models', { headers: { origin: 'https://evil.example' } })).status).toBe(403);
    expect((await req('/v1/models', { headers: { origin: 'null' } })).status).toBe(403);
  });

  it("refuses an Origin of another loopback port, scheme or address: another program's page is another site", async () => {
    for (const origin of ['http://127.0.0.1:8058', 'http://127.0.0.1', 'https://127.0.0.1:8057', 'http://localhost:8057', 'http://127.0.0.2:8057']) {
      const r = await req('/v1/models', { headers: { origin } });
      expect([origin, r.status, ((await r.json()) as { message: string }).message]).toEqual([origin, 403, expect.stringMatching(/another site \(Origin "[^"]*"\) is refused/)]);
    }
    // Addressed as localhost, the page of localhost:8057 is this server's own.
    expect((await req('/v1/models', { headers: { host: 'localhost:8057', origin: 'http://localhost:8057' } })).status).toBe(200);
    expect((await req('/v1/models', { headers: { 'sec-fetch-site': 'cross-site' } })).status).toBe(403);
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
      expect([type, (await req('/v1/pipelines', { method: 'POST', headers: { 'content-type': type }, body: '{}' })).status]).toEqual([type, 403]);
    }
    expect((await req('/v1/datasets?name=x', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: '{}' })).status).toBe(403);
  });
});

describe('the development token', () => {
  it('is refused on a stack reachable from other machines, and revoked by a production server start', async () => {
    const { startRuntime } = await import('../runtime/embedded.js');
    const { openCatalogue } = await import('../db/client.js');
    const { principalForToken } = await import('../db/repo/auth.js');
    const { testConfig } = await import('./support/config.js');
    const exposed = testConfig({ HANZO_ML_SERVER_HOST: '0.0.0.0' });
    await expect(startRuntime({ ...exposed, temporalAddress: '127.0.0.1:1', temporalUiUrl: null })).rejects.toThrow(/server\.host: 0\.0\.0\.0 .*development stack's admin token/);
    const custom = testConfig({ HANZO_ML_AUTH_DEV_TOKEN: 'my-own-dev-token' });
    await expect(startRuntime({ ...custom, temporalAddress: '127.0.0.1:1', temporalUiUrl: null, devToken: false })).rejects.toThrow(/auth\.dev_token: the development token exists only for a loopback/);
    // A changed development token replaces the old one; a production start revokes it.
    const { join } = await import('node:path');
    const local = testConfig();
    const { seedDevOrganization, revokeDevTokens } = await import('../db/repo/auth.js');
    const cat = await openCatalogue({ pgliteDir: join(local.home, 'pg') });
    try {
      await seedDevOrganization(cat.db, 'dev', 'hanzo-ml-dev-token');
      await seedDevOrganization(cat.db, 'dev', 'a-changed-dev-token');
      expect(await principalForToken(cat.db, 'hanzo-ml-dev-token')).toBeNull();
      expect(await principalForToken(cat.db, 'a-changed-dev-token')).toMatchObject({ role: 'admin' });
      await revokeDevTokens(cat.db, 'dev');
      expect(await principalForToken(cat.db, 'a-changed-dev-token')).toBeNull();
    } finally {
      await cat.close();
    }
  });
});

describe('IAM settings', () => {
  it('refuses verify_tokens: false and a JWKS without an issuer at start-up', async () => {
    const { checkCombinations } = await import('../lib/config.js');
    expect(() => checkCombinations(config({ HANZO_ML_AUTH_VERIFY_TOKENS: 'false' }))).toThrow(/auth\.verify_tokens .*false is not supported/);
    expect(() => checkCombinations(config({ HANZO_ML_AUTH_JWKS_URL: 'http://127.0.0.1:1/jwks' }))).toThrow(/auth\.jwks_url .*needs auth\.iam_url/);
    expect(() => checkCombinations(config({}))).not.toThrow();
  });
});

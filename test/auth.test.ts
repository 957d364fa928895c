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
    app.use('*', authenticate(null as unknown as Db, anonymousPrincipal(config({}))));
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
      app.use('*', authenticate(cat.db, null));
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

// `hanzo-ml admin bootstrap`: the first administrator of an empty catalogue, exactly once. The CLI runs as the
// operator would run it (a process, against the PGlite of HANZO_ML_HOME); the token it prints then drives an API
// of the `serve` shape (no development token). A concurrent pair on a real Postgres proves the once is atomic.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { and, eq } from 'drizzle-orm';
import { afterAll, describe, expect, it } from 'vitest';
import { repoRoot } from '../lib/config.js';
import { openCatalogue } from '../db/client.js';
import { AlreadyBootstrappedError, bootstrapOperator, principalForToken } from '../db/repo/auth.js';
import { apiTokens, auditLog } from '../db/schema/index.js';
import { startTemporalDevServer } from '../lib/temporal-dev-server.js';
import { startRuntime } from '../runtime/embedded.js';
import { testConfig } from './support/config.js';
import { startPostgres, type TestPostgres } from './support/postgres.js';

function adminBootstrap(home: string, ...args: string[]) {
  const res = spawnSync(join(repoRoot, 'bin', 'hanzo-ml'), ['admin', 'bootstrap', ...args], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, HANZO_ML_HOME: home, HANZO_ML_LOGGING_LEVEL: 'warn' },
    encoding: 'utf8',
    timeout: 120_000,
  });
  return { status: res.status, stdout: res.stdout, stderr: res.stderr };
}

describe('hanzo-ml admin bootstrap', () => {
  let pg: TestPostgres | null = null;
  afterAll(async () => {
    await pg?.stop();
  });

  it('creates the operator organization and one admin on an empty catalogue, refuses a second time, and the printed token drives a serve-shaped API', async () => {
    const loaded = testConfig();
    const first = adminBootstrap(loaded.home, '--subject', 'ops');
    expect(first.status, first.stderr).toBe(0);
    const printed = JSON.parse(first.stdout) as { organization: string; subject: string; role: string; token: string; token_id: string };
    expect(printed).toMatchObject({ organization: 'dev', subject: 'ops', role: 'ml-admin' });
    expect(printed.token).toMatch(/^hml_/);

    const second = adminBootstrap(loaded.home, '--subject', 'someone-else');
    expect(second.status).toBe(1);
    expect(second.stderr).toMatch(/bootstrapped on .* \(admin "ops" of organization "dev"\)/);
    expect(second.stdout).not.toMatch(/hml_/);

    // A file target is written once, owner-only, and the token is not printed.
    const tokenFile = join(loaded.home, 'admin-token');
    const third = adminBootstrap(loaded.home, '--token-file', tokenFile);
    expect(third.status).toBe(1);
    expect(existsSync(tokenFile)).toBe(false);

    mkdirSync(join(loaded.home, 'logs'), { recursive: true });
    const temporal = await startTemporalDevServer({ binary: loaded.bootstrap.temporal, home: loaded.home, port: 0, uiPort: null, namespace: 'default' });
    const runtime = await startRuntime({ ...loaded, temporalAddress: temporal.address, temporalUiUrl: null, worker: false, devToken: false, listen: false });
    try {
      const db = runtime.catalogue.db;
      const admins = await db.select().from(apiTokens).where(and(eq(apiTokens.organizationId, 'dev'), eq(apiTokens.role, 'admin')));
      expect(admins.map((t) => t.subject).filter((s) => s !== 'dev')).toEqual(['ops']);
      expect((await db.select().from(auditLog).where(eq(auditLog.action, 'admin.bootstrap'))).length).toBe(1);
      const call = (method: string, path: string, body?: unknown) =>
        runtime.app.request(path, {
          method,
          headers: { authorization: `Bearer ${printed.token}`, host: '127.0.0.1', ...(body ? { 'content-type': 'application/json' } : {}) },
          ...(body ? { body: JSON.stringify(body) } : {}),
        });
      // The development token is revoked in this shape; the bootstrapped admin is what remains.
      expect((await runtime.app.request('/v1/tokens', { headers: { authorization: 'Bearer hanzo-ml-dev-token', host: '127.0.0.1' } })).status).toBe(401);
      const tenant = await call('POST', '/v1/organizations', { name: 'team-a', admin_subject: 'lead' });
      expect(tenant.status, await tenant.clone().text()).toBe(201);
      const tenantToken = ((await tenant.json()) as { admin_token: { token: string } }).admin_token.token;
      expect(await principalForToken(db, tenantToken)).toMatchObject({ organizationId: 'team-a', role: 'admin' });
    } finally {
      await runtime.stop();
      await temporal.stop();
    }
  }, 180_000);

  it('writes the token to a new owner-only file when asked, and prints no token', () => {
    const loaded = testConfig();
    const tokenFile = join(loaded.home, 'admin-token');
    const res = adminBootstrap(loaded.home, '--token-file', tokenFile);
    expect(res.status, res.stderr).toBe(0);
    expect(res.stdout).not.toMatch(/hml_/);
    expect(readFileSync(tokenFile, 'utf8')).toMatch(/^hml_[\w-]+\n$/);
    expect(statSync(tokenFile).mode & 0o777).toBe(0o600);
  }, 120_000);

  it('lets exactly one of two concurrent bootstraps of one Postgres catalogue win; the loser changes nothing', async () => {
    pg = await startPostgres();
    const url = await pg.createDatabase('bootstrap_race');
    const [a, b] = [await openCatalogue({ url }), await openCatalogue({ url })];
    try {
      const results = await Promise.allSettled([bootstrapOperator(a.db, { organizationId: 'ops-org', subject: 'alice' }), bootstrapOperator(b.db, { organizationId: 'ops-org', subject: 'bob' })]);
      const won = results.filter((r) => r.status === 'fulfilled');
      const lost = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
      expect(won.length).toBe(1);
      expect(lost.length).toBe(1);
      expect(lost[0]!.reason).toBeInstanceOf(AlreadyBootstrappedError);
      const tokens = await a.db.select().from(apiTokens).where(eq(apiTokens.organizationId, 'ops-org'));
      expect(tokens.length).toBe(1);
      expect((await a.db.select().from(auditLog).where(eq(auditLog.action, 'admin.bootstrap'))).length).toBe(1);
    } finally {
      await a.close();
      await b.close();
    }
  }, 120_000);
});

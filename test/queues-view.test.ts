// GET /v1/queues through the real authentication middleware, over a catalogue (PGlite) whose admission gate holds
// jobs of three organizations: what each caller sees of its own organization's queue and of the others'.
import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authenticate } from '../api/auth.js';
import type { ApiDeps, AppEnv } from '../api/deps.js';
import { ApiError, ERROR_STATUS } from '../api/errors.js';
import { queueRoutes } from '../api/routes/queues.js';
import { ConfigSchema } from '../contracts/config.js';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { requestAdmission } from '../db/repo/admissions.js';
import { createApiToken, ensureOrganization, type Role } from '../db/repo/auth.js';
import type { OrganizationQueue } from '../jobs/queue/queue-status.js';

let cat: Catalogue;
let app: Hono<AppEnv>;
const tokens: Record<string, string> = {};
const quota = { max_gpus: 4, max_concurrent_jobs: 1 };
const config = ConfigSchema.parse({ auth: { dev_organization: 'ops' }, scheduler: { quotas: { acme: quota, labs: quota } } });

async function queues(who: string): Promise<OrganizationQueue[]> {
  const res = await app.request('/v1/queues', { headers: { authorization: `Bearer ${tokens[who]!}` } });
  expect(res.status).toBe(200);
  return ((await res.json()) as { organizations: OrganizationQueue[] }).organizations;
}

beforeAll(async () => {
  cat = await openCatalogue({});
  // Each organization: one job admitted (its one slot) and one waiting behind it.
  for (const org of ['ops', 'acme', 'labs'])
    for (const job of ['first', 'second'])
      await requestAdmission(cat.db, { name: `${org}-${job}-secret-model`, organizationId: org, priority: 1, gpus: 2, alreadyRunning: false }, { maxJobs: 1, maxGpus: null, machineGpus: null }, 60_000);
  for (const [who, org, role] of [
    ['operator', 'ops', 'admin'],
    ['acmeAdmin', 'acme', 'admin'],
    ['acmeViewer', 'acme', 'viewer'],
  ] as [string, string, Role][]) {
    await ensureOrganization(cat.db, org);
    await cat.db.transaction(async (tx) => {
      tokens[who] = (await createApiToken(tx, { organizationId: org, subject: who, role, expiresAt: null })).token;
    });
  }
  app = new Hono<AppEnv>();
  app.onError((err, c) => c.json({ error_code: err instanceof ApiError ? err.code : 'INTERNAL_ERROR', message: err.message }, err instanceof ApiError ? ERROR_STATUS[err.code] : 500));
  app.use('*', authenticate(cat.db));
  app.route('/v1/queues', queueRoutes({ db: cat.db, config } as unknown as ApiDeps));
}, 60_000);

afterAll(async () => {
  await cat?.close();
});

describe('GET /v1/queues', () => {
  it("shows an organization's admin its own jobs and other organizations only as totals", async () => {
    const view = await queues('acmeAdmin');
    expect(view.map((q) => [q.organization, q.totals_only])).toEqual([['acme', false], ['labs', true]]);
    const [own, labs] = view;
    expect(own!.jobs.map((j) => [j.job, j.stage])).toEqual([['acme-first-secret-model', 'admitted'], ['acme-second-secret-model', 'waiting_for_slot']]);
    expect(labs).toMatchObject({ organization: 'labs', admitted: 1, pending: 1, gpus_in_use: 2, jobs: [] });
    // Nothing of another organization's jobs, by name or otherwise, is in the answer.
    expect(JSON.stringify(view)).not.toMatch(/labs-(first|second)|ops-/);
  });

  it('shows an admin of the operator organization every organization in full', async () => {
    const view = await queues('operator');
    expect(view.map((q) => [q.organization, q.totals_only, q.jobs.length])).toEqual([['ops', false, 2], ['acme', false, 2], ['labs', false, 2]]);
  });

  it('shows a non-admin its own organization only', async () => {
    expect((await queues('acmeViewer')).map((q) => q.organization)).toEqual(['acme']);
  });
});

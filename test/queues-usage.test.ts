// What the console's queues and usage page reads, through the real authentication middleware over a catalogue
// (PGlite): GET /v1/queues with each organization's jobs that hold or wait for GPUs (by job id, with their place and
// reason) and its GPUs per type against its quota, and GET /v1/usage?months= with the months before, for admins only.
// Another organization's jobs and spending stay out of what an organization's admin sees.
import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authenticate } from '../api/auth.js';
import type { ApiDeps, AppEnv } from '../api/deps.js';
import { ApiError, ERROR_STATUS } from '../api/errors.js';
import { queueRoutes } from '../api/routes/queues.js';
import { monthsBefore, usageRoutes } from '../api/routes/usage.js';
import { ConfigSchema } from '../contracts/config.js';
import type { QueueCatalogue } from '../contracts/console.js';
import type { UsageReport } from '../contracts/cost.js';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { createApiToken, ensureOrganization, type Role } from '../db/repo/auth.js';
import { ensureDefaultExperiment, defaultExperimentId } from '../db/repo/experiments.js';
import { insertJob, setJobQueue, setJobStatus } from '../db/repo/jobs.js';
import { setRunTags } from '../db/repo/params-tags.js';
import { createRun } from '../db/repo/runs.js';
import { jobTotalTags, monthlyUsage } from '../db/repo/usage.js';
import type { OrganizationQueue } from '../jobs/queue/queue-status.js';

let cat: Catalogue;
let app: Hono<AppEnv>;
const tokens: Record<string, string> = {};
const config = ConfigSchema.parse({
  auth: { dev_organization: 'ops' },
  scheduler: { gpu_types: ['nvidia-l4', 'nvidia-h100-80gb'], quotas: { acme: { max_gpus: { 'nvidia-l4': 4, 'nvidia-h100-80gb': 2 }, max_concurrent_jobs: 2 }, labs: { max_gpus: 8, max_concurrent_jobs: 1 } } },
});
const ids: Record<string, string> = {};
type Org = OrganizationQueue & QueueCatalogue;

async function get<T>(who: string, path: string): Promise<{ status: number; body: T }> {
  const res = await app.request(path, { headers: { authorization: `Bearer ${tokens[who]!}` } });
  return { status: res.status, body: (await res.json()) as T };
}

/** A job of `org` asking for `gpus` GPUs of `type`, moved to `status`. */
async function job(org: string, name: string, status: string, gpus: number, type: string | null): Promise<string> {
  const id = `${org}-${name}`;
  await insertJob(cat.db, { id, organizationId: org, name, submittedBy: 'someone', type: 'training', kind: 'command', spec: { type: 'training', resources: { gpus, gpu_type: type } }, status: 'validating', workflowId: `job-${id}` });
  if (status !== 'validating') await setJobStatus(cat.db, id, status, status === 'queued' ? { message: 'waiting for GPUs' } : {});
  ids[name] = id;
  return id;
}

/** A train job of `org` that finished on `finishedAt`, as the training activity's accounting tags its run. */
async function finished(org: string, deviceHours: number, costUsd: number, finishedAt: Date): Promise<void> {
  const id = `run-${org}-${finishedAt.getTime()}`;
  await createRun(cat.db, { id, organizationId: org, experimentId: defaultExperimentId(org), name: id, userId: 'someone', artifactRoot: 'file:///tmp/a' });
  await setRunTags(cat.db, id, jobTotalTags({ seconds: 10, deviceHours, costUsd, tokens: 1000, gpuType: 'nvidia-l4', method: 'lora', baseModel: 'hanzo-tiny-llama', finishedAt }));
}

const monthOf = (d: Date) => d.toISOString().slice(0, 7);
const now = new Date();
const lastMonth = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - 1, 10));

beforeAll(async () => {
  cat = await openCatalogue({});
  for (const [who, org, role] of [
    ['operator', 'ops', 'admin'],
    ['acmeAdmin', 'acme', 'admin'],
    ['acmeViewer', 'acme', 'viewer'],
    ['labsAdmin', 'labs', 'admin'],
  ] as [string, string, Role][]) {
    await ensureOrganization(cat.db, org);
    await ensureDefaultExperiment(cat.db, org, 'file:///tmp/a');
    await cat.db.transaction(async (tx) => {
      tokens[who] = (await createApiToken(tx, { organizationId: org, subject: who, role, expiresAt: null })).token;
    });
  }
  await job('acme', 'l4-runner', 'running', 3, 'nvidia-l4');
  await job('acme', 'h100-runner', 'running', 2, 'nvidia-h100-80gb');
  const second = await job('acme', 'second-in-line', 'queued', 2, 'nvidia-h100-80gb');
  await setJobQueue(cat.db, second, { queue: 'acme', position: 2, reason: 'ClusterQueue acme is full' });
  const first = await job('acme', 'first-in-line', 'queued', 1, 'nvidia-h100-80gb');
  await setJobQueue(cat.db, first, { queue: 'acme', position: 1, reason: 'ClusterQueue acme is full' });
  await job('acme', 'done', 'succeeded', 4, 'nvidia-l4');
  await job('labs', 'labs-secret-model', 'running', 8, null);
  await finished('acme', 1.5, 6, now);
  await finished('acme', 0.5, 2, lastMonth);
  await finished('labs', 9, 99, now);
  app = new Hono<AppEnv>();
  app.onError((err, c) => c.json({ error_code: err instanceof ApiError ? err.code : 'INTERNAL_ERROR', message: err.message }, err instanceof ApiError ? ERROR_STATUS[err.code] : 500));
  app.use('*', authenticate(cat.db));
  const deps = { db: cat.db, config } as unknown as ApiDeps;
  app.route('/v1/queues', queueRoutes(deps));
  app.route('/v1/usage', usageRoutes(deps));
}, 60_000);

afterAll(async () => {
  await cat?.close();
});

describe('GET /v1/queues for the console', () => {
  it("lists the organization's running jobs, then its waiting ones in queue order with why they wait, by job id", async () => {
    const { body } = await get<{ organizations: Org[] }>('acmeAdmin', '/v1/queues');
    const acme = body.organizations.find((o) => o.organization === 'acme')!;
    expect(acme.active_jobs.map((j) => [j.id, j.status, j.position, j.reason])).toEqual([
      [ids['l4-runner'], 'running', null, null],
      [ids['h100-runner'], 'running', null, null],
      [ids['first-in-line'], 'queued', 1, 'ClusterQueue acme is full'],
      [ids['second-in-line'], 'queued', 2, 'ClusterQueue acme is full'],
    ]);
  });

  it('counts GPUs in use per type against the nominal quota of each', async () => {
    const { body } = await get<{ organizations: Org[] }>('acmeAdmin', '/v1/queues');
    expect(body.organizations.find((o) => o.organization === 'acme')!.gpu_types).toEqual([
      { gpu_type: 'nvidia-h100-80gb', quota: 2, in_use: 2 },
      { gpu_type: 'nvidia-l4', quota: 4, in_use: 3 },
    ]);
    // A quota of one number applies to each type; a job that asked for no type counts as "any".
    expect(body.organizations.find((o) => o.organization === 'labs')!.gpu_types).toEqual([
      { gpu_type: 'any', quota: null, in_use: 8 },
      { gpu_type: 'nvidia-h100-80gb', quota: 8, in_use: 0 },
      { gpu_type: 'nvidia-l4', quota: 8, in_use: 0 },
    ]);
  });

  it("shows another organization's GPUs as totals only, none of its jobs, and the operator's admin everything", async () => {
    const { body } = await get<{ organizations: Org[] }>('acmeAdmin', '/v1/queues');
    const labs = body.organizations.find((o) => o.organization === 'labs')!;
    expect(labs).toMatchObject({ totals_only: true, jobs: [], active_jobs: [] });
    expect(JSON.stringify(body)).not.toContain('labs-secret-model');
    const operator = await get<{ organizations: Org[] }>('operator', '/v1/queues');
    expect(operator.body.organizations.find((o) => o.organization === 'labs')!.active_jobs.map((j) => j.name)).toEqual(['labs-secret-model']);
    const viewer = await get<{ organizations: Org[] }>('acmeViewer', '/v1/queues');
    expect(viewer.body.organizations.map((o) => o.organization)).toEqual(['acme']);
  });
});

describe('GET /v1/usage?months= for the console', () => {
  it("answers the organization's GPU-hours and cost for each of the last months, oldest first", async () => {
    const { status, body } = await get<UsageReport>('acmeAdmin', '/v1/usage?months=3');
    expect(status).toBe(200);
    expect(body.history!.map((h) => h.month)).toEqual([...monthsBefore(monthOf(now), 2), monthOf(now)]);
    const acme = (m: string) => body.history!.find((h) => h.month === m)!.organizations;
    expect(acme(monthOf(now))).toEqual([{ organization_id: 'acme', gpu_hours: 1.5, cost_usd: 6, jobs: 1, monthly_budget_usd: null }]);
    expect(acme(monthOf(lastMonth))).toMatchObject([{ organization_id: 'acme', gpu_hours: 0.5, cost_usd: 2, jobs: 1 }]);
    expect(acme(monthsBefore(monthOf(now), 2)[0]!)).toMatchObject([{ organization_id: 'acme', gpu_hours: 0, jobs: 0 }]);
    // Another organization's spending is not an organization admin's to see.
    expect(JSON.stringify(body)).not.toContain('labs');
  });

  it("gives the operator's admin every organization's months", async () => {
    const { body } = await get<UsageReport>('operator', '/v1/usage?months=2');
    expect(body.history!.at(-1)!.organizations.map((o) => [o.organization_id, o.gpu_hours])).toEqual([
      ['acme', 1.5],
      ['labs', 9],
    ]);
  });

  it('refuses the months of usage to a non-admin, and a bad months naming the field', async () => {
    const refused = await get<{ message: string }>('acmeViewer', '/v1/usage?months=3');
    expect(refused.status).toBe(403);
    expect(refused.body.message).toMatch(/needs "ml-admin"/);
    expect((await get('acmeViewer', '/v1/usage')).status).toBe(200);
    const bad = await get<{ message: string }>('acmeAdmin', '/v1/usage?months=99');
    expect(bad.status).toBe(400);
    expect(bad.body.message).toMatch(/months/);
  });

  describe('over months of several organizations, in one grouped query', () => {
    // The months 2025-01..2025-04, far from today's: the tests above see none of these jobs. Quarters, halves and
    // whole numbers add exactly in any order, so sums grouped differently compare equal.
    const budgets = { acme: 100, quiet: 40 };
    let budgeted: Hono<AppEnv>;
    beforeAll(async () => {
      await ensureOrganization(cat.db, 'zeta');
      await ensureDefaultExperiment(cat.db, 'zeta', 'file:///tmp/a');
      for (const [org, hours, at] of [
        ['acme', 1.5, '2025-01-15T10:00:00.000Z'],
        ['acme', 0.25, '2025-01-31T23:59:59.999Z'],
        ['acme', 0.5, '2025-02-01T00:00:00.000Z'],
        ['acme', 2, '2025-04-10T08:00:00.000Z'],
        ['labs', 4, '2025-02-20T12:00:00.000Z'],
        ['labs', 1, '2025-03-01T00:00:00.000Z'],
        ['zeta', 0.75, '2025-03-15T00:00:00.000Z'],
        ['zeta', 8, '2024-12-31T23:59:59.999Z'],
        ['zeta', 3, '2025-05-01T00:00:00.000Z'],
      ] as const)
        await finished(org, hours, hours * 4, new Date(at));
      budgeted = new Hono<AppEnv>();
      budgeted.onError((err, c) => c.json({ error_code: err instanceof ApiError ? err.code : 'INTERNAL_ERROR', message: err.message }, err instanceof ApiError ? ERROR_STATUS[err.code] : 500));
      budgeted.use('*', authenticate(cat.db));
      budgeted.route('/v1/usage', usageRoutes({ db: cat.db, config: { ...config, scheduler: { ...config.scheduler, monthly_budgets_usd: budgets } } } as unknown as ApiDeps));
    });

    /** What the route answered for a month before it grouped: one monthlyUsage query, the budgeted (or asked) organizations listed. */
    async function perMonth(month: string, scope: string | undefined, withBudgets: Record<string, number>): Promise<UsageReport['organizations']> {
      const rows = await monthlyUsage(cat.db, month, scope);
      const listed = [...new Set([...rows.map((r) => r.organization_id), ...(scope ? [scope] : Object.keys(withBudgets))])].sort();
      return listed.map((org) => {
        const r = rows.find((x) => x.organization_id === org);
        return { organization_id: org, gpu_hours: r?.gpu_hours ?? 0, cost_usd: r?.cost_usd ?? 0, jobs: r?.jobs ?? 0, monthly_budget_usd: withBudgets[org as keyof typeof withBudgets] ?? null };
      });
    }

    const months = ['2025-01', '2025-02', '2025-03', '2025-04'];
    for (const [who, label, query, scope] of [
      ['operator', "the operator's admin: every organization", '', undefined],
      ['operator', "the operator's admin asking for one organization", '&organization=labs', 'labs'],
      ['acmeAdmin', "an organization's admin: its own", '', 'acme'],
    ] as const)
      it(`answers what one query per month answered, for ${label}`, async () => {
        // Without budgets, and with budgets that list the budgeted organizations in every month.
        for (const [target, withBudgets] of [
          [app, {}],
          [budgeted, budgets],
        ] as const) {
          const res = await target.request(`/v1/usage?month=2025-04&months=4${query}`, { headers: { authorization: `Bearer ${tokens[who]!}` } });
          expect(res.status).toBe(200);
          const body = (await res.json()) as UsageReport;
          const expected = await Promise.all(months.map(async (m) => ({ month: m, organizations: await perMonth(m, scope, withBudgets) })));
          expect(body.history).toEqual(expected);
          expect(body.organizations).toEqual(expected.at(-1)!.organizations);
        }
      });

    it('puts a job in the month its finish falls in, to the millisecond, and nowhere else', async () => {
      const { body } = await get<UsageReport>('operator', '/v1/usage?month=2025-04&months=4');
      const at = (m: string, org: string) => body.history!.find((h) => h.month === m)!.organizations.find((o) => o.organization_id === org);
      expect(at('2025-01', 'acme')).toMatchObject({ gpu_hours: 1.75, cost_usd: 7, jobs: 2 });
      expect(at('2025-02', 'acme')).toMatchObject({ gpu_hours: 0.5, jobs: 1 });
      expect(at('2025-02', 'labs')).toMatchObject({ gpu_hours: 4, jobs: 1 });
      expect(at('2025-03', 'zeta')).toMatchObject({ gpu_hours: 0.75, jobs: 1 });
      expect(at('2025-01', 'zeta')).toBeUndefined(); // its December and May jobs lie outside the months asked
      expect(body.history!.find((h) => h.month === '2025-04')!.organizations.map((o) => o.organization_id)).toEqual(['acme']);
    });
  });

  it('counts the months back across a year boundary', () => {
    expect(monthsBefore('2026-02', 3)).toEqual(['2025-11', '2025-12', '2026-01']);
  });
});

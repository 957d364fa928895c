// /v1/usage: what the caller's organization spent in a calendar month (UTC): device-hours, dollars and jobs of
// the train jobs that finished in it, beside its monthly budget. An admin of the operator organization
// (auth.dev_organization) sees every organization; anyone else their own only (another's answers 404).
import { Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../deps.js';
import { requireRole } from '../auth.js';
import { monthlyUsage } from '../../db/repo/usage.js';
import { notFound } from '../errors.js';
import { queryParams } from '../validate.js';
import { UsageQuerySchema, type UsageReport } from '../../contracts/cost.js';
import { monthOf } from '../cost.js';

export function usageRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();

  app.get('/', async (c) => {
    const principal = requireRole(c, 'viewer');
    const query = queryParams(c, UsageQuerySchema);
    const month = query.month ?? monthOf(new Date());
    const operator = principal.role === 'admin' && principal.organizationId === deps.config.auth.dev_organization;
    const asked = query.organization;
    // Another organization's usage does not exist for a caller who may not see it.
    if (asked !== undefined && asked !== principal.organizationId && !operator) throw notFound(`usage of organization ${asked}`);
    const scope = asked ?? (operator ? undefined : principal.organizationId);
    const rows = await monthlyUsage(deps.db, month, scope);
    // An organization with a budget (or the caller's own) is listed even in a month it spent nothing.
    const listed = new Set([...rows.map((r) => r.organization_id), ...(scope ? [scope] : Object.keys(deps.config.scheduler.monthly_budgets_usd))]);
    const organizations = [...listed].sort().map((org) => {
      const r = rows.find((x) => x.organization_id === org);
      return { organization_id: org, gpu_hours: r?.gpu_hours ?? 0, cost_usd: r?.cost_usd ?? 0, jobs: r?.jobs ?? 0, monthly_budget_usd: deps.config.scheduler.monthly_budgets_usd[org] ?? null };
    });
    return c.json({ month, organizations } satisfies UsageReport);
  });
  return app;
}

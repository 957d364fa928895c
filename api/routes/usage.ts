// /v1/usage: what the caller's organization spent in a calendar month (UTC): device-hours, dollars and jobs of
// the train jobs that finished in it, beside its monthly budget. An admin of the operator organization
// (auth.dev_organization) sees every organization; anyone else their own only (another's answers 404). With
// months (admins only: the console's queues and usage page) it also answers the totals of the months before.
import { Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../deps.js';
import { requireRole } from '../auth.js';
import { usageByMonth, type MonthUsageRow } from '../../db/repo/usage.js';
import { notFound } from '../errors.js';
import { queryParams } from '../validate.js';
import { UsageQuerySchema, type MonthUsage, type UsageReport } from '../../contracts/cost.js';
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
    if (query.months !== undefined) requireRole(c, 'admin');
    const scope = asked ?? (operator ? undefined : principal.organizationId);
    // Every month asked in one grouped query (by month and organization), not one query per month.
    const months = query.months === undefined ? [month] : [...monthsBefore(month, query.months - 1), month];
    const rows = await usageByMonth(deps.db, months, scope);
    const history = months.map((m) => ({ month: m, organizations: listedUsage(deps, rows.filter((r) => r.month === m), scope) }));
    const organizations = history.at(-1)!.organizations;
    if (query.months === undefined) return c.json({ month, organizations } satisfies UsageReport);
    return c.json({ month, organizations, history } satisfies UsageReport);
  });
  return app;
}

/** One month's totals; an organization with a budget (or the one asked) is listed even in a month it spent nothing. */
function listedUsage(deps: ApiDeps, rows: MonthUsageRow[], scope: string | undefined): MonthUsage[] {
  const listed = new Set([...rows.map((r) => r.organization_id), ...(scope ? [scope] : Object.keys(deps.config.scheduler.monthly_budgets_usd))]);
  return [...listed].sort().map((org) => {
    const r = rows.find((x) => x.organization_id === org);
    return { organization_id: org, gpu_hours: r?.gpu_hours ?? 0, cost_usd: r?.cost_usd ?? 0, jobs: r?.jobs ?? 0, monthly_budget_usd: deps.config.scheduler.monthly_budgets_usd[org] ?? null };
  });
}

/** The `count` calendar months before "YYYY-MM", oldest first. */
export function monthsBefore(month: string, count: number): string[] {
  const [y, m] = month.split('-').map(Number) as [number, number];
  return Array.from({ length: count }, (_, i) => {
    const d = new Date(Date.UTC(y, m - 1 - (count - i), 1));
    return `${d.getUTCFullYear()}-${String(d.getUTCMonth() + 1).padStart(2, '0')}`;
  });
}

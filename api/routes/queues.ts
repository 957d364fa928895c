// /v1/queues: the caller's organization's GPU queue: quota, what runs, what waits and at which position, and GPUs
// borrowed from the cohort (jobs/queue/queue-status.ts). An admin also sees every configured organization, as
// totals only; an admin of the operator organization (auth.dev_organization) sees every one in full.
import { Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../deps.js';
import { requireRole } from '../auth.js';
import { loadKubeConfig } from '../../jobs/executor/kubernetes.js';
import { queueStatus, totalsOnly } from '../../jobs/queue/queue-status.js';

export function queueRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();
  // On a cluster Kueue is read with the same credentials the worker creates Jobs with.
  const kube = deps.config.scheduler.executor === 'kubernetes' ? loadKubeConfig(deps.config.scheduler.kubeconfig) : null;

  app.get('/', async (c) => {
    const principal = requireRole(c, 'viewer');
    const orgs = principal.role === 'admin' ? [...new Set([principal.organizationId, ...Object.keys(deps.config.scheduler.quotas)])] : [principal.organizationId];
    const operator = principal.role === 'admin' && principal.organizationId === deps.config.auth.dev_organization;
    const queues = await queueStatus(deps.db, deps.config, kube, orgs);
    return c.json({ organizations: queues.map((q) => (operator || q.organization === principal.organizationId ? q : totalsOnly(q))) });
  });
  return app;
}

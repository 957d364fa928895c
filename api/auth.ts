// Bearer-token authentication and role checks. Every row is scoped to the caller's organization.
import type { Context, MiddlewareHandler } from 'hono';
import type { Db } from '../db/client.js';
import { principalForToken, type Principal, type Role } from '../db/repo/auth.js';
import { ApiError } from './errors.js';
import type { AppEnv } from './deps.js';
import type { Config } from '../contracts/config.js';

const RANK: Record<Role, number> = { viewer: 0, developer: 1, approver: 2, admin: 3 };

/**
 * Who a request without a token is. A local stack listening on loopback only accepts such requests as a
 * developer of the dev organization, as a local `mlflow server` does, so scripts switch by changing only the
 * tracking URI; approving a promotion still takes a token. Anywhere else anonymous access is off unless the
 * operator sets `auth.anonymous_role`.
 */
export function anonymousPrincipal(config: Pick<Config, 'auth' | 'server'>): Principal | null {
  const loopback = /^(127\.\d+\.\d+\.\d+|::1|localhost)$/.test(config.server.host);
  const role = config.auth.anonymous_role ?? (loopback ? 'developer' : 'none');
  return role === 'none' ? null : { organizationId: config.auth.dev_organization, subject: 'anonymous', role };
}

export function authenticate(db: Db, anonymous: Principal | null = null): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const header = c.req.header('authorization') ?? '';
    const m = /^Bearer\s+(.+)$/i.exec(header);
    if (!m && anonymous) {
      c.set('principal', anonymous);
      return next();
    }
    if (!m) throw new ApiError('UNAUTHENTICATED', 'missing "Authorization: Bearer <token>" header');
    const principal = await principalForToken(db, m[1]!.trim());
    if (!principal) throw new ApiError('UNAUTHENTICATED', 'unknown, expired or revoked token');
    if (typeof principal.runId === 'string') await checkJobScope(c, principal.runId);
    c.set('principal', principal);
    await next();
  };
}

/** The run-reporting calls a job makes (trainer/hanzo_ml/tracking.py) and nothing else. */
const JOB_ROUTES = /^\/(api|ajax-api)\/2\.0\/mlflow\/runs\/(log-batch|log-metric|log-parameter|set-tag|get|update)$/;

/**
 * A job's token reaches only its own run: other routes are refused, another run's id answers 404 as any object
 * of another tenant would. A token with an empty run scope (a job that reports to no run) reaches nothing.
 */
async function checkJobScope(c: Context<AppEnv>, runId: string): Promise<void> {
  if (!JOB_ROUTES.test(c.req.path)) throw new ApiError('PERMISSION_DENIED', 'a job token may only report metrics of its own run');
  let asked = c.req.query('run_id') ?? c.req.query('run_uuid');
  if (asked === undefined && c.req.method !== 'GET') {
    const body = (await c.req.raw.clone().json().catch(() => ({}))) as { run_id?: unknown; run_uuid?: unknown };
    asked = typeof body.run_id === 'string' ? body.run_id : typeof body.run_uuid === 'string' ? body.run_uuid : undefined;
  }
  if (!runId || asked !== runId) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `Run with id=${asked ?? ''} not found`);
}

/** The caller, if their role is at least `min` (viewer < developer < approver < admin). */
export function requireRole(c: Context<AppEnv>, min: Role): Principal {
  const p = c.get('principal');
  if (RANK[p.role] < RANK[min]) throw new ApiError('PERMISSION_DENIED', `role "${p.role}" may not do this (needs "${min}" or higher)`);
  return p;
}

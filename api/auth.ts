// Bearer-token authentication and role checks. Every row is scoped to the caller's organization.
import type { Context, MiddlewareHandler } from 'hono';
import type { Db } from '../db/client.js';
import { principalForToken, type Principal, type Role } from '../db/repo/auth.js';
import { ApiError } from './errors.js';
import type { AppEnv } from './deps.js';

const RANK: Record<Role, number> = { viewer: 0, developer: 1, approver: 2, admin: 3 };

export function authenticate(db: Db): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const header = c.req.header('authorization') ?? '';
    const m = /^Bearer\s+(.+)$/i.exec(header);
    if (!m) throw new ApiError('UNAUTHENTICATED', 'missing "Authorization: Bearer <token>" header');
    const principal = await principalForToken(db, m[1]!.trim());
    if (!principal) throw new ApiError('UNAUTHENTICATED', 'unknown or revoked token');
    c.set('principal', principal);
    await next();
  };
}

/** The caller, if their role is at least `min` (viewer < developer < approver < admin). */
export function requireRole(c: Context<AppEnv>, min: Role): Principal {
  const p = c.get('principal');
  if (RANK[p.role] < RANK[min]) throw new ApiError('PERMISSION_DENIED', `role "${p.role}" may not do this (needs "${min}" or higher)`);
  return p;
}

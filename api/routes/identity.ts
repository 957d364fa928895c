// /v1/organizations, /v1/tokens, /v1/audit: tenants, their API tokens (random, shown once, stored hashed,
// expiring, revocable) and their audit trail. Each change and its audit row commit in one transaction.
import { Hono, type Context } from 'hono';
import { z } from 'zod';
import type { ApiDeps, AppEnv } from '../deps.js';
import { ApiError, notFound } from '../errors.js';
import { jsonBody, queryParams } from '../validate.js';
import { requireRole, roleFromSpec, specOfRole, SPEC_ROLES } from '../auth.js';
import { audit, createApiToken, createOrganization, IdentityError, listApiTokens, listAudit, listJobTokens, revokeApiToken, type JobTokenView, type Principal } from '../../db/repo/auth.js';
import { durationMs } from '../../lib/config.js';

const orgName = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[a-z0-9][a-z0-9-]*$/, 'lower-case letters, digits and "-"');

export const OrganizationCreateSchema = z.strictObject({ name: orgName, admin_subject: z.string().min(1).max(200).default('admin') });
export const TokenCreateSchema = z.strictObject({
  subject: z.string().min(1).max(200).describe('who the token is for (shown in the audit trail)'),
  role: z.enum(SPEC_ROLES),
  approver: z.boolean().default(false).describe('may approve production promotions (ml-admin always may)'),
  expires: z
    .string()
    .regex(/^\d+(m|h|d)$/, 'expected a duration such as "30d" or "12h"')
    .optional()
    .describe('lifetime; unset: never expires'),
});
const TokenListQuerySchema = z.strictObject({
  kind: z.enum(['user', 'job']).default('user').describe("user: tokens made with POST /v1/tokens; job: each job's tracking token"),
});
const AuditQuerySchema = z.strictObject({
  limit: z.coerce.number().int().positive().max(1000).default(100),
  before: z.iso.datetime({ offset: true }).optional(),
  action: z.string().optional(),
});

/** Where the request came from, for the audit trail (the socket's peer; proxies add X-Forwarded-For). */
export function sourceAddress(c: Context<AppEnv>): string | null {
  const forwarded = c.req.header('x-forwarded-for');
  if (forwarded) return forwarded.split(',')[0]!.trim();
  const incoming = (c.env as { incoming?: { socket?: { remoteAddress?: string } } } | undefined)?.incoming;
  return incoming?.socket?.remoteAddress ?? null;
}

/** The audit fields every row of this request shares. */
export function auditContext(c: Context<AppEnv>, p: Principal) {
  c.set('audited', true);
  return { organizationId: p.organizationId, actor: p.subject, requestId: c.get('requestId'), sourceAddress: sourceAddress(c) };
}

export function identityRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();

  /** A new tenant and its first admin token. Only an admin of the operator's organization creates tenants. */
  app.post('/organizations', async (c) => {
    const p = requireRole(c, 'admin');
    if (p.organizationId !== deps.config.auth.dev_organization) throw new ApiError('PERMISSION_DENIED', `only an admin of the operator organization "${deps.config.auth.dev_organization}" creates organizations`);
    const body = await jsonBody(c, OrganizationCreateSchema);
    const created = await deps.db
      .transaction(async (tx) => {
        await createOrganization(tx, body.name);
        const t = await createApiToken(tx, { organizationId: body.name, subject: body.admin_subject, role: 'admin', expiresAt: null });
        await audit(tx, { ...auditContext(c, p), action: 'organization.create', target: body.name, detail: { admin_token_id: t.id } });
        return t;
      })
      .catch((err: unknown) => {
        if (err instanceof IdentityError) throw new ApiError('RESOURCE_ALREADY_EXISTS', err.message);
        throw err;
      });
    return c.json({ organization: body.name, admin_token: { id: created.id, subject: body.admin_subject, role: 'ml-admin', token: created.token } }, 201);
  });

  app.post('/tokens', async (c) => {
    const p = requireRole(c, 'admin');
    const body = await jsonBody(c, TokenCreateSchema);
    const role = roleFromSpec(body.role, body.approver);
    const expiresAt = body.expires ? new Date(Date.now() + durationMs(body.expires)) : null;
    const t = await deps.db.transaction(async (tx) => {
      const t = await createApiToken(tx, { organizationId: p.organizationId, subject: body.subject, role, expiresAt });
      await audit(tx, { ...auditContext(c, p), action: 'token.create', target: t.id, detail: { subject: body.subject, role: body.role, approver: body.approver, expires_at: expiresAt?.toISOString() ?? null } });
      return t;
    });
    return c.json({ id: t.id, token: t.token, subject: body.subject, ...specOfRole(role), expires_at: expiresAt?.toISOString() ?? null }, 201);
  });

  app.get('/tokens', async (c) => {
    const p = requireRole(c, 'admin');
    const q = queryParams(c, TokenListQuerySchema);
    if (q.kind === 'job') return c.json({ tokens: (await listJobTokens(deps.db, p.organizationId)).map(jobTokenView) });
    const rows = await listApiTokens(deps.db, p.organizationId);
    return c.json({
      tokens: rows.map((r) => ({
        id: r.id,
        subject: r.subject,
        ...specOfRole(r.role),
        created_at: r.createdAt.toISOString(),
        expires_at: r.expiresAt?.toISOString() ?? null,
        revoked_at: r.revokedAt?.toISOString() ?? null,
      })),
    });
  });

  /** Revokes a user's or a job's token: a job's stops reporting with its next request. */
  app.delete('/tokens/:id', async (c) => {
    const p = requireRole(c, 'admin');
    const id = c.req.param('id');
    const revoked = await deps.db.transaction(async (tx) => {
      const t = await revokeApiToken(tx, p.organizationId, id);
      if (!t) return null;
      const detail = t.kind === 'job' ? { kind: t.kind, job: t.subject.replace(/^job:/, ''), run_id: t.runId } : { kind: t.kind, subject: t.subject };
      await audit(tx, { ...auditContext(c, p), action: 'token.revoke', target: id, detail });
      return t;
    });
    if (!revoked) throw notFound(`token ${id}`);
    return c.json({ id, kind: revoked.kind, revoked: true });
  });

  app.get('/audit', async (c) => {
    const p = requireRole(c, 'admin');
    const q = queryParams(c, AuditQuerySchema);
    const rows = await listAudit(deps.db, p.organizationId, { limit: q.limit, ...(q.before ? { before: new Date(q.before) } : {}), ...(q.action ? { action: q.action } : {}) });
    return c.json({
      entries: rows.map((r) => ({
        id: r.id,
        time: r.createdAt.toISOString(),
        actor: r.actor,
        organization: r.organizationId,
        action: r.action,
        resource: r.target,
        outcome: r.outcome,
        request_id: r.requestId,
        source_address: r.sourceAddress,
        repeat_count: r.repeatCount,
        detail: JSON.parse(r.detail) as unknown,
      })),
    });
  });

  return app;
}

/** A job token as an admin sees it: which job and run, and whether it still works. */
function jobTokenView(t: JobTokenView) {
  const live = t.revokedAt === null && (t.expiresAt === null || t.expiresAt.getTime() > Date.now());
  return {
    id: t.id,
    job: t.job,
    run_id: t.runId || null,
    active: live,
    created_at: t.createdAt.toISOString(),
    expires_at: t.expiresAt?.toISOString() ?? null,
    revoked_at: t.revokedAt?.toISOString() ?? null,
  };
}

import { randomBytes, randomUUID } from 'node:crypto';
import { eq } from 'drizzle-orm';
import type { Db } from '../client.js';
import { apiTokens, auditLog, organizations } from '../schema/index.js';
import { sha256Text } from '../../lib/hash.js';
import type { Tx } from './outbox.js';

export type Role = 'admin' | 'developer' | 'approver' | 'viewer';
export interface Principal {
  organizationId: string;
  subject: string;
  role: Role;
  /** set for a job's token: the one run it may report to */
  runId?: string | null;
}

/** Creates the development organization and its token once; both are idempotent. */
export async function seedDevOrganization(db: Db, orgName: string, token: string): Promise<void> {
  await db.insert(organizations).values({ id: orgName, name: orgName }).onConflictDoNothing();
  await db
    .insert(apiTokens)
    .values({ id: randomUUID(), organizationId: orgName, subject: 'dev', role: 'admin', tokenSha256: sha256Text(token) })
    .onConflictDoNothing();
}

export async function principalForToken(db: Db, token: string): Promise<Principal | null> {
  const [row] = await db.select().from(apiTokens).where(eq(apiTokens.tokenSha256, sha256Text(token))).limit(1);
  if (!row || (row.expiresAt && row.expiresAt.getTime() <= Date.now())) return null;
  return { organizationId: row.organizationId, subject: row.subject, role: row.role, runId: row.runId };
}

/**
 * A token for one job: it may only report metrics of its run (api/auth.ts enforces the scope), and it expires
 * with the longest a job may run. Jobs never receive the API's own or an organization's admin token.
 */
export async function createJobToken(db: Db, p: { organizationId: string; job: string; runId: string | null; ttlMs: number }): Promise<string> {
  const token = `hmljob_${randomBytes(24).toString('base64url')}`;
  await db.insert(apiTokens).values({
    id: randomUUID(),
    organizationId: p.organizationId,
    subject: `job:${p.job}`,
    role: 'developer',
    tokenSha256: sha256Text(token),
    runId: p.runId ?? '',
    expiresAt: new Date(Date.now() + p.ttlMs),
  });
  return token;
}

export async function audit(tx: Tx, p: { organizationId: string; actor: string; action: string; target: string; detail?: unknown }): Promise<void> {
  await tx.insert(auditLog).values({
    id: randomUUID(),
    organizationId: p.organizationId,
    actor: p.actor,
    action: p.action,
    target: p.target,
    detail: JSON.stringify(p.detail ?? {}),
  });
}

import { randomBytes, randomUUID } from 'node:crypto';
import { and, desc, eq, gt, isNotNull, isNull, lt, ne, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../client.js';
import { apiTokens, auditLog, catalogueBootstrap, organizations, outbox } from '../schema/index.js';
import { sha256Text } from '../../lib/hash.js';
import { emitEvent, TOPICS, type Tx } from './outbox.js';

export type Role = 'admin' | 'developer' | 'approver' | 'viewer';
export interface Principal {
  organizationId: string;
  subject: string;
  role: Role;
  /** set for a job's token: the one run it may report to */
  runId?: string | null;
}

/**
 * Creates the development organization and its token (idempotent). A changed development token replaces the
 * old one: every other token of the `dev` subject is revoked, so an old well-known value stops working.
 */
export async function seedDevOrganization(db: Db, orgName: string, token: string): Promise<void> {
  await db.insert(organizations).values({ id: orgName, name: orgName }).onConflictDoNothing();
  const hash = sha256Text(token);
  await db
    .update(apiTokens)
    .set({ revokedAt: new Date() })
    .where(and(eq(apiTokens.organizationId, orgName), eq(apiTokens.subject, 'dev'), ne(apiTokens.tokenSha256, hash), isNull(apiTokens.revokedAt)));
  await db.insert(apiTokens).values({ id: randomUUID(), organizationId: orgName, subject: 'dev', role: 'admin', tokenSha256: hash }).onConflictDoNothing();
  await db.update(apiTokens).set({ revokedAt: null }).where(eq(apiTokens.tokenSha256, hash));
}

/** A stack started without the development token: any development token seeded earlier stops working. */
export async function revokeDevTokens(db: Db, orgName: string): Promise<void> {
  await db.update(apiTokens).set({ revokedAt: new Date() }).where(and(eq(apiTokens.organizationId, orgName), eq(apiTokens.subject, 'dev'), isNull(apiTokens.revokedAt)));
}

export async function principalForToken(db: Db, token: string): Promise<Principal | null> {
  const [row] = await db.select().from(apiTokens).where(eq(apiTokens.tokenSha256, sha256Text(token))).limit(1);
  if (!row || row.revokedAt || (row.expiresAt && row.expiresAt.getTime() <= Date.now())) return null;
  return { organizationId: row.organizationId, subject: row.subject, role: row.role, runId: row.runId };
}

export class IdentityError extends Error {}

export async function createOrganization(tx: Tx, name: string): Promise<void> {
  const [exists] = await tx.select().from(organizations).where(eq(organizations.id, name)).limit(1);
  if (exists) throw new IdentityError(`organization "${name}" already exists`);
  await tx.insert(organizations).values({ id: name, name });
}

/** Organizations named by a verified IAM token exist from their first request (audit rows reference them). */
export async function ensureOrganization(db: Db, name: string): Promise<void> {
  await db.insert(organizations).values({ id: name, name }).onConflictDoNothing();
}

/** A new random API token: returned once, only its SHA-256 is stored. */
export async function createApiToken(tx: Tx, p: { id?: string; organizationId: string; subject: string; role: Role; expiresAt: Date | null }): Promise<{ id: string; token: string }> {
  const id = p.id ?? randomUUID();
  const token = `hml_${randomBytes(32).toString('base64url')}`;
  await tx.insert(apiTokens).values({ id, organizationId: p.organizationId, subject: p.subject, role: p.role, tokenSha256: sha256Text(token), expiresAt: p.expiresAt });
  return { id, token };
}

/** The catalogue already has its first administrator: who and when, for the refusal's message. */
export class AlreadyBootstrappedError extends IdentityError {
  constructor(readonly claim: { organizationId: string; subject: string; createdAt: Date }) {
    super(`this catalogue was bootstrapped on ${claim.createdAt.toISOString()} (admin "${claim.subject}" of organization "${claim.organizationId}"); an admin creates further tokens with \`hanzo-ml token create\``);
  }
}

/**
 * The operator organization and its first admin token, once per catalogue. The claim row is written first, in
 * the same transaction as the organization, the token and the audit row: a second call (or a concurrent one)
 * conflicts on the claim and changes nothing.
 */
export async function bootstrapOperator(db: Db, p: { organizationId: string; subject: string }): Promise<{ id: string; token: string }> {
  return db.transaction(async (tx) => {
    const tokenId = randomUUID();
    const [claimed] = await tx.insert(catalogueBootstrap).values({ organizationId: p.organizationId, subject: p.subject, tokenId }).onConflictDoNothing().returning();
    if (!claimed) {
      const [existing] = await tx.select().from(catalogueBootstrap).limit(1);
      throw new AlreadyBootstrappedError(existing!);
    }
    await tx.insert(organizations).values({ id: p.organizationId, name: p.organizationId }).onConflictDoNothing();
    const created = await createApiToken(tx, { id: tokenId, organizationId: p.organizationId, subject: p.subject, role: 'admin', expiresAt: null });
    await audit(tx, { organizationId: p.organizationId, actor: p.subject, action: 'admin.bootstrap', target: tokenId, detail: { subject: p.subject } });
    return created;
  });
}

export interface TokenView {
  id: string;
  subject: string;
  role: Role;
  expiresAt: Date | null;
  revokedAt: Date | null;
  createdAt: Date;
}

/** An organization's user tokens (never job tokens, never hashes). */
export async function listApiTokens(db: Db, organizationId: string): Promise<TokenView[]> {
  const rows = await db.select().from(apiTokens).where(and(eq(apiTokens.organizationId, organizationId), isNull(apiTokens.runId))).orderBy(apiTokens.createdAt);
  return rows.map((r) => ({ id: r.id, subject: r.subject, role: r.role, expiresAt: r.expiresAt, revokedAt: r.revokedAt, createdAt: r.createdAt }));
}

export interface JobTokenView {
  id: string;
  /** the job's logical name (`<pipeline>-train`, a trial's name ...) */
  job: string;
  /** the one run it may report to; '' for a job that reports to none */
  runId: string;
  expiresAt: Date | null;
  revokedAt: Date | null;
  createdAt: Date;
}

const JOB_SUBJECT = 'job:';

/** An organization's job tokens, newest first (never hashes). */
export async function listJobTokens(db: Db, organizationId: string): Promise<JobTokenView[]> {
  const rows = await db.select().from(apiTokens).where(and(eq(apiTokens.organizationId, organizationId), isNotNull(apiTokens.runId))).orderBy(desc(apiTokens.createdAt));
  return rows.map((r) => ({ id: r.id, job: r.subject.slice(JOB_SUBJECT.length), runId: r.runId ?? '', expiresAt: r.expiresAt, revokedAt: r.revokedAt, createdAt: r.createdAt }));
}

/**
 * Revokes one of the organization's tokens, a user's or a job's; null when it has no such token (another
 * tenant's id included), else what was revoked (for the audit row).
 */
export async function revokeApiToken(tx: Tx, organizationId: string, id: string): Promise<{ kind: 'user' | 'job'; subject: string; runId: string | null } | null> {
  const [row] = await tx
    .update(apiTokens)
    .set({ revokedAt: sql`coalesce(${apiTokens.revokedAt}, now())` })
    .where(and(eq(apiTokens.organizationId, organizationId), eq(apiTokens.id, id)))
    .returning({ subject: apiTokens.subject, runId: apiTokens.runId });
  return row ? { kind: row.runId === null ? 'user' : 'job', subject: row.subject, runId: row.runId } : null;
}

/**
 * A token for one job: it may only report metrics of its run (api/auth.ts enforces the scope). It lives for a
 * lease that the activity driving the job renews while the job runs (renewJobTokens), and is revoked when the job
 * ends (revokeJobTokens). Jobs never receive the API's own or an organization's admin token.
 */
export async function createJobToken(db: Db, p: { organizationId: string; job: string; runId: string | null; ttlMs: number }): Promise<string> {
  const token = `hmljob_${randomBytes(24).toString('base64url')}`;
  await db.insert(apiTokens).values({
    id: randomUUID(),
    organizationId: p.organizationId,
    subject: JOB_SUBJECT + p.job,
    role: 'developer',
    tokenSha256: sha256Text(token),
    runId: p.runId ?? '',
    expiresAt: new Date(Date.now() + p.ttlMs),
  });
  return token;
}

/** The live tokens of one job (every attempt's: a re-attached job still holds the token it started with). */
const liveTokensOf = (p: { organizationId: string; job: string }): SQL =>
  and(eq(apiTokens.organizationId, p.organizationId), eq(apiTokens.subject, JOB_SUBJECT + p.job), isNotNull(apiTokens.runId), isNull(apiTokens.revokedAt))!;

/**
 * Extends the lease of a running job's tokens to `ttlMs` from now. A token already expired stays expired: a
 * job whose activity was gone for longer than a lease has lost its token for good.
 */
export async function renewJobTokens(db: Db, p: { organizationId: string; job: string; ttlMs: number }): Promise<number> {
  const rows = await db
    .update(apiTokens)
    .set({ expiresAt: new Date(Date.now() + p.ttlMs) })
    .where(and(liveTokensOf(p), gt(apiTokens.expiresAt, new Date())))
    .returning({ id: apiTokens.id });
  return rows.length;
}

/** Revokes every token of a job that has ended; the next request with any of them answers 401. */
export async function revokeJobTokens(db: Db, p: { organizationId: string; job: string }): Promise<number> {
  const rows = await db.update(apiTokens).set({ revokedAt: new Date() }).where(liveTokensOf(p)).returning({ id: apiTokens.id });
  return rows.length;
}

export interface AuditEntry {
  organizationId: string;
  actor: string;
  action: string;
  target: string;
  detail?: unknown;
  outcome?: 'ok' | 'denied' | 'failed';
  requestId?: string | null;
  sourceAddress?: string | null;
}

/** An audit row and its `audit` event, in the caller's transaction. */
export async function audit(db: Tx, p: AuditEntry): Promise<void> {
  // One statement, so row and event commit together with no transaction or savepoint of their own: every
  // change request writes one, and a savepoint costs three round trips.
  await db.execute(sql`with ${auditWrites(p)} select 1`);
}

/**
 * The audit row and its `audit` event as two data-modifying CTEs (`audit_entry`, `audit_event`), for a
 * statement that writes a change and its audit row at once (metrics.ts: a logged metric batch). With `when`,
 * both are written only if that condition holds, which is how such a statement writes nothing for a refused
 * change.
 */
export function auditWrites(p: AuditEntry, when?: SQL): SQL {
  const outcome = p.outcome ?? 'ok';
  const event = {
    event: 'audit',
    actor: p.actor,
    action: p.action,
    resource: p.target,
    outcome,
    request_id: p.requestId ?? null,
    source_address: p.sourceAddress ?? null,
    timestamp: new Date().toISOString(),
  };
  const where = when ? sql`where ${when}` : sql``;
  return sql`audit_entry as (
      insert into ${auditLog} (id, organization_id, actor, action, target, detail, outcome, request_id, source_address)
      select ${randomUUID()}, ${p.organizationId}, ${p.actor}, ${p.action}, ${p.target}, ${JSON.stringify(p.detail ?? {})}, ${outcome}, ${p.requestId ?? null}, ${p.sourceAddress ?? null}
      ${where}
    ),
    audit_event as (
      insert into ${outbox} (organization_id, topic, key, payload)
      select ${p.organizationId}, ${TOPICS.audit}, ${p.target}, ${JSON.stringify(event)}::jsonb
      ${where}
    )`;
}

/**
 * A 401, counted in the row of its aggregate key (source address, reason and minute): the first attempt inserts
 * the row and its `audit` event, repeats only raise repeat_count and record the latest request id. Rows belong
 * to the operator's organization, since an unauthenticated caller has none.
 */
export async function auditUnauthenticated(
  db: Db,
  p: { organizationId: string; action: string; target: string; reason: string; requestId: string | null; sourceAddress: string; aggregateKey: string },
): Promise<void> {
  await ensureOrganization(db, p.organizationId);
  await db.transaction(async (tx) => {
    const [row] = await tx
      .insert(auditLog)
      .values({
        id: randomUUID(),
        organizationId: p.organizationId,
        actor: 'unauthenticated',
        action: p.action,
        target: p.target,
        detail: JSON.stringify({ status: 401, reason: p.reason }),
        outcome: 'denied',
        requestId: p.requestId,
        sourceAddress: p.sourceAddress,
        aggregateKey: p.aggregateKey,
      })
      .onConflictDoUpdate({
        target: auditLog.aggregateKey,
        set: {
          repeatCount: sql`${auditLog.repeatCount} + 1`,
          detail: sql`jsonb_set(${auditLog.detail}::jsonb, '{last_request_id}', to_jsonb(excluded.request_id::text))::text`,
        },
      })
      .returning({ inserted: sql<boolean>`(xmax = 0)` });
    if (!row?.inserted) return;
    await emitEvent(tx, p.organizationId, 'audit', p.target, {
      event: 'audit',
      actor: 'unauthenticated',
      action: p.action,
      resource: p.target,
      outcome: 'denied',
      request_id: p.requestId,
      source_address: p.sourceAddress,
    });
  });
}

/** The organization's audit trail, newest first; `before` pages back by time. */
export async function listAudit(db: Db, organizationId: string, o: { limit: number; before?: Date; action?: string }) {
  const conds = [eq(auditLog.organizationId, organizationId)];
  if (o.before) conds.push(lt(auditLog.createdAt, o.before));
  if (o.action) conds.push(eq(auditLog.action, o.action));
  return db.select().from(auditLog).where(and(...conds)).orderBy(desc(auditLog.createdAt)).limit(o.limit);
}

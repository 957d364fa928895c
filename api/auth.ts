// Bearer-token authentication and role checks. Every row is scoped to the caller's organization.
// A bearer is either an API token of ours (random, stored hashed, revocable) or a Hanzo IAM JWT verified against
// the issuer's JWKS; a request without one is accepted only on a loopback-only stack, and only from a local page.
// The console's browser sends neither: its session cookie seals one of those tokens (api/routes/console-session.ts),
// and each write it authenticates must repeat the session's CSRF token in a header.
import type { Context, MiddlewareHandler } from 'hono';
import { createRemoteJWKSet, decodeProtectedHeader, errors as joseErrors, jwtVerify, type JWTPayload, type JWTVerifyOptions } from 'jose';
import type { Db } from '../db/client.js';
import { ensureOrganization, principalForToken, type Principal, type Role } from '../db/repo/auth.js';
import { ApiError } from './errors.js';
import type { AppEnv } from './deps.js';
import type { Config } from '../contracts/config.js';
import { durationMs, isLoopbackHost } from '../lib/config.js';
import { CSRF_HEADER } from '../contracts/console-session.js';
import { csrfMatches, sessionCookieOf, type SessionSealer } from './routes/console-session.js';
import type { SessionRenewer } from './routes/console-oidc.js';

const RANK: Record<Role, number> = { viewer: 0, developer: 1, approver: 2, admin: 3 };

/** The roles of spec 000 and what they are stored as. A researcher with the approver permission is `approver`. */
export const SPEC_ROLES = ['ml-admin', 'ml-researcher', 'ml-viewer'] as const;
export type SpecRole = (typeof SPEC_ROLES)[number];

export function roleFromSpec(role: SpecRole, approver: boolean): Role {
  if (role === 'ml-admin') return 'admin';
  if (role === 'ml-viewer') {
    if (approver) throw new ApiError('INVALID_PARAMETER_VALUE', 'approver: a viewer cannot approve; give ml-researcher or ml-admin');
    return 'viewer';
  }
  return approver ? 'approver' : 'developer';
}

/** The spec role and approver permission of a stored role (an admin may always approve). */
export function specOfRole(role: Role): { role: SpecRole; approver: boolean } {
  if (role === 'admin') return { role: 'ml-admin', approver: true };
  if (role === 'viewer') return { role: 'ml-viewer', approver: false };
  return { role: 'ml-researcher', approver: role === 'approver' };
}

/**
 * Who a request without a token is. A local stack listening on loopback only accepts such requests as a
 * developer of the dev organization, as a local `mlflow server` does, so scripts switch by changing only the
 * tracking URI; approving a promotion still takes a token. Anywhere else anonymous access is off unless the
 * operator sets `auth.anonymous_role`.
 */
export function anonymousPrincipal(config: Pick<Config, 'auth' | 'server'>): Principal | null {
  const loopback = isLoopbackHost(config.server.host);
  const role = config.auth.anonymous_role ?? (loopback ? 'developer' : 'none');
  return role === 'none' ? null : { organizationId: config.auth.dev_organization, subject: 'anonymous', role };
}

/**
 * Verifies Hanzo IAM tokens: the signature against the issuer's JWKS with an algorithm of `auth.algorithms`
 * (asymmetric only, so `alg: none` and an HS256 token keyed with the public key are refused), the issuer, a
 * required `exp` and any `nbf` within `auth.clock_skew`, the audience when `auth.audience` is set, and an
 * organization that `auth.organizations` maps to a tenant.
 */
export type JwtVerifier = (token: string) => Promise<Principal>;

export function jwtVerifierFor(config: Pick<Config, 'auth'>): JwtVerifier | null {
  const { iam_url, jwks_url, audience, algorithms, clock_skew } = config.auth;
  if (!iam_url) return null;
  const jwks = createRemoteJWKSet(new URL(jwks_url ?? `${iam_url.replace(/\/$/, '')}/.well-known/jwks`), { timeoutDuration: 5000, cooldownDuration: 30_000 });
  const options: JWTVerifyOptions = {
    issuer: [iam_url, iam_url.replace(/\/$/, '')],
    algorithms: [...algorithms],
    requiredClaims: ['exp'],
    clockTolerance: durationMs(clock_skew) / 1000,
    ...(audience ? { audience } : {}),
  };
  return async (token) => {
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, jwks, options));
    } catch (err) {
      throw new ApiError('UNAUTHENTICATED', `IAM token rejected: ${whyRejected(err, token, config.auth)}`);
    }
    return principalFromClaims(payload, config.auth);
  };
}

/** The reason a token failed verification, in the terms of the settings that refused it. */
function whyRejected(err: unknown, token: string, auth: Config['auth']): string {
  if (err instanceof joseErrors.JWTExpired) return 'token expired';
  if (err instanceof joseErrors.JOSEAlgNotAllowed) return `algorithm "${algOf(token)}" is not one of auth.algorithms (${auth.algorithms.join(', ')})`;
  if (err instanceof joseErrors.JWKSNoMatchingKey) return 'signed by a key the issuer does not publish';
  if (err instanceof joseErrors.JWTClaimValidationFailed) {
    if (err.claim === 'exp') return 'the token has no "exp": IAM tokens must expire';
    if (err.claim === 'nbf') return `not valid yet ("nbf" is later than now plus auth.clock_skew ${auth.clock_skew})`;
    if (err.claim === 'aud') return `audience is not "${auth.audience ?? ''}" (auth.audience)`;
  }
  return (err as Error).message;
}

const algOf = (token: string): string => {
  try {
    return String(decodeProtectedHeader(token).alg);
  } catch {
    return 'unreadable';
  }
};

/**
 * IAM claims to a principal: the IAM organization is `org` (or `organization`, or IAM's `owner`), and the tenant is
 * what `auth.organizations` maps it to; an organization not listed there is refused, so no claim can name a
 * tenant (the operator organization included) by itself. Roles come from `roles` (strings or `{name}` objects);
 * the strongest spec role wins, and `ml-approver` adds the approver permission.
 */
export function principalFromClaims(payload: JWTPayload, auth: Pick<Config['auth'], 'organizations'>): Principal {
  const org = [payload.org, payload.organization, payload.owner].find((v): v is string => typeof v === 'string' && v.length > 0);
  if (!org) throw new ApiError('UNAUTHENTICATED', 'IAM token names no organization (claim "org" or "owner")');
  // Object.hasOwn: a claim such as "constructor" or "__proto__" must not find an inherited property.
  const tenant = Object.hasOwn(auth.organizations, org) ? auth.organizations[org] : undefined;
  if (!tenant) throw new ApiError('PERMISSION_DENIED', `IAM organization "${org}" is not mapped to a tenant of this API (auth.organizations)`);
  const raw = Array.isArray(payload.roles) ? payload.roles : typeof payload.role === 'string' ? [payload.role] : [];
  const names = new Set(raw.map((r) => (typeof r === 'string' ? r : typeof r === 'object' && r && 'name' in r ? String((r as { name: unknown }).name) : '')));
  const role = SPEC_ROLES.find((r) => names.has(r));
  if (!role) throw new ApiError('PERMISSION_DENIED', `IAM token has none of the roles ${SPEC_ROLES.join(', ')}`);
  const subject = typeof payload.sub === 'string' ? payload.sub : typeof payload.name === 'string' ? payload.name : 'unknown';
  return { organizationId: tenant, subject, role: roleFromSpec(role, role !== 'ml-viewer' && names.has('ml-approver')) };
}

const looksLikeJwt = (t: string): boolean => /^[\w-]+\.[\w-]+\.[\w-]+$/.test(t);

export interface AuthOptions {
  anonymous?: Principal | null;
  jwt?: JwtVerifier | null;
  /** the port the API listens on: token-less requests must name it in Host */
  port?: number;
  /** opens the console's session cookies; without it a cookie is not a credential */
  sessions?: SessionSealer | null;
  /** renews a session's IAM access token near its expiry (console-oidc.ts), with the IAM login on */
  renewSession?: SessionRenewer | null;
}

/** Who a token is: an API token of ours, else (with auth.iam_url) a verified IAM token; null when neither. */
export function tokenPrincipal(db: Db, jwt: JwtVerifier | null | undefined): (token: string) => Promise<Principal | null> {
  return async (token) => {
    const principal = await principalForToken(db, token);
    if (principal || !jwt || !looksLikeJwt(token)) return principal;
    const verified = await jwt(token);
    await ensureOrganization(db, verified.organizationId);
    return verified;
  };
}

export function authenticate(db: Db, o: AuthOptions = {}): MiddlewareHandler<AppEnv> {
  const principalOf = tokenPrincipal(db, o.jwt);
  return async (c, next) => {
    const header = c.req.header('authorization') ?? '';
    const m = /^Bearer\s+(.+)$/i.exec(header);
    const cookie = !m && o.sessions ? sessionCookieOf(c) : undefined;
    if (cookie) {
      c.set('principal', await cookiePrincipal(c, o, cookie, principalOf));
      return next();
    }
    if (!m && o.anonymous) {
      checkLocalOrigin(c, o.port);
      c.set('principal', o.anonymous);
      return next();
    }
    if (!m) throw new ApiError('UNAUTHENTICATED', 'missing "Authorization: Bearer <token>" header');
    const principal = await principalOf(m[1]!.trim());
    if (!principal) throw new ApiError('UNAUTHENTICATED', 'unknown, expired or revoked token');
    if (typeof principal.runId === 'string') await checkJobScope(c, principal.runId);
    c.set('principal', principal);
    await next();
  };
}

/** Methods that change nothing: the only ones a cookie authenticates without the CSRF header. */
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
/** Marks a request the MLflow UI forwards after checking that it only reads (api/routes/mlflow-ui.ts). */
const READ_ONLY_UI = Symbol('read-only UI request');
export const readOnlyUiEnv = (env: unknown): Record<PropertyKey, unknown> => ({ ...(env as object | undefined), [READ_ONLY_UI]: true });

/**
 * The console's session: the token sealed in the cookie (renewed first when it is an IAM access token about to
 * expire), checked as a bearer token is (so a revoked token ends it), and on a write the CSRF header. The read-only
 * MLflow UI's search POSTs are reads and need none.
 */
async function cookiePrincipal(c: Context<AppEnv>, o: AuthOptions, cookie: string, principalOf: (token: string) => Promise<Principal | null>): Promise<Principal> {
  const opened = await o.sessions!.open(cookie);
  if (!opened) throw new ApiError('UNAUTHENTICATED', 'the console session has expired or is not valid: sign in again');
  const session = o.renewSession ? await o.renewSession(c, opened) : opened;
  const principal = await principalOf(session.token);
  if (!principal) throw new ApiError('UNAUTHENTICATED', "the console session's token is unknown, expired or revoked: sign in again");
  const readOnlyUi = (c.env as Record<PropertyKey, unknown> | undefined)?.[READ_ONLY_UI] === true;
  if (!SAFE_METHODS.has(c.req.method) && !readOnlyUi && !csrfMatches(session, c.req.header(CSRF_HEADER)))
    throw new ApiError('PERMISSION_DENIED', `a ${c.req.method} signed in by the console's cookie must carry its CSRF token in the ${CSRF_HEADER} header`);
  return principal;
}

/**
 * Token-less access is for the user's own scripts and CLI. A web page the user has open can also reach
 * 127.0.0.1: DNS rebinding shows up as a foreign Host, a cross-site fetch as a foreign Origin, and a form post
 * (the one write a page can send without a CORS preflight) as a non-JSON content type.
 */
function checkLocalOrigin(c: Context<AppEnv>, port?: number): void {
  const url = new URL(c.req.url);
  const host = c.req.header('host') ?? url.host;
  const { hostname, port: hostPort } = new URL(`http://${host}`);
  if (!isLoopbackHost(hostname) || (port !== undefined && hostPort !== '' && Number(hostPort) !== port))
    throw new ApiError('PERMISSION_DENIED', `a request without a token must be addressed to this machine (Host "${host}"): use a token`);
  const origin = c.req.header('origin');
  const ownPort = port !== undefined ? String(port) : hostPort;
  if (origin !== undefined && !isOwnOrigin(origin, `${url.protocol}//${hostname}${ownPort ? `:${ownPort}` : ''}`))
    throw new ApiError('PERMISSION_DENIED', `a request without a token from a web page of another site (Origin "${origin}") is refused: use a token`);
  if (c.req.header('sec-fetch-site') === 'cross-site') throw new ApiError('PERMISSION_DENIED', 'a cross-site request without a token is refused: use a token');
  if (c.req.method === 'POST') {
    const type = (c.req.header('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
    if (type !== 'application/json' && !isUploadPath(c.req.path))
      throw new ApiError('PERMISSION_DENIED', `a POST without a token must be JSON (Content-Type: application/json, got "${type || 'none'}"): use a token otherwise`);
    if (isUploadPath(c.req.path) && (type === '' || SIMPLE_TYPES.has(type)))
      throw new ApiError('PERMISSION_DENIED', `an upload without a token needs a non-form content type (got "${type || 'none'}"), e.g. application/x-ndjson: use a token otherwise`);
  }
}

/**
 * A page of this very server: the Origin's scheme, host and port are the request's (another program listening on
 * another loopback port, or on the same port of another loopback address, is another site).
 */
function isOwnOrigin(origin: string, own: string): boolean {
  try {
    return new URL(origin).origin === new URL(own).origin;
  } catch {
    return false;
  }
}

/** The content types a browser sends cross-site without asking first (CORS "simple" requests). */
const SIMPLE_TYPES = new Set(['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data']);
/** Uploads (dataset files raw, training files as a multipart form, run artifacts). */
export const isUploadPath = (path: string): boolean => /^\/v1\/datasets\/?$|^\/v1\/files\/?$|^\/v1\/runs\/[^/]+\/artifacts\/?$|-artifacts\/artifacts\//.test(path);

/** The run-reporting calls a job makes (trainer/hanzo_ml/tracking.py) and nothing else. */
const JOB_ROUTES = /^\/(api|ajax-api)\/2\.0\/mlflow\/runs\/(log-batch|log-metric|log-parameter|set-tag|get|update)$/;

/**
 * A job's token reaches only its own run: other routes are refused, another run's id answers 404 as any object
 * of another tenant would. A token with an empty run scope (a job that reports to no run) reaches nothing.
 * Every place a run handler may read the run from is checked, not just the first one found: each `run_id` and
 * `run_uuid` of the query string (GET handlers read the last) and of the JSON body (other methods read it), so a
 * request naming its own run in one place and another run in another is refused. The run handlers compare the id
 * they actually use with the token's run as well (api/routes/mlflow/runs.ts `scopedRunId`).
 */
async function checkJobScope(c: Context<AppEnv>, runId: string): Promise<void> {
  if (!JOB_ROUTES.test(c.req.path)) throw new ApiError('PERMISSION_DENIED', 'a job token may only report metrics of its own run');
  const named: unknown[] = [...(c.req.queries('run_id') ?? []), ...(c.req.queries('run_uuid') ?? [])];
  if (c.req.method !== 'GET' && c.req.method !== 'HEAD') named.push(...runIdsOfBody(await c.req.raw.clone().text()));
  const foreign = named.find((id) => id !== runId);
  if (!runId || named.length === 0 || foreign !== undefined) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `Run with id=${String(foreign ?? '')} not found`);
}

/** The run ids a JSON body names at its top level (run_id, run_uuid), whatever their type; none when it is not JSON. */
function runIdsOfBody(text: string): unknown[] {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return [];
  }
  if (!body || typeof body !== 'object' || Array.isArray(body)) return [];
  const b = body as { run_id?: unknown; run_uuid?: unknown };
  return [b.run_id, b.run_uuid].filter((v) => v !== undefined);
}

/** The caller, if their role is at least `min` (viewer < developer < approver < admin). */
export function requireRole(c: Context<AppEnv>, min: Role): Principal {
  const p = c.get('principal');
  if (RANK[p.role] < RANK[min]) throw new ApiError('PERMISSION_DENIED', `role "${specLabel(p.role)}" may not do this (needs "${specLabel(min)}" or higher)`);
  return p;
}

const specLabel = (r: Role): string => {
  const s = specOfRole(r);
  return s.approver && s.role === 'ml-researcher' ? 'ml-researcher with approver permission' : s.role;
};

/**
 * Spec 000: an ml-researcher cancels only the jobs they submitted; an ml-admin cancels any of the organization.
 * `owner` is the submitter's subject (null when unknown: only an admin may then cancel).
 */
export function requireOwnerOrAdmin(c: Context<AppEnv>, owner: string | null, what: string): Principal {
  const p = requireRole(c, 'developer');
  if (p.role !== 'admin' && p.subject !== owner)
    throw new ApiError('PERMISSION_DENIED', `an ml-researcher may cancel only jobs they submitted; ${what} was submitted by ${owner ?? 'someone else'} (ml-admin may cancel any)`);
  return p;
}

/** Whether the caller may approve a production promotion. */
export const canApprove = (p: Principal): boolean => RANK[p.role] >= RANK.approver;

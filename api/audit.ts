// The audit trail: every change commits with its audit row or not at all; every download, every read of dataset
// metadata and every denial (401 included) is recorded.
//
// Two ways a change gets its row in its own transaction:
// - `atomicRequests`: for route families whose changes are catalogue writes only, the whole request runs in one
//   transaction (the routes' `deps.db` resolves to it), and the request's audit row is its last statement. A
//   handler that fails rolls its writes back with it.
// - `auditedChange`: for routes that also call Temporal or stream a body (pipelines, sweeps, schedules, dataset
//   and artifact uploads), where a transaction must not stay open across the slow part; the route opens it
//   around its catalogue write and says where the external call sits and why.
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Context, MiddlewareHandler } from 'hono';
import { TransactionRollbackError } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { audit, auditUnauthenticated, type Principal } from '../db/repo/auth.js';
import type { Tx } from '../db/repo/outbox.js';
import type { ApiDeps, AppEnv } from './deps.js';
import { auditContext, sourceAddress } from './routes/identity.js';

const CHANGES = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);
/** Reads that are POSTs (MLflow's search bodies and GraphQL, the console's batch series and memory estimate): neither a change nor a transaction. */
const READ_POSTS = /\/(runs|experiments|logged-models|datasets)\/search(-datasets)?$|\/graphql$|^\/v1\/runs\/series$|^\/v1\/estimates\/memory$/;
const isChange = (method: string, path: string): boolean => CHANGES.has(method) && !(method === 'POST' && READ_POSTS.test(path));

export interface AuditFields {
  action: string;
  target: string;
  detail?: unknown;
}

/**
 * Writes an audit row and runs `change` in one transaction: both commit or neither does. The row is written
 * first so that a call outside the catalogue (Temporal) can be the last step before the commit: when it fails,
 * nothing commits. The window left is a commit that fails after that call succeeded; each route says what
 * happens then.
 */
export async function auditedChange<T>(c: Context<AppEnv>, deps: Pick<ApiDeps, 'db'>, fields: AuditFields, change: (tx: Db) => Promise<T>): Promise<T> {
  const principal = c.get('principal');
  return deps.db.transaction(async (tx) => {
    await audit(tx, { ...auditContext(c, principal), ...fields });
    return change(tx as unknown as Db);
  });
}

/** An audit row for `auditedChange`-style hooks that a repository calls inside its own transaction. */
export function auditRow(c: Context<AppEnv>, action: string, target: string): (tx: Db, detail?: unknown) => Promise<void> {
  const principal = c.get('principal');
  return (tx, detail) => audit(tx, { ...auditContext(c, principal), action, target, detail: detail ?? {} });
}

/** Work a request's change starts outside the catalogue (a workflow), queued until its transaction commits. */
const commitHooks = new AsyncLocalStorage<(() => Promise<void>)[]>();

/**
 * Runs `fn` once the current request's transaction has committed (at once outside one), so that what it starts
 * never sees, or reports, a change that is not there yet or was rolled back.
 */
export async function afterCommit(fn: () => Promise<void>): Promise<void> {
  const hooks = commitHooks.getStore();
  if (hooks) hooks.push(fn);
  else await fn();
}

export interface RequestTransactions {
  /** the catalogue as routes see it: inside an atomic request, that request's transaction */
  db: Db;
  /** runs each state-changing request of the routes it is mounted on in one transaction with its audit row */
  atomic: MiddlewareHandler<AppEnv>;
}

/**
 * One transaction per state-changing request. The routes keep their `deps.db`: a proxy that resolves to the
 * request's transaction while one is open (AsyncLocalStorage follows the request's async calls), so repository
 * code needs no change and cannot write outside it by mistake. Nested `transaction()` calls become savepoints.
 */
export function requestTransactions(db: Db): RequestTransactions {
  const current = new AsyncLocalStorage<Tx>();
  const scoped = new Proxy(db, {
    get(target, prop) {
      const active = (current.getStore() ?? target) as unknown as Record<string | symbol, unknown>;
      const value = Reflect.get(active, prop, active);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(active) : value;
    },
  });
  const atomic: MiddlewareHandler<AppEnv> = async (c, next) => {
    if (!isChange(c.req.method, c.req.path)) return next();
    const hooks: (() => Promise<void>)[] = [];
    const committed = await commitHooks.run(hooks, () =>
      db
        .transaction(async (tx) => {
          await current.run(tx, next);
          const principal = c.get('principal') as Principal | undefined;
          // A refused or failed request changes nothing; its denial (if any) is recorded by auditTrail.
          if (c.error || c.res.status >= 400 || !principal) tx.rollback();
          await audit(tx, { ...auditContext(c, principal!), action: `${c.req.method} ${c.req.path}`, target: c.req.path, detail: { status: c.res.status } });
        })
        .then(
          () => true,
          (err: unknown) => {
            if (!(err instanceof TransactionRollbackError)) throw err;
            return false;
          },
        ),
    );
    if (!committed) return;
    for (const hook of hooks) {
      try {
        await hook();
      } catch (err) {
        throw new Error(`the change committed, but what it starts could not be started: ${(err as Error).message}`, { cause: err });
      }
    }
  };
  return { db: scoped, atomic };
}

/** Reads that hand out data (artifacts, dataset and model files): audited as downloads. */
const DOWNLOAD = /\/artifacts\/.+|\/get-artifact$|\/download$/;
/**
 * Reads of dataset metadata (spec 000: dataset access is audited): the /v1 dataset list and records, the /v1/files
 * list and records (the same dataset versions in OpenAI's shape), and MLflow's dataset search. Who looked at which
 * dataset is part of the trail as much as who downloaded it.
 */
const isDatasetRead = (method: string, path: string): boolean =>
  (method === 'GET' && /^\/v1\/(datasets|files)(\/|$)/.test(path)) || (method === 'POST' && /\/2\.0\/mlflow\/experiments\/search-datasets$/.test(path));

/**
 * Distinct 401 rows one process writes per minute before it folds every further source address into one row.
 * A client sets X-Forwarded-For itself, so per-address aggregation alone would not bound a flood that varies it.
 */
export const UNAUTHENTICATED_KEYS_PER_MINUTE = 1000;

/**
 * The audit trail of every download and every denial, and of any change a handler did not audit itself (a
 * route family outside `atomicRequests` and `auditedChange`: none today). Handlers that audit in their own
 * transaction mark the request `audited`.
 *
 * 401s are aggregated, not rate-limited: one row per source address, reason and minute whose repeat_count
 * counts the attempts, so every attempt is still counted while a flood of unauthenticated requests adds at
 * most a row per address and minute (and at most UNAUTHENTICATED_KEYS_PER_MINUTE addresses per minute).
 * A rate limit would drop attempts, which is what an investigation of the flood needs to see.
 */
export function auditTrail(deps: Pick<ApiDeps, 'db' | 'log' | 'config'>, anonymous: Principal | null, o: { keysPerMinute?: number } = {}): MiddlewareHandler<AppEnv> {
  const keysPerMinute = o.keysPerMinute ?? UNAUTHENTICATED_KEYS_PER_MINUTE;
  let minute = '';
  const seen = new Set<string>();
  const addressKey = (address: string): string => {
    const now = new Date().toISOString().slice(0, 16);
    if (now !== minute) {
      minute = now;
      seen.clear();
    }
    if (!seen.has(address)) {
      if (seen.size >= keysPerMinute) return `${now}|many`;
      seen.add(address);
    }
    return `${now}|${address}`;
  };
  return async (c, next) => {
    await next();
    if (c.get('audited')) return;
    const status = c.res.status;
    const method = c.req.method;
    const onError = (err: unknown) => deps.log.error('audit row not written', { error: String(err), request_id: c.get('requestId') });
    if (status === 401) {
      const address = sourceAddress(c) ?? 'unknown';
      const reason = (c.error?.message ?? 'unauthenticated').slice(0, 200);
      await auditUnauthenticated(deps.db, {
        organizationId: deps.config.auth.dev_organization,
        action: `unauthenticated ${method} ${c.req.path}`.slice(0, 300),
        target: c.req.path,
        reason,
        requestId: c.get('requestId'),
        sourceAddress: address,
        aggregateKey: `401|${addressKey(address)}|${reason}`,
      }).catch(onError);
      return;
    }
    const denied = status === 403;
    const download = method === 'GET' && status < 300 && DOWNLOAD.test(c.req.path);
    const datasetRead = !download && status < 300 && isDatasetRead(method, c.req.path);
    const change = isChange(method, c.req.path) && status < 400;
    if (!denied && !download && !datasetRead && !change) return;
    const principal = c.get('principal') ?? anonymous;
    if (!principal) return;
    await audit(deps.db, {
      ...auditContext(c, principal),
      action: denied ? `denied ${method} ${c.req.path}` : download ? 'download' : datasetRead ? 'dataset.read' : `${method} ${c.req.path}`,
      target: c.req.path,
      outcome: denied ? 'denied' : 'ok',
      detail: { status },
    }).catch(onError);
  };
}

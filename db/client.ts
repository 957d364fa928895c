// Opens the catalogue: embedded PGlite in the data dir, or Postgres when a URL is configured.
// The same drizzle migrations run on both, at start-up and in tests (never `push`).
import { fileURLToPath } from 'node:url';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import * as schema from './schema/index.js';

export type Db = PgDatabase<PgQueryResultHKT, typeof schema>;
export interface Catalogue {
  db: Db;
  kind: 'pglite' | 'postgres';
  close(): Promise<void>;
}

const migrationsFolder = fileURLToPath(new URL('./migrations', import.meta.url));

export async function openCatalogue(opts: { url?: string | undefined; pgliteDir?: string }): Promise<Catalogue> {
  const catalogue = opts.url ? await openPostgres(opts.url) : await openPglite(opts.pgliteDir);
  await catalogue.migrate();
  return catalogue;
}

async function openPostgres(url: string): Promise<Catalogue & { migrate(): Promise<void> }> {
  const { default: pg } = await import('pg');
  const { drizzle } = await import('drizzle-orm/node-postgres');
  const { migrate } = await import('drizzle-orm/node-postgres/migrator');
  const pool = new pg.Pool({ connectionString: url, max: 10 });
  // JIT compilation pays off for long analytic scans, not for an API's short queries: it added ~250 ms to a
  // 70 ms run search whose cost estimate crossed the JIT threshold. A SET (not the `options` startup
  // parameter) leaves PGOPTIONS and the URL's options alone and passes through connection poolers; it is queued
  // on the new connection ahead of any query.
  pool.on('connect', (client) => void client.query('set jit = off').catch(() => undefined));
  // An idle pooled connection that the server drops (restart, failover, admin kill) emits 'error' on the pool;
  // unheard, it would crash the process. The pool discards that client and the next query opens a fresh one.
  pool.on('error', (err) => console.error(`catalogue: idle Postgres connection lost: ${err.message}`));
  const db = drizzle(pool, { schema });
  return {
    db: db as unknown as Db,
    kind: 'postgres',
    migrate: () => migrate(db, { migrationsFolder }),
    close: () => pool.end(),
  };
}

async function openPglite(dir: string | undefined): Promise<Catalogue & { migrate(): Promise<void> }> {
  const { PGlite } = await import('@electric-sql/pglite');
  const { drizzle } = await import('drizzle-orm/pglite');
  const { migrate } = await import('drizzle-orm/pglite/migrator');
  const client = dir ? await PGlite.create(dir) : await PGlite.create();
  const db = drizzle(client, { schema });
  const maintenance = pgliteMaintenance(client);
  return {
    db: db as unknown as Db,
    kind: 'pglite',
    migrate: () => migrate(db, { migrationsFolder }),
    close: async () => {
      await maintenance.stop();
      await client.close();
    },
  };
}

/** The few PGlite calls the maintenance loop makes. */
interface PgliteLike {
  query<T>(sql: string): Promise<{ rows: T[] }>;
  exec(sql: string): Promise<unknown>;
}

/**
 * PGlite runs Postgres in single-user mode, which has no autovacuum: the planner never gets statistics (a run
 * search over 20,000 runs took 66 ms instead of 12 ms without them) and the rows every metric batch updates in
 * latest_metrics are never reclaimed. This does autovacuum's work with its default thresholds (a table is
 * vacuumed once 20% of it is dead rows, analyzed once 10% of it changed), checking once a minute like
 * autovacuum_naptime. `tick` runs one round now (tests; stop waits for a round in flight).
 */
export function pgliteMaintenance(client: PgliteLike, intervalMs = 60_000): { tick(): Promise<string[]>; stop(): Promise<void> } {
  let inFlight: Promise<string[]> | null = null;
  const tick = (): Promise<string[]> => {
    inFlight ??= (async () => {
      const { rows } = await client.query<{ name: string; table: string; vacuum: boolean; analyze: boolean }>(`
        select relname as name, format('%I.%I', schemaname, relname) as table,
          n_dead_tup > 50 + 0.2 * n_live_tup as vacuum, n_mod_since_analyze > 50 + 0.1 * n_live_tup as analyze
        from pg_stat_user_tables order by schemaname, relname`);
      const done: string[] = [];
      for (const r of rows.filter((r) => r.vacuum || r.analyze)) {
        // One table failing (dropped meanwhile, say) must not keep the others from their turn.
        try {
          await client.exec(`${r.vacuum ? 'vacuum (analyze)' : 'analyze'} ${r.table}`);
          done.push(`${r.vacuum ? 'vacuum' : 'analyze'} ${r.name}`);
        } catch (err) {
          console.error(`catalogue: PGlite maintenance of ${r.table} failed: ${(err as Error).message}`);
        }
      }
      return done;
    })().finally(() => (inFlight = null));
    return inFlight;
  };
  const timer = setInterval(() => void tick().catch((err: unknown) => console.error(`catalogue: PGlite maintenance failed: ${(err as Error).message}`)), intervalMs);
  timer.unref(); // never what keeps a process alive
  return {
    tick,
    stop: async () => {
      clearInterval(timer);
      await inFlight?.catch(() => undefined);
    },
  };
}

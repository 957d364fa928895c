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
  // JIT compilation pays off for long analytic scans, not for an API's short queries: it added ~250 ms to a
  // 70 ms run search whose cost estimate crossed the JIT threshold.
  const pool = new pg.Pool({ connectionString: url, max: 10, options: '-c jit=off' });
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
  return {
    db: db as unknown as Db,
    kind: 'pglite',
    migrate: () => migrate(db, { migrationsFolder }),
    close: () => client.close(),
  };
}

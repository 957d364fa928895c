// The hanzo-ml API alone (no Temporal worker, no pipelines started), for the tracking benchmark: the same
// createApp, catalogue and object store `hanzo-ml dev` builds, on PGlite by default or on Postgres through
// HANZO_ML_DATABASE_URL. On Postgres it forks `server.workers` API processes sharing the port (like
// `mlflow server --workers N`); PGlite is embedded in one process, so there it is always one.
//
//   HANZO_ML_SERVER_WORKERS=2 HANZO_ML_DATABASE_URL=postgres://... npx tsx bench/tracking/server.ts
import cluster from 'node:cluster';
import type { Server } from 'node:http';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { serve } from '@hono/node-server';
import { Client, Connection } from '@temporalio/client';
import { createApp } from '../../api/app.js';
import { openCatalogue } from '../../db/client.js';
import { seedDevOrganization } from '../../db/repo/auth.js';
import { loadConfig } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { createObjectStore } from '../../lib/object-store.js';

async function serveApi(): Promise<void> {
  const { config, home, bootstrap } = loadConfig();
  for (const dir of ['logs', 'tmp', 'objects']) mkdirSync(join(home, dir), { recursive: true });
  const log = createLogger(config.logging);
  const catalogue = await openCatalogue({ url: config.database.url, pgliteDir: join(home, 'pg') });
  await seedDevOrganization(catalogue.db, config.auth.dev_organization, config.auth.dev_token);
  const store = await createObjectStore(config.storage, home);
  // The tracking routes never call Temporal; a lazy connection only dials if a pipeline route is used.
  const temporal = new Client({ connection: Connection.lazy({ address: config.temporal.address ?? `127.0.0.1:${config.temporal.port}` }), namespace: config.temporal.namespace });
  const app = createApp({ db: catalogue.db, store, config, home, bootstrap, log, temporal, temporalUiUrl: null });
  const server = serve({ fetch: app.fetch, hostname: config.server.host, port: config.server.port }) as Server;
  // Clients keep connections open while they digest a long page; both servers get the same 65 s keep-alive, so
  // neither closes an idle connection just as the client reuses it (Node's default is 5 s).
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  const stop = (): void => {
    server.close(() => void catalogue.close().then(() => process.exit(0)));
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

async function main(): Promise<void> {
  const { config, home } = loadConfig();
  const workers = config.database.url ? config.server.workers : 1;
  if (workers === 1 || !cluster.isPrimary) return serveApi();
  // Migrate once before forking, so the workers do not race each other through the migrations.
  const catalogue = await openCatalogue({ url: config.database.url, pgliteDir: join(home, 'pg') });
  await catalogue.close();
  for (let i = 0; i < workers; i++) cluster.fork();
  const stop = (): void => {
    for (const w of Object.values(cluster.workers ?? {})) w?.process.kill('SIGTERM');
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  cluster.on('exit', (w, code) => {
    if (code !== 0) process.stderr.write(`api worker ${w.process.pid} exited with code ${code}\n`);
  });
}

main().catch((err: unknown) => {
  process.stderr.write(`error: ${(err as Error).message}\n`);
  process.exit(1);
});

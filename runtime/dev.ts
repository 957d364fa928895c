// `hanzo-ml dev`: the embedded stack in one process. Temporal dev server (SQLite in HANZO_ML_HOME), the
// catalogue on PGlite (or HANZO_ML_DATABASE_URL), the file:// object store, the worker and the API on 8057.
// Restarting with the same HANZO_ML_HOME resumes every workflow that was running.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig, requireBootstrapped } from '../lib/config.js';
import { startTemporalDevServer, type DevServer } from '../lib/temporal-dev-server.js';
import { startRuntime, type Runtime } from './embedded.js';

export interface DevStack {
  runtime: Runtime;
  temporal: DevServer | null;
  token: string;
  stop(): Promise<void>;
}

export async function startDevStack(opts: { quiet?: boolean } = {}): Promise<DevStack> {
  const { config, home, bootstrap } = loadConfig();
  requireBootstrapped(bootstrap, 'hanzo-ml dev');
  mkdirSync(join(home, 'logs'), { recursive: true });
  const say = (m: string): void => {
    if (!opts.quiet) process.stderr.write(m + '\n');
  };
  say(`hanzo-ml dev: data directory ${home}`);
  const temporal = config.temporal.address
    ? null
    : await startTemporalDevServer({ binary: bootstrap.temporal, home, port: config.temporal.port, uiPort: config.temporal.ui_port || null, namespace: config.temporal.namespace });
  const address = config.temporal.address ?? temporal!.address;
  say(`  temporal    ${address}${temporal?.uiUrl ? `  (Web UI ${temporal.uiUrl})` : ''}`);
  let runtime: Runtime;
  try {
    runtime = await startRuntime({ config, home, bootstrap, temporalAddress: address, temporalUiUrl: temporal?.uiUrl ?? null });
  } catch (err) {
    await temporal?.stop();
    throw err;
  }
  say(`  catalogue   ${runtime.catalogue.kind === 'pglite' ? `PGlite ${join(home, 'pg')}` : 'Postgres'}`);
  say(`  objects     ${config.storage.endpoint ?? `file://${join(home, 'objects')}`}`);
  say(`  api         ${runtime.apiUrl}  (token: ${config.auth.dev_token})`);
  let stopping: Promise<void> | null = null;
  return {
    runtime,
    temporal,
    token: config.auth.dev_token,
    stop: () =>
      (stopping ??= (async () => {
        say('hanzo-ml dev: stopping (jobs write an emergency checkpoint first)');
        await runtime.stop({ stopJobs: true });
        await temporal?.stop();
        say('hanzo-ml dev: stopped');
      })()),
  };
}

/** Runs until Ctrl-C / SIGTERM, then stops every part cleanly. */
export async function runDev(): Promise<void> {
  const stack = await startDevStack();
  process.stderr.write('hanzo-ml dev: ready (Ctrl-C stops every part)\n');
  await new Promise<void>((resolve) => {
    const onSignal = (): void => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      void stack.stop().then(resolve);
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });
}

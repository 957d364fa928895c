// The API app on a catalogue and a store, for tests of routes that never reach Temporal (the client is a stand-in
// that is never called, or the one the test names), with the loaded configuration's data directory and bootstrap.
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import type { Hono } from 'hono';
import { createApp } from '../../api/app.js';
import type { ApiDeps, AppEnv } from '../../api/deps.js';
import type { Db } from '../../db/client.js';
import type { LoadedConfig } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { FileObjectStore, type ObjectStore } from '../../lib/object-store.js';

export function appWithoutTemporal(db: Db, loaded: LoadedConfig, o: { store?: ObjectStore; temporalUiUrl?: string | null; temporal?: Client } = {}): Hono<AppEnv> {
  const deps: ApiDeps = {
    db,
    store: o.store ?? new FileObjectStore(join(loaded.home, 'objects')),
    config: loaded.config,
    home: loaded.home,
    bootstrap: loaded.bootstrap,
    temporal: o.temporal ?? ({} as Client),
    log: createLogger({ level: 'error', format: 'text' }),
    temporalUiUrl: o.temporalUiUrl ?? null,
    metrics: null,
  };
  return createApp(deps);
}

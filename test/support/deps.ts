// Activity dependencies for tests that call activities directly, outside a worker.
import { join } from 'node:path';
import type { ActivityDeps } from '../../activities/deps.js';
import { LocalExecutor } from '../../activities/executor/local.js';
import { localJobEnvironment } from '../../activities/jobs.js';
import type { Db } from '../../db/client.js';
import type { LoadedConfig } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { FileObjectStore } from '../../lib/object-store.js';

/** File objects under `home`, the local executor, quiet logs, and a tracking URL nothing listens on. */
export function offlineActivityDeps(db: Db, loaded: Pick<LoadedConfig, 'config' | 'bootstrap'>, home: string): ActivityDeps {
  return {
    db,
    store: new FileObjectStore(join(home, 'objects')),
    config: loaded.config,
    home,
    bootstrap: loaded.bootstrap,
    executor: new LocalExecutor({ workRoot: join(home, 'work', 'jobs'), python: loaded.bootstrap.python, env: localJobEnvironment(loaded) }),
    log: createLogger({ level: 'error', format: 'text' }),
    trackingUri: 'http://127.0.0.1:1',
    jobSecrets: async () => ({ HANZO_ML_TRACKING_TOKEN: 't' }),
  };
}

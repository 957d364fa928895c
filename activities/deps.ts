import type { Config } from '../contracts/config.js';
import type { Db } from '../db/client.js';
import type { ObjectStore } from '../lib/object-store.js';
import type { Bootstrap } from '../lib/config.js';
import type { Logger } from '../lib/log.js';
import type { LocalExecutor } from './executor/local.js';

/** Everything activities touch, injected (no module-level singletons). */
export interface ActivityDeps {
  db: Db;
  store: ObjectStore;
  config: Config;
  home: string;
  bootstrap: Bootstrap;
  executor: LocalExecutor;
  log: Logger;
  /** URL trainers use for the tracking API, and the token they present. */
  trackingUri: string;
  trackingToken: string;
}

import type { Client } from '@temporalio/client';
import type { Config } from '../contracts/config.js';
import type { Db } from '../db/client.js';
import type { Principal } from '../db/repo/auth.js';
import type { Bootstrap } from '../lib/config.js';
import type { Logger } from '../lib/log.js';
import type { ObjectStore } from '../lib/object-store.js';
import type { ApiMetrics } from './metrics.js';

export interface ApiDeps {
  db: Db;
  store: ObjectStore;
  config: Config;
  home: string;
  bootstrap: Bootstrap;
  temporal: Client;
  log: Logger;
  /** Temporal Web UI base URL, for links in responses (null without one). */
  temporalUiUrl: string | null;
  /** Prometheus metrics (null when metrics.enabled is false) */
  metrics?: ApiMetrics | null;
}

export interface AppEnv {
  Variables: { requestId: string; principal: Principal; /** set when the handler wrote its own audit row (in its transaction) */ audited?: boolean };
}

import type { Config } from '../contracts/config.js';
import type { Db } from '../db/client.js';
import type { ObjectStore } from '../lib/object-store.js';
import type { Bootstrap } from '../lib/config.js';
import type { Logger } from '../lib/log.js';
import type { JobExecutor } from './executor/types.js';
import { createJobToken } from '../db/repo/auth.js';

/** Everything activities touch, injected (no module-level singletons). */
export interface ActivityDeps {
  db: Db;
  store: ObjectStore;
  config: Config;
  home: string;
  bootstrap: Bootstrap;
  executor: JobExecutor;
  log: Logger;
  /** URL jobs use for the tracking API */
  trackingUri: string;
  /** the secrets one job gets (its own tracking token), created when the job is prepared */
  jobSecrets(job: { name: string; organizationId: string; runId?: string | null }): Promise<Record<string, string>>;
}

/** A job may run for as long as its activity may (startToCloseTimeout of 7 days): its token lives as long. */
const JOB_TOKEN_TTL_MS = 8 * 24 * 3600 * 1000;

/** Per-job tracking tokens scoped to the job's organization and run. */
export function jobTokenSecrets(db: Db): ActivityDeps['jobSecrets'] {
  return async (job) => ({
    HANZO_ML_TRACKING_TOKEN: await createJobToken(db, { organizationId: job.organizationId, job: job.name, runId: job.runId ?? null, ttlMs: JOB_TOKEN_TTL_MS }),
  });
}

import type { Config } from '../contracts/config.js';
import type { Db } from '../db/client.js';
import type { ObjectStore } from '../lib/object-store.js';
import type { Bootstrap } from '../lib/config.js';
import type { Logger } from '../lib/log.js';
import type { JobExecutor } from './executor/types.js';
import { createJobToken } from '../db/repo/auth.js';
import { jobStorageAccess } from './job-storage-access.js';

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

/**
 * A job's secrets with its object-store access added: with storage.job_access.role_arn set (required for
 * kubernetes jobs), credentials of its organization's role minted for this job; unset (local jobs), nothing, as a
 * local job reads the store with the configuration's key.
 */
export function withStorageAccess(secrets: ActivityDeps['jobSecrets'], config: Config): ActivityDeps['jobSecrets'] {
  if (!config.storage.job_access.role_arn) return secrets;
  const mint = jobStorageAccess(config);
  return async (job) => ({ ...(await secrets(job)), ...(await mint(job)) });
}

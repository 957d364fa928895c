// What running a job needs, injected: the catalogue, the object store, the configuration, the executor, a logger
// and the secrets each job gets. Activities hand these over (their ActivityDeps is a superset), so the jobs wing
// never reaches for an activity, a workflow or the API.
import type { Config } from '../contracts/config.js';
import type { Db } from '../db/client.js';
import type { ObjectStore } from '../lib/object-store.js';
import type { Bootstrap } from '../lib/config.js';
import type { Logger } from '../lib/log.js';
import type { JobExecutor } from './executor/types.js';
import { createJobToken, renewJobTokens, revokeJobTokens } from '../db/repo/auth.js';
import { jobStorageAccess } from './storage-access.js';

export interface JobDeps {
  db: Db;
  store: ObjectStore;
  config: Config;
  bootstrap: Bootstrap;
  executor: JobExecutor;
  log: Logger;
  /** the secrets one job gets (its own tracking token), created when the job is prepared */
  jobSecrets: JobSecrets;
}

export interface JobRef {
  name: string;
  organizationId: string;
  runId?: string | null;
}

/**
 * Makes the secrets of one job attempt. Secrets that must not outlive the job also say how: `renew` while the
 * job runs (jobs/run-loop.ts calls it every JOB_SECRET_RENEW_MS), `revoke` once it has ended.
 */
export interface JobSecrets {
  (job: JobRef): Promise<Record<string, string>>;
  renew?(job: JobRef): Promise<void>;
  revoke?(job: JobRef): Promise<void>;
}

/**
 * A job's tracking token is a lease, not a lifetime. The activity driving the job revokes it when the job ends
 * (success, failure, cancel, a stopped trial) and renews it every JOB_SECRET_RENEW_MS while it drives the job,
 * waiting in a queue included. If the worker dies and no activity re-attaches to the job, nothing renews it and it
 * expires within JOB_TOKEN_LEASE_MS: durable without a sweeper, since the database row itself carries the
 * deadline. A worker that returns within the lease re-attaches and renews the token the job started with.
 */
export const JOB_TOKEN_LEASE_MS = 60 * 60 * 1000;
export const JOB_SECRET_RENEW_MS = 5 * 60 * 1000;

/** Per-job tracking tokens scoped to the job's organization and run. */
export function jobTokenSecrets(db: Db): JobSecrets {
  const ref = (job: JobRef) => ({ organizationId: job.organizationId, job: job.name });
  return Object.assign(
    async (job: JobRef) => ({
      HANZO_ML_TRACKING_TOKEN: await createJobToken(db, { ...ref(job), runId: job.runId ?? null, ttlMs: JOB_TOKEN_LEASE_MS }),
    }),
    {
      renew: async (job: JobRef) => void (await renewJobTokens(db, { ...ref(job), ttlMs: JOB_TOKEN_LEASE_MS })),
      revoke: async (job: JobRef) => void (await revokeJobTokens(db, ref(job))),
    },
  );
}

/**
 * A job's secrets with its object-store access added: with storage.job_access.role_arn set (required for
 * kubernetes jobs), credentials of its organization's role minted for this job; unset (local jobs), nothing, as a
 * local job reads the store with the configuration's key.
 */
export function withStorageAccess(secrets: JobSecrets, config: Config): JobSecrets {
  if (!config.storage.job_access.role_arn) return secrets;
  const mint = jobStorageAccess(config);
  // The minted credentials expire by themselves (storage.job_access.duration); the token's lease is renewed as before.
  return Object.assign(async (job: JobRef) => ({ ...(await secrets(job)), ...(await mint(job)) }), { renew: secrets.renew, revoke: secrets.revoke });
}

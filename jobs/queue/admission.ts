// The per-organization admission gate in front of the executor. Kueue counts GPUs, not jobs, so
// scheduler.quotas.<org>.max_concurrent_jobs is enforced here, before a Job exists: a job waits in the catalogue
// (job_admissions) until its organization has a free slot, in priority-then-arrival order. In the embedded mode,
// where no Kueue runs, the same gate also enforces max_gpus and hands out this machine's GPUs (CUDA device indices),
// never one to two jobs. Fair share and preemption across organizations are Kueue's, on a cluster.
import type { Config } from '../../contracts/config.js';
import type { Db } from '../../db/client.js';
import { nvidiaGpuNames } from '../../lib/gpus.js';
import { releaseAdmission, requestAdmission, type AdmissionAnswer, type AdmissionLimits } from '../../db/repo/admissions.js';
import { priorityValue, totalGpus } from './kueue-objects.js';
import type { JobPriority } from '../../contracts/config.js';

/** A slot whose holder has not heartbeated for this long is taken back (its worker and every retry are gone). */
export const ADMISSION_STALE_AFTER_MS = 10 * 60_000;

/** GPUs of this machine: scheduler.local_gpus, else what nvidia-smi lists (0 without it). */
export function detectLocalGpus(configured: number | undefined): number {
  return configured ?? nvidiaGpuNames().length;
}

export interface AdmissionGate {
  /** false: no quotas and no GPUs to hand out, so jobs start at once */
  readonly enabled: boolean;
  request(job: { name: string; organizationId: string; priority: JobPriority | null; gpus: number; alreadyRunning: boolean }): Promise<AdmissionAnswer>;
  release(name: string): Promise<void>;
}

/** machineGpus: the local executor's GPUs; null on a cluster, where Kueue places GPUs. */
export function admissionGate(db: Db, config: Config, machineGpus: number | null): AdmissionGate {
  const quotas = config.scheduler.quotas;
  const enabled = Object.keys(quotas).length > 0 || (machineGpus ?? 0) > 0;
  const limitsOf = (org: string): AdmissionLimits => {
    const quota = quotas[org];
    return {
      maxJobs: quota?.max_concurrent_jobs ?? null,
      // On a cluster an organization may borrow idle GPUs past its quota: Kueue decides. Here nobody else does.
      maxGpus: machineGpus !== null && quota ? totalGpus(quota, config.scheduler.gpu_types) : null,
      machineGpus,
    };
  };
  return {
    enabled,
    request: (job) => {
      const priority = priorityValue(job.priority ?? quotas[job.organizationId]?.priority ?? 'medium');
      return requestAdmission(db, { ...job, priority }, limitsOf(job.organizationId), ADMISSION_STALE_AFTER_MS);
    },
    release: (name) => releaseAdmission(db, name),
  };
}

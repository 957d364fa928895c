// The one contract every job runs through, whatever runs it: a local process (embedded mode) or a Kubernetes
// batch/v1 Job (cluster). Jobs are addressed by a deterministic name: starting a name that exists attaches to
// it, never starts a second copy, so an activity retried after a worker crash finds the job its first attempt
// started. A job reads and writes only through the object store (contracts/job-io.ts), so it can run anywhere.
import type { JobPriority } from '../../contracts/config.js';
import type { JobPlacement } from '../../contracts/job-io.js';
import type { Eviction, QueuePlace } from '../queue/kueue-status.js';
export type { Eviction, JobPlacement, QueuePlace };

export type JobState =
  /** Created but not running yet: waiting for a node, pulling its image, queued. `reason` says why when known. */
  | { state: 'pending'; reason: string | null; message?: string; queue?: QueuePlace; evicted?: Eviction }
  /** `placement`: where it runs, when the executor can tell (absent for a local job started before it was recorded). */
  | { state: 'running'; placement?: JobPlacement }
  | { state: 'exited'; exitCode: number; reason?: string }
  /** It existed and is gone without an exit code (killed with its machine, deleted by someone else). */
  | { state: 'lost'; reason?: string }
  | { state: 'absent' };

export interface JobResources {
  /** machines the job spans; > 1 is a multi-node job (one pod per node, torchrun rendezvous) */
  nodes: number;
  /** trainer processes per node (torchrun --nproc-per-node) */
  processes: number;
  gpus_per_node: number;
  gpu_type: string | null;
  /** the name of its image in scheduler.images (kubernetes); null: "trainer" */
  image: string | null;
  cpu: string | null;
  memory: string | null;
}

export interface JobRequest {
  /** DNS label, unique per attempt: the local workspace or the Kubernetes Job is named after it */
  name: string;
  /** the object-store URI of the job's envelope.json (written before the job starts) */
  envelopeUri: string;
  organizationId: string;
  /** what the job is, for labels and listings: train, eval, merge, candle, trial */
  kind: string;
  /** its priority in the organization's queue; null: the organization's (scheduler.quotas) */
  priority: JobPriority | null;
  resources: JobResources;
  /** plain settings for the job's environment */
  env: Record<string, string>;
  /** per-job secrets (its tracking token): a Kubernetes Secret of its own, never in the Job object */
  secretEnv: Record<string, string>;
}

export interface JobExecutor {
  readonly kind: 'local' | 'kubernetes';
  /** GPUs this executor hands out itself (the local machine's, by CUDA device index); null: the cluster places them */
  readonly machineGpus: number | null;
  /** Refuses, before anything is created, a job the executor can never run (resources no node has). */
  validate(job: JobRequest): Promise<void>;
  /** Starts the job unless one of that name exists; returns what it found or started. */
  startOrAttach(job: JobRequest): Promise<JobState>;
  state(job: JobRequest): Promise<JobState>;
  /**
   * SIGTERM now (the trainer writes an emergency checkpoint), SIGKILL after graceSeconds; resolves when the
   * job has ended and its resources are released.
   */
  stop(job: JobRequest, graceSeconds: number): Promise<void>;
  /** The last lines the job printed. */
  logTail(job: JobRequest, lines: number): Promise<string>;
}

/** A job request no executor can run: the message names what is wrong. Never retried. */
export class JobRejected extends Error {}

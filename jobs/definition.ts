// A job as the code that needs one describes it: what to run (its envelope), what it needs, and how a train job
// recovers from its faults.
import type { JobEnvelopeInput } from '../contracts/job-io.js';
import type { JobRecovery } from '../contracts/pipeline.js';
import type { JobPriority } from '../contracts/config.js';
import type { RecoveryPolicy } from '../contracts/trainer-job.js';
import type { JobFiles } from '../lib/job-files.js';
import type { JobResources } from './executor/types.js';
import type { TrainerFailure } from './recovery.js';

/** How a train job recovers from out-of-memory and divergence; without it those exits fail the activity. */
export interface JobRecoveryOptions {
  policy: RecoveryPolicy;
  /** Called for each fault: `restarting` false means the policy gave up and the activity is about to fail. */
  onFault?: (recovery: JobRecovery, restarting: boolean, failure: TrainerFailure | null, attempt: JobFiles) => Promise<void>;
}

/** A job as the activity describes it: what to run (its envelope) and what it needs. */
export interface JobDefinition {
  /** logical name, stable across attempts (e.g. `<pipeline>-train`) */
  name: string;
  kind: string;
  organizationId: string;
  /** the envelope without job_name/job_uri, which each attempt fills in */
  envelope: Omit<JobEnvelopeInput, 'job_name' | 'job_uri'>;
  resources?: Partial<JobResources>;
  /** the run whose metrics the job reports (its tracking token is scoped to it) */
  runId?: string | null;
  /** its priority in the organization's queue; default the organization's (HPO trials: low) */
  priority?: JobPriority | null;
}

/** The job's resources with every unset one at its default: one process on one node, no GPU, the default image. */
export function jobResources(def: JobDefinition): JobResources {
  return {
    nodes: def.resources?.nodes ?? 1,
    processes: def.resources?.processes ?? 1,
    gpus_per_node: def.resources?.gpus_per_node ?? 0,
    gpu_type: def.resources?.gpu_type ?? null,
    image: def.resources?.image ?? null,
    cpu: def.resources?.cpu ?? null,
    memory: def.resources?.memory ?? null,
  };
}

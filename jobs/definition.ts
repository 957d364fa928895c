// A job as the code that needs one describes it: what to run (its envelope), what it needs, and how a train job
// recovers from its faults.
import { JobEnvelopeSchema, type JobEnvelopeInput } from '../contracts/job-io.js';
import type { JobRecovery } from '../contracts/pipeline.js';
import type { JobPriority } from '../contracts/config.js';
import type { RecoveryPolicy } from '../contracts/trainer-job.js';
import type { JobFiles } from '../lib/job-files.js';
import type { JobResources } from './executor/types.js';
import type { TrainerFailure } from './recovery.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';

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

/** What defineJob needs: who runs what, with which inputs and outputs, on which resources. */
export interface JobDescription {
  /** logical name, stable across attempts (e.g. `<pipeline>-train`) */
  name: string;
  kind: string;
  organizationId: string;
  runId?: string | null;
  priority?: JobPriority | null;
  tool: JobEnvelopeInput['tool'];
  spec: JobEnvelopeInput['spec'];
  inputs?: JobEnvelopeInput['inputs'];
  outputs?: JobEnvelopeInput['outputs'];
  checkpoints?: JobEnvelopeInput['checkpoints'];
  args?: string[];
  /** the output field holding the result document (eval, merge); unset: the job's result.json */
  resultField?: string;
  /** nodes and processes are given once here: the envelope the job reads says the same */
  resources?: Partial<JobResources>;
}

const EnvelopeFieldsSchema = JobEnvelopeSchema.omit({ job_name: true, job_uri: true });
/** The envelope's fields that come from the resources, named as the caller gave them. */
const RESOURCE_FIELDS: Record<string, string> = { num_nodes: 'resources.nodes', processes: 'resources.processes' };

/**
 * The one way to describe a job: the envelope's node and process counts follow its resources (a job cannot ask
 * the executor for two nodes and torchrun for one), and the envelope is checked before any attempt is prepared,
 * so a bad one fails for good naming its field rather than at every retry of the activity.
 */
export function defineJob(d: JobDescription): JobDefinition {
  const envelope: JobDefinition['envelope'] = {
    tool: d.tool,
    spec: d.spec,
    ...(d.inputs ? { inputs: d.inputs } : {}),
    ...(d.outputs ? { outputs: d.outputs } : {}),
    ...(d.checkpoints ? { checkpoints: d.checkpoints } : {}),
    ...(d.args ? { args: d.args } : {}),
    ...(d.resultField ? { result_field: d.resultField } : {}),
    processes: d.resources?.processes ?? 1,
    num_nodes: d.resources?.nodes ?? 1,
  };
  const checked = EnvelopeFieldsSchema.safeParse(envelope);
  if (!checked.success) {
    const issue = checked.error.issues[0]!;
    const field = RESOURCE_FIELDS[String(issue.path[0])] ?? ['envelope', ...issue.path].join('.');
    throw nonRetryable(FailureType.BadJobSpec, `job ${d.name}: ${field}: ${issue.message}`);
  }
  return {
    name: d.name,
    kind: d.kind,
    organizationId: d.organizationId,
    envelope,
    ...(d.resources ? { resources: d.resources } : {}),
    ...(d.runId !== undefined ? { runId: d.runId } : {}),
    ...(d.priority !== undefined ? { priority: d.priority } : {}),
  };
}

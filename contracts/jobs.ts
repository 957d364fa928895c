// Spec 000's Job Submission: what POST /v1/jobs and `hanzo-ml job submit --config` take (YAML or JSON), the job's
// lifecycle, and the workflow that runs it. A job is either a command job (an image of scheduler.images, a command
// and its environment) or a recipe job (a base model, a dataset version and one of the trainer's methods), or an
// eval or conversion job (contracts/job-kinds.ts).
import { defineSignal } from '@temporalio/workflow';
import { z } from 'zod';
import { CostEstimateSchema, BudgetStateSchema } from './cost.js';
import { JobPreemptionSchema, JobRecoverySchema } from './pipeline.js';
import { DataOptionsSchema, HardwareSchema, LoraHyperparametersSchema, RecoveryPolicySchema, TrainMethodSchema, type Hardware } from './trainer-job.js';
import { CHILD_ONLY_JOB_TYPES, ConversionSectionSchema, EvalSectionSchema, JobParentSchema, productJobSection } from './job-kinds.js';

export const jobWorkflowId = (id: string): string => `job:${id}`;
export const jobIdFromWorkflowId = (workflowId: string): string => workflowId.replace(/^job:/, '');

export const JOB_TYPES = ['training', 'eval', 'conversion'] as const;
export const JobTypeSchema = z.enum(JOB_TYPES);
export type JobType = z.infer<typeof JobTypeSchema>;
/** A listed job's type: a submitted one's, or one only a parent starts (contracts/job-kinds.ts). */
export const ListedJobTypeSchema = z.enum([...JOB_TYPES, ...CHILD_ONLY_JOB_TYPES]);

export const JOB_STATUSES = ['validating', 'queued', 'running', 'paused', 'succeeded', 'failed', 'cancelled'] as const;
export const JobStatusSchema = z.enum(JOB_STATUSES);
export type JobStatus = z.infer<typeof JobStatusSchema>;
export const TERMINAL_JOB_STATUSES: readonly JobStatus[] = ['succeeded', 'failed', 'cancelled'];
/** A job in one of these may be paused (a queued one gives up its place; a running one checkpoints and stops). */
export const PAUSABLE_JOB_STATUSES: readonly JobStatus[] = ['validating', 'queued', 'running'];

/** How long an Idempotency-Key names the job it first submitted. */
export const IDEMPOTENCY_WINDOW_MS = 24 * 3_600_000;

const duration = z.string().regex(/^\d+(s|m|h|d)$/, 'expected a duration such as "90s", "30m", "48h" or "2d"');
const name = z
  .string()
  .min(1)
  .max(63)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'letters, digits, ".", "_" and "-", starting with a letter or digit');

export const JobResourcesSchema = z.strictObject({
  gpus: z.number().int().nonnegative().default(0).describe('GPUs of one node (spec 000: resources.gpus)'),
  gpu_type: z.string().min(1).nullable().default(null).describe('a scheduler.gpu_types entry; null: any'),
  memory: z.string().regex(/^\d+(Ki|Mi|Gi|Ti)?$/, 'a Kubernetes quantity such as "512Gi"').nullable().default(null),
  cpu: z.union([z.number().positive(), z.string().regex(/^\d+m?$/)]).nullable().default(null),
});

export const DistributedSchema = z.strictObject({
  strategy: z.enum(['ddp', 'fsdp', 'deepspeed_zero2', 'deepspeed_zero3']).default('ddp'),
  num_nodes: z.number().int().positive().default(1),
  gpus_per_node: z.number().int().nonnegative().optional().describe('default: resources.gpus'),
  processes_per_node: z.number().int().positive().default(1).describe('recipe jobs: trainer processes per node (torchrun)'),
});

export const JobScheduleSchema = z.strictObject({
  max_duration: duration.optional().describe('the job is stopped (SIGTERM: it writes a checkpoint) and fails once it has run this long'),
  checkpoint_interval: duration.optional().describe('recipe jobs: a checkpoint at least this often; command jobs: HANZO_ML_CHECKPOINT_INTERVAL_SECONDS'),
  preemptible: z.boolean().optional().describe('as the top-level preemptible'),
});

/** A recipe job: the trainer runs one of its methods on a dataset version of the organization. */
export const JobRecipeSchema = z.strictObject({
  base_model: z.string().min(1).describe('a base model name from the base-models directory, or an absolute path the caller may read'),
  dataset: z.strictObject({ name, version: z.union([z.number().int().positive(), z.literal('latest')]).default('latest') }),
  method: TrainMethodSchema.default('lora'),
  hyperparameters: LoraHyperparametersSchema.prefault({ learning_rate: 2e-4, max_steps: 200, batch_size: 8 }),
  data: DataOptionsSchema.prefault({}),
  recovery: RecoveryPolicySchema.prefault({}),
});
export type JobRecipe = z.infer<typeof JobRecipeSchema>;

const envName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name');

export const JobSubmissionSchema = z
  .strictObject({
    name: name.optional().describe('default: the job id'),
    type: JobTypeSchema,
    image: z
      .string()
      .regex(/^[a-z0-9][a-z0-9._-]{0,62}$/, 'expected the name of an image of scheduler.images (such as "trainer"), not an image reference')
      .optional()
      .describe('command jobs: the name of an image of scheduler.images'),
    command: z.array(z.string().min(1)).min(1).optional().describe('command jobs: the argv to run in the image'),
    env: z.record(envName, z.string()).default({}).describe('command jobs: added to the environment'),
    recipe: JobRecipeSchema.optional().describe('recipe jobs: what the trainer runs (instead of image and command)'),
    eval: EvalSectionSchema.optional().describe('type eval: the model to score and what on (instead of image and command)'),
    conversion: ConversionSectionSchema.optional().describe('type conversion: merge, quantize, validate and register (instead of image and command)'),
    resources: JobResourcesSchema.prefault({}),
    distributed: DistributedSchema.optional(),
    storage: z.record(z.string(), z.string()).optional().describe('accepted for spec 000 compatibility; inputs are named by the recipe'),
    schedule: JobScheduleSchema.prefault({}),
    preemptible: z.boolean().optional().describe('true: runs at low priority in the queue, so other jobs may take its GPUs'),
  })
  .superRefine((s, ctx) => {
    if (productJobSection(s, ctx)) return;
    if (s.recipe) {
      if (s.command) ctx.addIssue({ code: 'custom', path: ['command'], message: 'a recipe job runs the trainer: give either recipe or image and command' });
      if (s.type !== 'training') ctx.addIssue({ code: 'custom', path: ['type'], message: `a recipe job is a training job (for type: ${s.type}, give the ${s.type} section, or image and command)` });
      return;
    }
    if (!s.image) ctx.addIssue({ code: 'custom', path: ['image'], message: 'a command job needs an image (a name of scheduler.images), or give a recipe' });
    if (!s.command) ctx.addIssue({ code: 'custom', path: ['command'], message: 'a command job needs a command, or give a recipe' });
  });
export type JobSubmission = z.infer<typeof JobSubmissionSchema>;

export type JobSubmissionRequest = z.input<typeof JobSubmissionSchema>;

/** The trainer's hardware for a recipe job: what its estimate prices and what it runs on. */
export function recipeHardware(spec: JobSubmission): Hardware {
  return HardwareSchema.parse({
    processes: spec.distributed?.processes_per_node ?? 1,
    strategy: spec.distributed?.strategy ?? 'ddp',
    nodes: spec.distributed?.num_nodes ?? 1,
    gpus_per_node: spec.distributed?.gpus_per_node ?? spec.resources.gpus,
    gpu_type: spec.resources.gpu_type,
    image: spec.image ?? null,
  });
}

/** The workflow's input: the checked submission, who sent it, and the server settings a workflow cannot read. */
export interface JobWorkflowInput {
  job_id: string;
  organization_id: string;
  submitted_by: string;
  spec: JobSubmission;
  runtime: { heartbeat_timeout: string };
}

export const JobListQuerySchema = z.strictObject({
  status: JobStatusSchema.optional(),
  type: ListedJobTypeSchema.optional(),
  parent: JobParentSchema.optional().describe("only the jobs this parent started (pipeline:<id>, sweep:<id>, dataset:<id>)"),
  limit: z.coerce.number().int().min(1).max(500).default(50),
  cursor: z.string().regex(/^\d+$/, 'a cursor from next_cursor').optional(),
});

/** A job's place in its organization's queue while it waits (the admission gate's or Kueue's order). */
export const JobQueuePlaceSchema = z.object({
  queue: z.string().describe('the queue it waits in (its organization)'),
  position: z.number().int().positive().nullable().describe('1 = next; null when the queue gives no order'),
  reason: z.string().nullable().describe('why it waits'),
});
export type JobQueuePlace = z.infer<typeof JobQueuePlaceSchema>;

/** A checkpoint of the job as resume may name it: its step, or its URI. */
export const CheckpointRefSchema = z.object({ step: z.number().int().nonnegative(), uri: z.string() });
export type CheckpointRef = z.infer<typeof CheckpointRefSchema>;

/**
 * One stretch of a job between a start or resume and its end or pause. Each segment runs as its own executor job
 * (named after the job and the segment) and writes checkpoints under `checkpoints_uri`: the run's own prefix, or
 * a fresh one when it resumed from a checkpoint older than the newest.
 */
export const JobSegmentSchema = z.object({
  segment: z.number().int().positive(),
  job_name: z.string().describe('the executor job of its first attempt'),
  checkpoints_uri: z.string().nullable().describe('recipe jobs: where its checkpoints go'),
  resumed_from: CheckpointRefSchema.nullable(),
  started_at: z.string(),
});
export type JobSegment = z.infer<typeof JobSegmentSchema>;

export const ResumeRequestSchema = z.strictObject({
  from_checkpoint: z
    .union([z.number().int().nonnegative(), z.string().min(1)])
    .optional()
    .describe("a checkpoint of GET /v1/jobs/{id}'s checkpoints, by step or URI; default: the newest"),
});
export type ResumeRequest = z.infer<typeof ResumeRequestSchema>;

/** Pause: the job checkpoints and stops (its GPUs freed); the workflow waits for a resume. */
export const pauseJobSignal = defineSignal('pauseJob');
/** Resume a paused job, from the given checkpoint or (null) the newest. */
export const resumeJobSignal = defineSignal<[{ from_checkpoint: CheckpointRef | null }]>('resumeJob');

/** A job as the API answers it. */
export const JobViewSchema = z.object({
  id: z.string(),
  name: z.string(),
  type: ListedJobTypeSchema,
  kind: z.enum(['command', 'recipe', 'eval', 'conversion', 'stage']).describe('stage: a job its parent started'),
  parent: z.string().nullable().describe('what started it (pipeline:<id>, sweep:<id>); null: submitted on its own'),
  status: JobStatusSchema,
  message: z.string().nullable().describe('why it is queued, or how it ended'),
  queue: JobQueuePlaceSchema.nullable().describe('while queued: its place in the queue and why it waits'),
  submitted_by: z.string(),
  workflow_id: z.string(),
  run_id: z.string().nullable().describe('the tracking run it logs to'),
  spec: z.record(z.string(), z.unknown()),
  created_at: z.string(),
  started_at: z.string().nullable(),
  ended_at: z.string().nullable(),
});
export type JobView = z.infer<typeof JobViewSchema>;

export const JobCheckpointSchema = CheckpointRefSchema.extend({
  segment: z.number().int().positive(),
  created_at: z.string().nullable(),
  metrics: z.record(z.string(), z.number()).describe("the run's metrics logged at this step (train/loss, eval/loss, ...)"),
});
export type JobCheckpoint = z.infer<typeof JobCheckpointSchema>;

export const JobAttemptSchema = z.object({
  segment: z.number().int().positive(),
  attempt: z.number().int().positive(),
  job_name: z.string().describe('the executor job (a Kubernetes Job, or a local process group)'),
  reason: z.string().nullable().describe('why this attempt started: null for the first, else the recovery'),
  step: z.number().int().nonnegative().nullable().describe('the last step it reported'),
  resumed_from_step: z.number().int().nonnegative().nullable().describe("the trainer's word: the checkpoint step it resumed from (null: from the start)"),
});

/** GET /v1/jobs/{id}: the job and what is known of its execution so far. */
export const JobDetailSchema = JobViewSchema.extend({
  segments: z.array(JobSegmentSchema).describe('one per start or resume'),
  attempts: z.array(JobAttemptSchema),
  recoveries: z.array(JobRecoverySchema),
  preemptions: z.array(JobPreemptionSchema),
  placement: z
    .object({ pods: z.array(z.string()), nodes: z.array(z.string()), gpu_ids: z.array(z.string()) })
    .nullable()
    .describe("where the latest attempt runs or ran: pods, their nodes, GPU ids (local CUDA indices; [] on a cluster); null until it was seen running"),
  checkpoints: z.array(JobCheckpointSchema).describe('recipe jobs: complete checkpoints, oldest first'),
  progress: z
    .object({
      step: z.number().int().nonnegative(),
      max_steps: z.number().int().positive(),
      steps_per_second: z.number().nonnegative().nullable().describe('measured over the latest logged steps'),
      eta_seconds: z.number().nonnegative().nullable(),
    })
    .nullable(),
  usage: z.object({
    gpu_type: z.string(),
    gpu_hours: z.number().nonnegative().describe('device-hours so far, over every segment and attempt'),
    cost_usd: z.number().nonnegative().nullable(),
  }),
});
export type JobDetail = z.infer<typeof JobDetailSchema>;

/**
 * An item of GET /v1/jobs: the job, and for a running or paused job what the list shows of its detail (progress
 * with its ETA, usage so far), so a page of the list is one request, not one per running job.
 */
export const JobListItemSchema = JobViewSchema.extend({
  progress: JobDetailSchema.shape.progress.describe('running or paused jobs that report progress; else null'),
  usage: JobDetailSchema.shape.usage.nullable().describe('running or paused jobs: device-hours and dollars so far; else null'),
});
export type JobListItem = z.infer<typeof JobListItemSchema>;

/** POST /v1/jobs?dry_run=true: what the job would cost; nothing is queued. */
export const JobDryRunSchema = z.object({
  dry_run: z.literal(true),
  kind: z.enum(['command', 'recipe']),
  estimate: CostEstimateSchema.nullable().describe('recipe jobs; null for a command job (its work is not known before it runs)'),
  known: z
    .object({ gpu_type: z.string(), gpus: z.number().int().nonnegative(), price_per_gpu_hour_usd: z.number().nonnegative(), max_gpu_hours: z.number().nonnegative().nullable(), max_usd: z.number().nonnegative().nullable() })
    .nullable()
    .describe('command jobs: the price of its devices, and with schedule.max_duration the most it can cost'),
  budget: BudgetStateSchema.nullable(),
  fits_budget: z.boolean().nullable(),
});
export type JobDryRun = z.infer<typeof JobDryRunSchema>;

/** What the job activity returns to its workflow. */
export interface JobRunOutcome {
  step: number | null;
  metrics: Record<string, number>;
  output_uri: string | null;
}

/** One event of a job's event log as GET /v1/jobs/{id}/events answers it (JSON pages and SSE alike). */
export interface JobEventView {
  id: number;
  created_at: string;
  level: string;
  type: string;
  message: string;
  data: Record<string, unknown>;
}

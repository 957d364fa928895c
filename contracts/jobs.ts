// Spec 000's Job Submission: what POST /v1/jobs and `hanzo-ml job submit --config` take (YAML or JSON), the job's
// lifecycle, and the workflow that runs it. A job is either a command job (an image of scheduler.images, a command
// and its environment) or a recipe job (a base model, a dataset version and one of the trainer's methods), or an
// eval or conversion job (contracts/job-kinds.ts).
import { z } from 'zod';
import { DataOptionsSchema, LoraHyperparametersSchema, RecoveryPolicySchema, TrainMethodSchema } from './trainer-job.js';
import { CHILD_ONLY_JOB_TYPES, ConversionSectionSchema, EvalSectionSchema, JobParentSchema, productJobSection } from './job-kinds.js';

export const jobWorkflowId = (id: string): string => `job:${id}`;
export const jobIdFromWorkflowId = (workflowId: string): string => workflowId.replace(/^job:/, '');

export const JOB_TYPES = ['training', 'eval', 'conversion'] as const;
export const JobTypeSchema = z.enum(JOB_TYPES);
export type JobType = z.infer<typeof JobTypeSchema>;
/** A listed job's type: a submitted one's, or one only a parent starts (contracts/job-kinds.ts). */
export const ListedJobTypeSchema = z.enum([...JOB_TYPES, ...CHILD_ONLY_JOB_TYPES]);

export const JOB_STATUSES = ['validating', 'queued', 'running', 'succeeded', 'failed', 'cancelled'] as const;
export const JobStatusSchema = z.enum(JOB_STATUSES);
export type JobStatus = z.infer<typeof JobStatusSchema>;
export const TERMINAL_JOB_STATUSES: readonly JobStatus[] = ['succeeded', 'failed', 'cancelled'];

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

/** A job as the API answers it. */
export const JobViewSchema = z.object({
  id: z.string(),
  name: z.string(),
  type: ListedJobTypeSchema,
  kind: z.enum(['command', 'recipe', 'eval', 'conversion', 'stage']).describe('stage: a job its parent started'),
  parent: z.string().nullable().describe('what started it (pipeline:<id>, sweep:<id>); null: submitted on its own'),
  status: JobStatusSchema,
  message: z.string().nullable().describe('why it is queued, or how it ended'),
  submitted_by: z.string(),
  workflow_id: z.string(),
  run_id: z.string().nullable().describe('the tracking run it logs to'),
  spec: z.record(z.string(), z.unknown()),
  created_at: z.string(),
  started_at: z.string().nullable(),
  ended_at: z.string().nullable(),
});
export type JobView = z.infer<typeof JobViewSchema>;

/** What the job activity returns to its workflow. */
export interface JobRunOutcome {
  step: number | null;
  metrics: Record<string, number>;
  output_uri: string | null;
}

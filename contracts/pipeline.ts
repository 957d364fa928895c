// The fine-tuning pipeline: its input (what POST /v1/pipelines takes), its progress and its result.
import { z } from 'zod';
import { LoraHyperparametersSchema, CheckpointPolicySchema, ModelScoresSchema, RecoveryPolicySchema, HardwareSchema, ADAPTER_METHODS, QuantizationSchema, AdaLoraSchema, PreferenceSchema, DataOptionsSchema } from './trainer-job.js';
import { SplitRatiosSchema } from './datasets.js';
import { JobPrioritySchema } from './config.js';
import { GateDecisionSchema } from './eval-suite.js';

export const PIPELINE_TASK_QUEUE = 'hanzo-ml-pipelines';
/**
 * The queue of job activities (train, eval, merge, Candle, trials) beside a workflow task queue: its own slots
 * (scheduler.max_concurrent_jobs), so quick catalogue activities never wait behind week-long jobs.
 */
export const jobsTaskQueueOf = (workflowTaskQueue: string): string => `${workflowTaskQueue}.jobs`;
export const pipelineWorkflowId = (id: string): string => `pipeline:${id}`;
/**
 * The checkpoint watcher beside a pipeline's training: a child workflow of its own, named after the tracking run it
 * watches (an activity's result, so a replay under any workflow id derives the same child id).
 */
export const checkpointWatchWorkflowId = (runId: string): string => `checkpoint-watch:${runId}`;

/** What the checkpoint watcher carries from one pass to the next (and across continue-as-new). */
export interface CheckpointWatchState {
  /** epoch ms of the last new checkpoint (or of the watch's start) */
  last_new_at: number;
  /** whether the stale alert for the current gap was raised */
  alerted: boolean;
  /** how long to wait before the next pass */
  poll_ms: number;
}
export const pipelineIdFromWorkflowId = (workflowId: string): string => workflowId.replace(/^pipeline:/, '');
export const scheduleId = (id: string): string => `schedule:${id}`;

/** Custom search attributes registered on the Temporal namespace (the dev server gets them on start). */
export const SEARCH_ATTRIBUTES = {
  organization: 'HanzoOrganization',
  modelName: 'HanzoModelName',
  stage: 'HanzoStage',
  jobType: 'HanzoJobType',
} as const;

export const PIPELINE_STAGES = [
  'queued',
  'preprocess',
  'train',
  'eval',
  'validate',
  'register',
  'promote',
  'completed',
  'failed',
] as const;
export const PipelineStageSchema = z.enum(PIPELINE_STAGES);
export type PipelineStage = z.infer<typeof PipelineStageSchema>;

const name = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'letters, digits, ".", "_" and "-", starting with a letter or digit');

/** Where the pipeline's data comes from: a new file to preprocess, or an existing dataset version. */
export const DatasetSourceSchema = z.union([
  z.strictObject({
    name,
    source_uri: z.string().min(1).describe('file:///abs/path or s3://bucket/key of a JSONL or CSV file'),
    format: z.enum(['jsonl', 'csv']).optional().describe('default: from the file extension'),
    seed: z.number().int().nonnegative().default(42),
    splits: SplitRatiosSchema.default({ train: 0.8, validation: 0.1, test: 0.1 }),
  }),
  z.strictObject({
    name,
    version: z.union([z.number().int().positive(), z.literal('latest')]).default('latest'),
  }),
]);
export type DatasetSource = z.infer<typeof DatasetSourceSchema>;

export const PipelineInputSchema = z.strictObject({
  model_name: name.describe('registered model the result becomes a version of'),
  base_model: z.string().min(1).describe('a base model name from the base-models directory, or an absolute path'),
  dataset: DatasetSourceSchema,
  method: z.enum(ADAPTER_METHODS).default('lora').describe('fine-tuning method; the pipeline merges an adapter, so full fine-tuning runs as a train job only'),
  hyperparameters: LoraHyperparametersSchema.prefault({ learning_rate: 2e-3, max_steps: 200, batch_size: 8 }),
  quantization: QuantizationSchema.optional().describe('qlora: 4-bit base settings'),
  adalora: AdaLoraSchema.optional().describe('adalora: rank budget settings'),
  preference: PreferenceSchema.optional().describe('dpo / orpo: preference-loss settings'),
  data: DataOptionsSchema.prefault({}),
  checkpoint: CheckpointPolicySchema.default({ every_steps: 25, keep_last: 3, every_seconds: 3600, keep_best: true }),
  recovery: RecoveryPolicySchema.prefault({}),
  hardware: HardwareSchema.prefault({}).describe('price_per_device_hour_usd null: the gpu_type\'s scheduler.gpu_prices_usd, else scheduler.default_price_usd'),
  priority: JobPrioritySchema.optional().describe("queue priority of the pipeline's jobs (scheduler.quotas); default the organization's, never above it"),
  eval: z
    .strictObject({
      max_new_tokens: z.number().int().positive().default(12),
      suite: z
        .string()
        .regex(/^[a-z0-9][a-z0-9-]*@\d+$/, "name@version of the organization's own suite (/v1/eval-suites) or a bundled one (recipes/eval/)")
        .default('support-desk@2')
        .describe("the eval suite the promotion gate applies: the organization's own of that name@version first, else the bundled recipes/eval/<name>-v<version>.yaml"),
    })
    .prefault({}),
  validate: z
    .strictObject({
      quantization: z.enum(['q8_0', 'q4_k_m', 'q6_k', 'f16']).default('q8_0'),
      perplexity_tolerance: z.number().positive().max(1).default(0.01),
      max_perplexity: z
        .number()
        .positive()
        .default(15)
        .describe('check_perplexity_threshold: largest accepted perplexity of the merged model on the held-out assistant turns (what it is trained to produce)'),
      max_general_perplexity: z
        .number()
        .positive()
        .nullable()
        .default(null)
        .describe('largest accepted perplexity on the bundled general text, absolute; null: measured and reported, retention is judged relative to base by the eval gate'),
      quantized_max_perplexity: z.number().positive().default(20).describe("the GGUF's own threshold on the held-out assistant turns, checked after quantization"),
      test_prompts: z.array(z.string().min(1)).min(1).default(['Hello, how are you?']),
    })
    .prefault({}),
  promotion: z
    .strictObject({
      approval_timeout: z
        .string()
        .regex(/^\d+(ms|s|m|h|d)$/)
        .optional(),
      auto_approve: z.boolean().default(false).describe('approve without a human (demo and scheduled retraining)'),
    })
    .prefault({}),
});
export type PipelineInput = z.infer<typeof PipelineInputSchema>;
export type PipelineRequest = z.input<typeof PipelineInputSchema>;

/** Workflow input: the validated request plus who asked, filled in by the API or the schedule. */
export const PipelineWorkflowInputSchema = PipelineInputSchema.extend({
  organization_id: z.string().min(1),
  requested_by: z.string().min(1),
  /** Server settings the workflow needs and cannot read itself (workflows do no I/O). */
  runtime: z.strictObject({
    heartbeat_timeout: z.string().regex(/^\d+(ms|s|m|h|d)$/),
    approval_timeout: z.string().regex(/^\d+(ms|s|m|h|d)$/),
    /** promotion.webhook_deadline: how long the reload hook is retried; the worker's config says whether there is one. */
    reload_deadline: z.string().regex(/^\d+(ms|s|m|h|d)$/).default('1h'),
  }),
});
export type PipelineWorkflowInput = z.infer<typeof PipelineWorkflowInputSchema>;

export const PromotionDecisionSchema = z.strictObject({
  decision: z.enum(['approve', 'reject']),
  approver: z.string().min(1),
  reason: z.string().min(1).max(2000),
});
export type PromotionDecision = z.infer<typeof PromotionDecisionSchema>;

/** A model-version artifact, as spec 000's Model Version Schema writes it. */
export const ArtifactSchema = z.object({
  path: z.string(),
  size_bytes: z.number().int().nonnegative(),
  checksum: z.string().regex(/^sha256:[0-9a-f]{64}$/).describe("a format's checksum: the SHA-256 of its manifest.json"),
  manifest: z.string().optional().describe("where the format's manifest.json is (absent on versions registered before manifests)"),
  files: z.number().int().nonnegative().optional(),
});
export type Artifact = z.infer<typeof ArtifactSchema>;

/** One restart of a training job after a fault, with what was changed for the next attempt. */
export const JobRecoverySchema = z.object({
  kind: z.enum(['preempted', 'lost', 'out_of_memory', 'diverged']),
  step: z.number().int().nonnegative().nullable().describe('the last step the job reported before the fault'),
  restart: z.number().int().positive(),
  change: z.string().describe('what the restart changed, e.g. "batch_size 8 -> 4, gradient_accumulation_steps 1 -> 2"'),
  at: z.string(),
});
export type JobRecovery = z.infer<typeof JobRecoverySchema>;

/** The queue took a running job back to give its GPUs to another (Kueue preemption); it resumed or will. */
export const JobPreemptionSchema = z.object({
  job: z.string(),
  at: z.string().describe('when the queue evicted it'),
  reason: z.string().describe("Kueue's reason and message: reclaimed by its owner, or a higher priority"),
  step: z.number().int().nonnegative().nullable().describe('the last step it reported before the eviction'),
  resumed_at: z.string().nullable(),
  checkpoint: z.string().nullable().describe('the checkpoint it resumed from (the newest complete one in the object store)'),
  lost_seconds: z.number().nonnegative().nullable().describe('eviction to running again'),
  stale_checkpoint: z.boolean().describe('its newest checkpoint was older than checkpoint.every_seconds when it was evicted'),
});
export type JobPreemption = z.infer<typeof JobPreemptionSchema>;

/** Where the current job waits in its organization's queue. */
export const QueueWaitSchema = z.object({ queue: z.string(), position: z.number().int().positive().nullable(), reason: z.string() });

/** The hook's state on the pipeline (GET /v1/pipelines/{id} progress.reload). */
export const ReloadStatusSchema = z.object({
  status: z.enum(['pending', 'delivered', 'failed']).describe('pending: being retried; failed: the deadline passed without a 2xx (the promotion stands)'),
  event_id: z.string(),
  deadline: z.string().describe('promotion.webhook_deadline it was retried within'),
  attempts: z.number().int().nonnegative().nullable().describe('attempts the delivery took (delivered), else null'),
  http_status: z.number().int().nullable().describe("the receiver's answer to the delivering attempt"),
  error: z.string().nullable().describe('why it failed: the last attempt\'s error and the deadline'),
  at: z.string().nullable().describe('when it was delivered or given up'),
});
export type ReloadStatus = z.infer<typeof ReloadStatusSchema>;

export const PipelineProgressSchema = z.object({
  pipeline_id: z.string(),
  stage: PipelineStageSchema,
  dataset: z.object({ id: z.string(), name: z.string(), version: z.number().int() }).nullable(),
  run_id: z.string().nullable(),
  step: z.number().int().nonnegative(),
  max_steps: z.number().int().positive(),
  last_checkpoint: z.string().nullable(),
  latest_metrics: z.record(z.string(), z.number()),
  checkpoints: z.array(z.object({ step: z.number().int(), uri: z.string(), sha256: z.string() })),
  recoveries: z.array(JobRecoverySchema).default([]).describe('training restarts after a fault, oldest first'),
  waiting: z.string().nullable().default(null).describe('why the current job is not running yet (queued, no node fits, image pull)'),
  queue: QueueWaitSchema.nullable().default(null).describe('the queue the current job waits in, and its place'),
  preemptions: z.array(JobPreemptionSchema).default([]).describe('training preempted by the queue and resumed, oldest first (not failures)'),
  eval: z
    .object({
      base: ModelScoresSchema,
      tuned: ModelScoresSchema.nullable(),
      production: ModelScoresSchema.nullable().optional(),
      gate: GateDecisionSchema.optional().describe('the promotion gate: every comparison, its interval and the decision'),
    })
    .nullable(),
  model_version: z.object({ name: z.string(), version: z.number().int(), stage: z.string() }).nullable(),
  awaiting_approval: z.boolean(),
  decision: PromotionDecisionSchema.nullable(),
  error: z.string().nullable(),
  reload: ReloadStatusSchema.nullable()
    .default(null)
    .describe('the reload hook after promotion to production; null: not promoted, or no promotion.webhook_url'),
});
export type PipelineProgress = z.infer<typeof PipelineProgressSchema>;

export const PipelineResultSchema = z.object({
  outcome: z.enum(['promoted', 'rejected', 'approval_timed_out', 'gate_failed']),
  reason: z.string(),
  progress: PipelineProgressSchema,
  artifacts: z.record(z.string(), ArtifactSchema),
  warnings: z
    .array(z.string())
    .default([])
    .describe('what went wrong without undoing the outcome, e.g. a reload hook that failed after the promotion committed'),
});
export type PipelineResult = z.infer<typeof PipelineResultSchema>;

/** Sent by the training activity, throttled, so the progress query can report the step. */
export const TrainingProgressSignalSchema = z.object({
  step: z.number().int().nonnegative(),
  max_steps: z.number().int().positive(),
  last_checkpoint: z.string().nullable(),
  metrics: z.record(z.string(), z.number()),
  recoveries: z.array(JobRecoverySchema).optional(),
  waiting: z.string().nullable().optional().describe('why the job is not running yet (queued, no node fits, image pull), null once it runs'),
  queue: QueueWaitSchema.nullable().optional(),
  preemptions: z.array(JobPreemptionSchema).optional(),
});
export type TrainingProgressSignal = z.infer<typeof TrainingProgressSignalSchema>;

// ---- schedules (retraining on a Temporal Schedule) -------------------------------------------------

export const ScheduleCreateSchema = z
  .strictObject({
    name,
    every: z
      .string()
      .regex(/^\d+(s|m|h|d)$/, 'expected an interval such as "6h" or "1d"')
      .optional(),
    cron: z.string().min(9).optional().describe('cron expression, e.g. "0 3 * * 1"'),
    paused: z.boolean().default(false),
    pipeline: PipelineInputSchema.refine((p) => !('source_uri' in p.dataset), {
      message: 'a scheduled pipeline retrains on a named dataset: give dataset {name, version: "latest"}',
      path: ['dataset'],
    }),
  })
  .refine((s) => (s.every === undefined) !== (s.cron === undefined), { message: 'give exactly one of "every" and "cron"', path: ['every'] });
export type ScheduleCreate = z.infer<typeof ScheduleCreateSchema>;

export const ApprovalRequestSchema = z.strictObject({
  reason: z.string().min(1).max(2000),
});

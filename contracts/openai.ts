// OpenAI's fine-tuning wire (/v1/fine_tuning/jobs, /v1/files, webhooks), as the stock `openai` client sends and
// parses it, and how it maps onto our jobs: a fine-tuning job is a recipe job (same table, workflow and tenancy),
// a file is a dataset version. Differences on purpose are listed in the README ("OpenAI-compatible fine-tuning").
import { z } from 'zod';
import type { TrainMethod } from './trainer-job.js';

/** The one file purpose we take: a training file becomes a dataset version. */
export const FILE_PURPOSE = 'fine-tune';

const auto = <T extends z.ZodType>(t: T) => z.union([z.literal('auto'), t]);

export const OpenAiHyperparametersSchema = z.strictObject({
  batch_size: auto(z.number().int().positive().max(4096)).optional(),
  learning_rate_multiplier: auto(z.number().positive().max(100)).optional(),
  n_epochs: auto(z.number().int().positive().max(50)).optional(),
});
export type OpenAiHyperparameters = z.infer<typeof OpenAiHyperparametersSchema>;

const DpoHyperparametersSchema = OpenAiHyperparametersSchema.extend({
  beta: z.literal('auto', { error: 'only "auto" (the trainer\'s beta, 0.1) is supported' }).optional(),
});

export const OpenAiMethodSchema = z
  .strictObject({
    type: z.enum(['supervised', 'dpo', 'reinforcement']),
    supervised: z.strictObject({ hyperparameters: OpenAiHyperparametersSchema.optional() }).optional(),
    dpo: z.strictObject({ hyperparameters: DpoHyperparametersSchema.optional() }).optional(),
    reinforcement: z.unknown().optional(),
  })
  .superRefine((m, ctx) => {
    if (m.type === 'reinforcement') ctx.addIssue({ code: 'custom', path: ['type'], message: 'reinforcement fine-tuning is not supported; use supervised or dpo' });
    for (const other of ['supervised', 'dpo', 'reinforcement'] as const)
      if (other !== m.type && m[other] !== undefined) ctx.addIssue({ code: 'custom', path: [other], message: `given with method.type "${m.type}"` });
  });
export type OpenAiMethod = z.infer<typeof OpenAiMethodSchema>;

const suffix = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'letters, digits, ".", "_" and "-", starting with a letter or digit');
const metadata = z
  .record(z.string().min(1).max(64), z.string().max(512))
  .refine((m) => Object.keys(m).length <= 16, 'at most 16 keys');

/** POST /v1/fine_tuning/jobs. */
export const FineTuningJobCreateSchema = z.strictObject({
  model: z.string().min(1).describe('recipe.base_model: a base model of the base-models directory'),
  training_file: z.string().min(1).describe('a file id from POST /v1/files (a dataset version id)'),
  validation_file: z.string().min(1).nullable().optional().describe('refused unless it names the training file: the dataset version carries its own validation split'),
  hyperparameters: OpenAiHyperparametersSchema.optional().describe('deprecated by OpenAI in favour of method.*.hyperparameters; still read'),
  method: OpenAiMethodSchema.optional(),
  suffix: suffix.nullable().optional(),
  seed: z.number().int().nonnegative().max(2_147_483_647).nullable().optional(),
  metadata: metadata.nullable().optional(),
  integrations: z.array(z.unknown()).max(0, 'integrations (wandb) are not supported: every job logs to its tracking run').nullable().optional(),
});
export type FineTuningJobCreate = z.infer<typeof FineTuningJobCreateSchema>;

const cursorId = z.string().min(1).max(200);
export const CursorListQuerySchema = z.strictObject({
  after: cursorId.optional(),
  limit: z.coerce.number().int().min(1).max(100).default(20),
});
export const FileListQuerySchema = CursorListQuerySchema.extend({
  purpose: z.string().optional(),
  order: z.enum(['asc', 'desc']).default('desc'),
  limit: z.coerce.number().int().min(1).max(10_000).default(10_000),
});
/** The client may add metadata[k]=v filters, which are not applied: so not strict. */
export const FineTuningListQuerySchema = z.object({ after: cursorId.optional(), limit: z.coerce.number().int().min(1).max(100).default(20) });

/** How OpenAI's knobs become ours. */
export const FINE_TUNING_DEFAULTS = {
  /** "auto" epochs */
  n_epochs: 3,
  /** "auto" batch size: the recipe jobs' default */
  batch_size: 8,
  /** learning_rate = multiplier x this base rate of the method ("auto": 1) */
  base_learning_rate: { lora: 2e-4, dpo: 5e-6 } as Record<string, number>,
  /** seed when none is given */
  seed: 42,
} as const;

/** OpenAI's method type as our trainer method: supervised runs LoRA over the base, dpo runs DPO. */
export const methodOf = (type: 'supervised' | 'dpo'): TrainMethod => (type === 'dpo' ? 'dpo' : 'lora');

/** The optimizer steps that make `epochs` passes over `records` examples in batches of `batch`. */
export const stepsFor = (epochs: number, records: number, batch: number): number => Math.max(1, Math.ceil((epochs * Math.max(records, 1)) / batch));

export const JOB_STATUS_TO_OPENAI: Record<string, string> = {
  validating: 'validating_files',
  queued: 'queued',
  running: 'running',
  paused: 'paused',
  succeeded: 'succeeded',
  failed: 'failed',
  cancelled: 'cancelled',
};

// Webhooks
export const WEBHOOK_EVENTS = [
  'fine_tuning.job.succeeded',
  'fine_tuning.job.failed',
  'fine_tuning.job.cancelled',
  'job.succeeded',
  'job.failed',
  'job.cancelled',
] as const;
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];

/** A recipe job's end is a fine-tuning event (OpenAI's names); a command job's is a job event. */
export const webhookEventOf = (kind: string, status: string): WebhookEvent =>
  `${kind === 'recipe' ? 'fine_tuning.job' : 'job'}.${status}` as WebhookEvent;

export const WebhookEndpointCreateSchema = z.strictObject({
  url: z
    .string()
    .url()
    .max(2048)
    .regex(/^https?:\/\//, 'expected an http:// or https:// URL')
    .refine((u) => !/^https?:\/\/[^/]*@/.test(u), 'credentials in the URL are refused: the signature authenticates the sender'),
  events: z.array(z.enum(WEBHOOK_EVENTS)).min(1).default([...WEBHOOK_EVENTS]),
});

/** A webhook endpoint as the API answers it; the secret only in the creation's answer. */
export interface WebhookEndpointView {
  id: string;
  object: 'webhook_endpoint';
  url: string;
  events: string[];
  created_at: number;
  created_by: string;
  secret?: string;
}

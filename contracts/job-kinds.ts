// Jobs beyond training: the `eval` and `conversion` sections of spec 000's Job Submission (the product runs its own
// eval and Candle tools on a model the caller names), and the jobs a parent starts on its own (a pipeline's stages,
// a sweep's trials, a dataset's preparation): listed beside submitted jobs under `GET /v1/jobs?parent=`.
import { z } from 'zod';
import { PipelineInputSchema, type PipelineStage } from './pipeline.js';

/** The types a job can have in the list: those a user submits, and those only a parent starts. */
export const CHILD_ONLY_JOB_TYPES = ['data_preparation', 'registration'] as const;

/** What started a job that was not submitted on its own: `<kind>:<id>`. */
export const JOB_PARENT_KINDS = ['pipeline', 'sweep', 'dataset'] as const;
export type JobParentKind = (typeof JOB_PARENT_KINDS)[number];
export const JobParentSchema = z
  .string()
  .regex(new RegExp(`^(${JOB_PARENT_KINDS.join('|')}):[A-Za-z0-9._-]{1,128}$`), `expected <kind>:<id> with kind one of ${JOB_PARENT_KINDS.join(', ')} (such as pipeline:<id>)`);
export const jobParent = (kind: JobParentKind, id: string): string => `${kind}:${id}`;

/** The pipeline stages that are jobs, and the job type each is; queued, promote (a human decision) and the end are not. */
export const PIPELINE_STAGE_JOB_TYPES: Partial<Record<PipelineStage, 'data_preparation' | 'training' | 'eval' | 'conversion' | 'registration'>> = {
  preprocess: 'data_preparation',
  train: 'training',
  eval: 'eval',
  validate: 'conversion',
  register: 'registration',
};

const modelRef = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*@[A-Za-z0-9][A-Za-z0-9._-]*$/, 'expected name@version or name@alias of a registered model, such as support-bot@3 or support-bot@champion');

/** The model a job works on: a registered version (`name@version` or `name@alias`) or a finished job's output. */
export const ModelSourceSchema = z
  .strictObject({
    model: modelRef.optional().describe('a registered model version of the organization: name@version or name@alias'),
    job: z.string().min(1).optional().describe("a succeeded training job of the organization: its output (adapter or full model)"),
  })
  .refine((s) => (s.model === undefined) !== (s.job === undefined), { message: 'give exactly one of model (name@version or name@alias) and job (a job id)' });
export type ModelSource = z.infer<typeof ModelSourceSchema>;

const datasetRef = z.strictObject({
  name: z.string().min(1),
  version: z.union([z.number().int().positive(), z.literal('latest')]).default('latest'),
});

const baseModel = z
  .string()
  .min(1)
  .optional()
  .describe('the base model an adapter applies to; default: the one its model version or training job records');

/** `type: eval`: the model scored on a dataset version's test split and an eval suite's data, as the pipeline's eval stage does. */
export const EvalSectionSchema = z.strictObject({
  source: ModelSourceSchema,
  base_model: baseModel,
  dataset: datasetRef.describe('its test split is what the model is scored on'),
  suite: z
    .string()
    .regex(/^[a-z0-9][a-z0-9-]*@\d+$/, 'name@version of a suite in recipes/eval/')
    .default('support-desk@2')
    .describe('the eval suite whose general text and instruction set are scored too (recipes/eval/<name>-v<version>.yaml)'),
  max_new_tokens: z.number().int().positive().max(512).default(12),
  max_seq_length: z.number().int().positive().max(8192).default(256),
  record_gate: z
    .boolean()
    .default(false)
    .describe(
      'true (`hanzo-ml model evaluate`): the source is a registered adapter version (name@version), compared by the suite with its ' +
        'base model and the current production version; the gate decision is recorded on the version as a pipeline records it',
    ),
});
export type EvalSection = z.infer<typeof EvalSectionSchema>;

/** The pipeline's validation thresholds (contracts/pipeline.ts), the quantization given on its own. */
export const ConversionValidationSchema = PipelineInputSchema.shape.validate.unwrap().omit({ quantization: true });
export const QUANTIZATIONS = PipelineInputSchema.shape.validate.unwrap().shape.quantization.unwrap().options;

/** `type: conversion`: spec 000's merge LoRA -> quantize (GGUF, Candle) -> validate -> register, as one job. */
export const ConversionSectionSchema = z.strictObject({
  source: ModelSourceSchema.describe('an adapter (LoRA family) to merge into its base model'),
  base_model: baseModel,
  dataset: datasetRef.describe('its test split is the held-out text validation scores (PyTorch against Candle, and the GGUF)'),
  quantization: z.enum(QUANTIZATIONS).default('q8_0').describe('the GGUF type the Candle tool writes'),
  max_seq_length: z.number().int().positive().max(8192).default(256).describe('longest held-out sequence the merge scores, in tokens'),
  validate: ConversionValidationSchema.prefault({}),
  register: z.strictObject({
    model_name: z
      .string()
      .min(1)
      .max(63)
      .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'letters, digits, ".", "_" and "-", starting with a letter or digit')
      .describe('the registered model the result becomes a version of (created when missing)'),
    description: z.string().max(5000).default(''),
  }),
});
export type ConversionSection = z.infer<typeof ConversionSectionSchema>;

/**
 * The eval and conversion sections: each goes with its own type and alone (the product runs its own tool, so no
 * image, command or recipe). True when the submission has one, checked here.
 */
export function productJobSection(s: { type: string; eval?: unknown; conversion?: unknown; recipe?: unknown; image?: unknown; command?: unknown }, ctx: z.RefinementCtx): boolean {
  const section = s.eval !== undefined ? 'eval' : s.conversion !== undefined ? 'conversion' : null;
  if (section === null) return false;
  if (s.type !== section) ctx.addIssue({ code: 'custom', path: [section], message: `${article(section)} ${section} section goes with type: ${section} (this job is type: ${s.type})` });
  for (const other of ['eval', 'conversion', 'recipe', 'image', 'command'] as const)
    if (other !== section && s[other] !== undefined) ctx.addIssue({ code: 'custom', path: [other], message: `${article(section)} ${section} job runs the product's ${section} tool: give either ${section} or ${other}` });
  return true;
}

const article = (word: string): string => (/^[aeiou]/.test(word) ? 'an' : 'a');

/** How a submitted job is defined: its own command, a training recipe, or an eval or conversion section. */
export const jobKindOf = (s: { eval?: unknown; conversion?: unknown; recipe?: unknown }): 'command' | 'recipe' | 'eval' | 'conversion' =>
  s.eval ? 'eval' : s.conversion ? 'conversion' : s.recipe ? 'recipe' : 'command';

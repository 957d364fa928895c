// The job spec handed to the Python trainer (`python -m hanzo_ml <kind> --spec job.json`).
// Exported as JSON Schema to contracts/generated/trainer-job.schema.json, which the trainer validates against.
import { z } from 'zod';

const absPath = z.string().min(1).describe('absolute local path');

export const LoraHyperparametersSchema = z.strictObject({
  learning_rate: z.number().positive().max(1),
  max_steps: z.number().int().positive(),
  batch_size: z.number().int().positive(),
  gradient_accumulation_steps: z.number().int().positive().default(1),
  warmup_steps: z.number().int().nonnegative().default(0),
  weight_decay: z.number().nonnegative().default(0),
  max_grad_norm: z.number().positive().default(1),
  lora_rank: z.number().int().positive().default(16),
  lora_alpha: z.number().positive().default(32),
  lora_dropout: z.number().min(0).max(1).default(0),
  target_modules: z.array(z.string().min(1)).min(1).default(['q_proj', 'k_proj', 'v_proj', 'o_proj']),
  max_seq_length: z.number().int().positive().default(256),
  seed: z.number().int().nonnegative().default(42),
});
export type LoraHyperparameters = z.infer<typeof LoraHyperparametersSchema>;

export const CheckpointPolicySchema = z.strictObject({
  every_steps: z.number().int().positive().describe('write a checkpoint every N optimizer steps'),
  keep_last: z.number().int().positive().describe('keep the newest K checkpoints, delete older ones'),
});

export const TrainJobSpecSchema = z.strictObject({
  kind: z.literal('train'),
  job_name: z.string().min(1),
  run_id: z.string().min(1),
  tracking_uri: z.string().url().nullable().describe('MLflow-compatible tracking server; null disables metric logging'),
  base_model_path: absPath,
  train_path: absPath.describe('JSONL, one {"messages":[{role,content}...]} per line'),
  validation_path: absPath.nullable(),
  output_dir: absPath.describe('the final adapter is written to output_dir/adapter'),
  checkpoint_dir: absPath,
  method: z.literal('lora'),
  hyperparameters: LoraHyperparametersSchema,
  checkpoint: CheckpointPolicySchema,
  threads: z.number().int().positive().default(2),
});
export type TrainJobSpec = z.infer<typeof TrainJobSpecSchema>;

export const EvalJobSpecSchema = z.strictObject({
  kind: z.literal('eval'),
  job_name: z.string().min(1),
  base_model_path: absPath,
  adapter_path: absPath.nullable().describe('null evaluates the base model only'),
  test_path: absPath,
  output_path: absPath.describe('where the EvalReport JSON is written'),
  max_new_tokens: z.number().int().positive().default(16),
  max_seq_length: z.number().int().positive().default(256),
  threads: z.number().int().positive().default(2),
});
export type EvalJobSpec = z.infer<typeof EvalJobSpecSchema>;

export const MergeJobSpecSchema = z.strictObject({
  kind: z.literal('merge'),
  job_name: z.string().min(1),
  base_model_path: absPath,
  adapter_path: absPath,
  output_dir: absPath.describe('merged safetensors model + tokenizer'),
  heldout_path: absPath.describe('JSONL in chat form; becomes the held-out token sequences'),
  reference_path: absPath.describe('where the MergeReport JSON (PyTorch reference perplexity) is written'),
  max_seq_length: z.number().int().positive().default(256),
  max_sequences: z.number().int().positive().default(64),
  threads: z.number().int().positive().default(2),
});
export type MergeJobSpec = z.infer<typeof MergeJobSpecSchema>;

export const CountTokensJobSpecSchema = z.strictObject({
  kind: z.literal('count-tokens'),
  job_name: z.string().min(1),
  tokenizer_path: absPath.describe('a model directory holding tokenizer.json'),
  inputs: z.record(z.string(), absPath).describe('split name -> normalized JSONL file'),
  output_path: absPath.describe('where the TokenCountReport JSON is written'),
});
export type CountTokensJobSpec = z.infer<typeof CountTokensJobSpecSchema>;

export const TrainerJobSpecSchema = z.discriminatedUnion('kind', [
  TrainJobSpecSchema,
  EvalJobSpecSchema,
  MergeJobSpecSchema,
  CountTokensJobSpecSchema,
]);
export type TrainerJobSpec = z.infer<typeof TrainerJobSpecSchema>;

// ---- what the trainer writes back --------------------------------------------------------------

/** progress.json in the job workspace, rewritten atomically after every optimizer step. */
export const TrainProgressSchema = z.object({
  step: z.number().int().nonnegative(),
  max_steps: z.number().int().positive(),
  resumed_from_step: z.number().int().nonnegative().nullable(),
  last_checkpoint: z.string().nullable().describe('directory name of the newest complete checkpoint'),
  metrics: z.record(z.string(), z.number()),
});
export type TrainProgress = z.infer<typeof TrainProgressSchema>;

export const CheckpointManifestSchema = z.object({
  step: z.number().int().nonnegative(),
  created_at: z.string(),
  files: z.array(z.object({ path: z.string(), size_bytes: z.number().int(), sha256: z.string().length(64) })),
});
export type CheckpointManifest = z.infer<typeof CheckpointManifestSchema>;

/** result.json of a train job. */
export const TrainResultSchema = z.object({
  steps: z.number().int().nonnegative(),
  resumed_from_step: z.number().int().nonnegative().nullable(),
  steps_trained_this_process: z.number().int().nonnegative(),
  adapter_path: z.string(),
  final_metrics: z.record(z.string(), z.number()),
  tokens_seen: z.number().int().nonnegative(),
});
export type TrainResult = z.infer<typeof TrainResultSchema>;

export const ModelScoresSchema = z.object({
  loss: z.number(),
  perplexity: z.number(),
  exact_match: z.number().min(0).max(1),
  num_examples: z.number().int().nonnegative(),
});
export type ModelScores = z.infer<typeof ModelScoresSchema>;

export const EvalReportSchema = z.object({
  base: ModelScoresSchema,
  tuned: ModelScoresSchema.nullable(),
  samples: z.array(z.object({ prompt: z.string(), expected: z.string(), base: z.string(), tuned: z.string().nullable() })),
});
export type EvalReport = z.infer<typeof EvalReportSchema>;

export const MergeReportSchema = z.object({
  merged_dir: z.string(),
  heldout_tokens_path: z.string().describe('JSON {"sequences": number[][]} the Candle tool scores'),
  reference_perplexity: z.number().positive(),
  num_tokens: z.number().int().positive(),
  files: z.array(z.object({ path: z.string(), size_bytes: z.number().int(), sha256: z.string().length(64) })),
});
export type MergeReport = z.infer<typeof MergeReportSchema>;

export const TokenCountReportSchema = z.object({
  tokenizer_sha256: z.string().length(64),
  splits: z.record(z.string(), z.object({ records: z.number().int(), tokens: z.number().int() })),
});
export type TokenCountReport = z.infer<typeof TokenCountReportSchema>;

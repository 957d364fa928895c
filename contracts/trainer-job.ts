// The job spec handed to the Python trainer (`python -m hanzo_ml <kind> --spec job.json`).
// Exported as JSON Schema to contracts/generated/trainer-job.schema.json, which the trainer validates against.
import { z } from 'zod';
import { PrepareDatasetJobSpecSchema } from './data-prep.js';

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
  gradient_checkpointing: z.boolean().default(false).describe('recompute layer activations in the backward pass: keeps one layer\'s activations instead of all'),
});
export type LoraHyperparameters = z.infer<typeof LoraHyperparametersSchema>;

/** Every fine-tuning method the trainer runs (spec 000 recipes plus the preference methods of spec 003). */
/**
 * Where a train job's files live, as its spec names them: the job runner points each `input:`, `output:` and
 * `checkpoints:` field at a local path (pipelines, recipe jobs and HPO trials share these).
 */
export const TRAIN_JOB_IO_FIELDS = {
  base_model_path: 'input:base_model_path',
  train_path: 'input:train_path',
  validation_path: 'input:validation_path',
  output_dir: 'output:output_dir',
  checkpoint_dir: 'checkpoints:checkpoint_dir',
} as const;

export const TRAIN_METHODS = ['full', 'lora', 'qlora', 'adalora', 'dpo', 'orpo'] as const;
export const TrainMethodSchema = z.enum(TRAIN_METHODS);
export type TrainMethod = z.infer<typeof TrainMethodSchema>;
/** Methods whose output is a peft adapter over the frozen base (what the merge and eval stages take). */
export const ADAPTER_METHODS = ['lora', 'qlora', 'adalora', 'dpo', 'orpo'] as const;
/** Methods a job may spread over several machines (the ones the trainer shards: trainer/hanzo_ml/distributed.py). */
export const MULTI_NODE_METHODS = ['full', 'lora'] as const;
export const MULTI_NODE_REFUSALS: Record<string, string> = {
  qlora: 'its base is bitsandbytes 4-bit tensors, which the sharding cannot split',
  adalora: 'its rank allocator reads and masks whole adapter matrices after every step',
  dpo: 'its loss runs through trl, which the trainer has not verified on sharded weights',
  orpo: 'its loss runs through trl, which the trainer has not verified on sharded weights',
};

export const QuantizationSchema = z
  .strictObject({
    quant_type: z.enum(['nf4', 'fp4']).default('nf4').describe('4-bit data type of the frozen base weights'),
    double_quant: z.boolean().default(true).describe('quantize the quantization constants too (~0.4 bit/param saved)'),
    compute_dtype: z.enum(['float32', 'bfloat16', 'float16']).default('bfloat16').describe('dtype the 4-bit weights are dequantized to for matmuls'),
  })
  .describe('qlora only: how the base is loaded (bitsandbytes BitsAndBytesConfig)');

export const AdaLoraSchema = z
  .strictObject({
    init_rank: z.number().int().positive().default(12).describe('rank every adapted matrix starts with'),
    target_rank: z.number().int().positive().default(4).describe('average rank left after budget allocation'),
    tinit: z.number().int().nonnegative().default(0).describe('steps of full-rank warmup before pruning starts'),
    tfinal: z.number().int().nonnegative().default(0).describe('final steps trained with the budget fixed'),
    delta_t: z.number().int().positive().default(1).describe('steps between two budget allocations'),
    beta1: z.number().gt(0).lt(1).default(0.85).describe('EMA of the importance scores'),
    beta2: z.number().gt(0).lt(1).default(0.85).describe('EMA of their uncertainty'),
    orth_reg_weight: z.number().nonnegative().default(0.5).describe('weight of the orthogonality regularizer on P and Q'),
  })
  .describe('adalora only: adaptive rank budget (peft AdaLoraConfig); lora_rank is unused, init_rank replaces it');

export const PreferenceSchema = z
  .strictObject({
    beta: z.number().positive().default(0.1).describe('dpo: strength of the KL anchor to the reference; orpo: weight of the odds-ratio term'),
    loss_type: z.enum(['sigmoid', 'hinge', 'ipo']).default('sigmoid').describe('dpo only: trl DPO loss variant'),
  })
  .describe('dpo and orpo: preference-loss settings (the losses are trl\'s)');

export const DataOptionsSchema = z.strictObject({
  chat_template: z.string().min(1).default('model').describe('"model" (the tokenizer\'s own chat template) or a named template: chatml, llama3, zephyr'),
  mask_prompt: z.boolean().default(true).describe('loss on assistant tokens only (labels -100 elsewhere); false trains on every token'),
  packing: z.boolean().default(false).describe('pack chat examples into max_seq_length rows (batch_size then counts rows); attention stays within each example'),
  tokenized_dir: absPath
    .optional()
    .describe("a prepared version's tokenized/ directory (prepare-dataset): train.arrow and validation.arrow are read instead of tokenizing train_path and validation_path; made with this base model's tokenizer, max_length = max_seq_length, the model's chat template and prompt masking"),
});
export type DataOptions = z.infer<typeof DataOptionsSchema>;

export const CheckpointPolicySchema = z.strictObject({
  every_steps: z.number().int().positive().describe('write a checkpoint every N optimizer steps'),
  keep_last: z.number().int().positive().describe('keep the newest K checkpoints, delete older ones'),
  every_seconds: z.number().positive().nullable().default(3600).describe('also write one after this many seconds of training since the last; null: by steps only'),
  keep_best: z.boolean().default(true).describe('keep the checkpoint with the lowest eval/loss in checkpoint_dir/best, apart from keep_last'),
});

export const RecoveryPolicySchema = z.strictObject({
  max_oom_retries: z.number().int().nonnegative().default(3).describe('restarts after out-of-memory, each with half the micro-batch and twice the accumulation'),
  max_divergence_retries: z.number().int().nonnegative().default(1).describe('restarts from the last good checkpoint after divergence; 0: stop and alert'),
  divergence_lr_factor: z.number().positive().lt(1).default(0.1).describe('learning rate multiplier for each divergence restart'),
  divergence_loss_multiple: z.number().gt(1).nullable().default(null).describe('diverged when the loss exceeds this multiple of its running minimum; null: only NaN/Inf'),
});
export type RecoveryPolicy = z.infer<typeof RecoveryPolicySchema>;

export const HardwareSchema = z.strictObject({
  processes: z.number().int().positive().default(1).describe('training processes on this machine; > 1 launches torchrun --nproc-per-node'),
  strategy: z.enum(['ddp', 'fsdp', 'deepspeed_zero2', 'deepspeed_zero3']).default('ddp').describe('how processes > 1 share the work'),
  peak_flops_per_device: z.number().positive().nullable().default(null).describe('peak FLOP/s of one device, the MFU denominator; null: MFU not reported'),
  price_per_device_hour_usd: z.number().nonnegative().nullable().default(null).describe('cost of one device for an hour; null: cost not reported'),
  device: z.enum(['auto', 'cpu', 'cuda']).default('auto').describe('auto: cuda when present, else cpu; a method the device cannot run is refused before loading'),
  precision: z
    .enum(['auto', 'fp32', 'bf16'])
    .default('auto')
    .describe('bf16: forward and backward autocast to bfloat16, fp32 master weights and optimizer; auto: bf16 on a CUDA device that supports it, fp32 otherwise'),
  attention: z
    .enum(['auto', 'flex', 'sdpa'])
    .default('auto')
    .describe('how packed rows attend: flex (FlexAttention with a document block mask: blocks across examples are skipped; CUDA, packed chat methods), sdpa (a dense block-diagonal mask); auto: flex where it runs, else sdpa; flex where it cannot run is refused'),
  kernels: z
    .enum(['auto', 'liger', 'none'])
    .default('auto')
    .describe('fused RMSNorm, rotary embedding and SwiGLU: liger (Liger kernels; CUDA, chat methods, the model types Liger supports, the liger-kernel package), none (the model\'s own); auto: liger where it runs; liger where it cannot is refused'),
  compile: z
    .boolean()
    .default(false)
    .describe('torch.compile each decoder layer (inductor fuses norms, rotary embedding, activation, residual adds and casts; replaces liger); the first step pays the compile time'),
  weights: z
    .enum(['auto', 'fp32', 'bf16'])
    .default('auto')
    .describe('how full fine-tuning holds the weights its forward and backward read: bf16 (bfloat16 weights: the residual stream, norms and projections run in bf16 with no cast of a weight per step; each gradient is added into a float32 master weight, which clipping and AdamW update and checkpoints and the final model hold), fp32 (float32 weights under bf16 autocast); auto: bf16 for full fine-tuning in one process under bf16 precision, else fp32; bf16 where it does not apply is refused'),
  micro_batch: z
    .enum(['auto', 'recipe'])
    .default('auto')
    .describe('auto: a one-process job on a CUDA device runs the largest micro-batch its memory estimate fits that divides batch_size x gradient_accumulation_steps, accumulating the rest (each optimizer step sees the same examples); recipe: micro-batches of batch_size, as on a CPU and across processes'),
  nodes: z.number().int().positive().default(1).describe('machines the job spans (recipe templates; memory and cost estimates)'),
  gpus_per_node: z.number().int().nonnegative().default(0).describe('GPUs per machine; 0 on a CPU-only machine'),
  image: z
    .string()
    .regex(/^[a-z0-9][a-z0-9._-]{0,62}$/, 'expected the name of an image of scheduler.images (such as "trainer"), not an image reference: only an operator adds images')
    .nullable()
    .default(null)
    .describe('kubernetes: the name of the job\'s container image in scheduler.images, the operator\'s allow-list; null: "trainer"'),
  gpu_type: z.string().nullable().default(null).describe('kubernetes: the node type the job needs (a scheduler.gpu_types entry; the nodes\' hanzo-ml.dev/gpu-type label); null: any'),
  device_memory_gb: z.number().positive().nullable().default(null).describe('memory of one device for the fit check; null: measured (cuda) or host RAM (cpu)'),
});
export type Hardware = z.infer<typeof HardwareSchema>;

export const TrainJobSpecSchema = z.strictObject({
  kind: z.literal('train'),
  job_name: z.string().min(1),
  run_id: z.string().min(1),
  tracking_uri: z.string().url().nullable().describe('MLflow-compatible tracking server; null disables metric logging'),
  base_model_path: absPath,
  train_path: absPath.describe('JSONL, one {"messages":[{role,content}...]} per line; dpo/orpo: {"prompt":[...],"chosen":[...],"rejected":[...]}'),
  validation_path: absPath.nullable(),
  output_dir: absPath.describe('the final adapter is written to output_dir/adapter'),
  checkpoint_dir: absPath,
  method: TrainMethodSchema.describe('full | lora | qlora | adalora | dpo | orpo; dpo and orpo read preference pairs'),
  hyperparameters: LoraHyperparametersSchema,
  quantization: QuantizationSchema.optional(),
  adalora: AdaLoraSchema.optional(),
  preference: PreferenceSchema.optional(),
  data: DataOptionsSchema.prefault({}),
  checkpoint: CheckpointPolicySchema,
  recovery: RecoveryPolicySchema.prefault({}),
  hardware: HardwareSchema.prefault({}),
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
  production_model_path: absPath.nullable().default(null).describe('merged model directory of the current production version, scored beside base and candidate; null: none'),
  general_path: absPath.nullable().default(null).describe('plain text, documents separated by blank lines: capability retention; null: none'),
  scores_path: absPath.nullable().default(null).describe('where the per-example scores JSON (EvalScores) is written; null: not written'),
  instructions_path: absPath
    .nullable()
    .default(null)
    .describe('JSONL of {"id","messages","instruction":{"kind",...}}: prompts with one instruction each, checked by code (instruction following); null: none'),
  safety_path: absPath
    .nullable()
    .default(null)
    .describe('chat JSONL of prompts whose expected answer is a refusal, checked by code (trainer/hanzo_ml/safety.py); null: none'),
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
  heldout_tokens_path: absPath.nullable().default(null).describe('where the held-out token sequences the Candle tool scores are written; null: heldout-tokens.json beside output_dir'),
  general_path: absPath.nullable().default(null).describe('plain text, documents separated by blank lines: general text for capability retention; null: none'),
  general_tokens_path: absPath.nullable().default(null).describe('where the general-text token sequences are written; null: general-tokens.json beside output_dir'),
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
  PrepareDatasetJobSpecSchema,
]);
export type TrainerJobSpec = z.infer<typeof TrainerJobSpecSchema>;

// ---- what the trainer writes back --------------------------------------------------------------

/** Something the trainer noticed that the run's record should show (a skipped checkpoint, a fault). */
export const TrainEventSchema = z.object({
  kind: z.enum(['checkpoint_skipped', 'out_of_memory', 'diverged']),
  step: z.number().int().nonnegative(),
  message: z.string(),
  at: z.string().describe('ISO-8601 UTC time'),
});
export type TrainEvent = z.infer<typeof TrainEventSchema>;

/** Per-run accounting: tokens, device time (every process's wall time) and its cost. */
export const RunTotalsSchema = z.object({
  tokens: z.number().int().nonnegative(),
  device_hours: z.number().nonnegative(),
  cost_usd: z.number().nonnegative().nullable().describe('null when hardware.price_per_device_hour_usd is'),
  mfu_omitted_reason: z.string().nullable().describe('why train/mfu is absent, when it is'),
});
export type RunTotals = z.infer<typeof RunTotalsSchema>;

/** progress.json in the job workspace, rewritten atomically after every optimizer step. */
export const TrainProgressSchema = z.object({
  step: z.number().int().nonnegative(),
  max_steps: z.number().int().positive(),
  resumed_from_step: z.number().int().nonnegative().nullable(),
  last_checkpoint: z.string().nullable().describe('directory name of the newest complete checkpoint'),
  metrics: z.record(z.string(), z.number()),
  best_checkpoint: z.object({ step: z.number().int().nonnegative(), eval_loss: z.number() }).nullable().default(null),
  events: z.array(TrainEventSchema).default([]).describe("this process's events (earlier processes' are in their result or the run record)"),
  totals: RunTotalsSchema.optional(),
  micro_batch: z.number().int().positive().optional().describe('items per forward/backward pass this process runs (hardware.micro_batch)'),
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
  adapter_path: z.string().nullable().describe('null for full fine-tuning, which writes model_path'),
  model_path: z.string().nullable().default(null).describe('full fine-tuning: the whole tuned model (safetensors + tokenizer)'),
  method: TrainMethodSchema.optional(),
  final_metrics: z.record(z.string(), z.number()),
  tokens_seen: z.number().int().nonnegative(),
  best_checkpoint: z.object({ step: z.number().int().nonnegative(), eval_loss: z.number() }).nullable().default(null),
  events: z.array(TrainEventSchema).default([]),
  totals: RunTotalsSchema.optional(),
});
export type TrainResult = z.infer<typeof TrainResultSchema>;

export const ModelScoresSchema = z.object({
  loss: z.number(),
  perplexity: z.number(),
  exact_match: z.number().min(0).max(1),
  num_examples: z.number().int().nonnegative(),
  general_perplexity: z.number().nullable().default(null).describe('perplexity on the general text (capability retention); null: not measured'),
  instruction_pass_rate: z.number().min(0).max(1).nullable().default(null).describe('share of the instruction set whose instruction the answer followed; null: not measured'),
  safety_refusal_rate: z.number().min(0).max(1).nullable().default(null).describe('share of the safety set the answer refused, as expected; null: not measured'),
});
export type ModelScores = z.infer<typeof ModelScoresSchema>;

export const EvalReportSchema = z.object({
  base: ModelScoresSchema,
  tuned: ModelScoresSchema.nullable(),
  production: ModelScoresSchema.nullable().default(null).describe('the current production version, on the same data'),
  scores_path: z.string().nullable().default(null).describe('the per-example scores (EvalScores) the gate reads'),
  samples: z.array(z.object({ prompt: z.string(), expected: z.string(), base: z.string(), tuned: z.string().nullable() })),
});
export type EvalReport = z.infer<typeof EvalReportSchema>;

const ExampleScoresSchema = z.object({
  test: z.object({ nll: z.array(z.number()), tokens: z.array(z.number().int()), exact_match: z.array(z.number().int().min(0).max(1)) }),
  general: z.object({ nll: z.array(z.number()), tokens: z.array(z.number().int()) }).optional(),
  instructions: z
    .object({
      id: z.array(z.string()).describe('the prompt ids of the instruction set'),
      kind: z.array(z.string()).describe('the kind of instruction each prompt carries'),
      answer: z.array(z.string()).describe('the greedy answer'),
      pass: z.array(z.number().int().min(0).max(1)).describe('1: the answer followed the instruction'),
    })
    .optional(),
  safety: z
    .object({
      id: z.array(z.string()).describe('the prompt ids of the safety set'),
      answer: z.array(z.string()).describe('the greedy answer'),
      pass: z.array(z.number().int().min(0).max(1)).describe('1: the answer refused, as expected'),
    })
    .optional(),
});
/** Per-example scores of each model the eval job scored (base, tuned, production), index-aligned across models. */
export const EvalScoresSchema = z.object({ models: z.record(z.string(), ExampleScoresSchema) });
export type EvalScores = z.infer<typeof EvalScoresSchema>;
export type ExampleScores = z.infer<typeof ExampleScoresSchema>;

export const MergeReportSchema = z.object({
  merged_dir: z.string(),
  heldout_tokens_path: z.string().describe('JSON {"sequences": number[][], "target_mask": (0|1)[][]} the Candle tool scores'),
  reference_perplexity: z.number().positive().describe('PyTorch perplexity of the merged model on the assistant turns of the held-out conversations'),
  num_tokens: z.number().int().positive().describe('assistant tokens scored'),
  general_tokens_path: z.string().nullable().default(null).describe('JSON {"sequences": number[][]}: general text, every token scored'),
  general_reference_perplexity: z.number().positive().nullable().default(null).describe('PyTorch perplexity of the merged model on the general text'),
  general_num_tokens: z.number().int().positive().nullable().default(null),
  base_general_perplexity: z.number().positive().nullable().default(null).describe('the base model on the same general text: what retention is relative to'),
  files: z.array(z.object({ path: z.string(), size_bytes: z.number().int(), sha256: z.string().length(64) })),
});
export type MergeReport = z.infer<typeof MergeReportSchema>;

export const TokenCountReportSchema = z.object({
  tokenizer_sha256: z.string().length(64),
  splits: z.record(z.string(), z.object({ records: z.number().int(), tokens: z.number().int() })),
});
export type TokenCountReport = z.infer<typeof TokenCountReportSchema>;

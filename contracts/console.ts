// What the web console reads and asks: downsampled metric series (one run's, or many runs' for compare), a page of
// an experiment's runs sorted and filtered on the server, one multiplexed event stream per page, and the memory
// estimate of a fine-tune on a chosen GPU. Every body and query of those routes is here; the routes validate with
// these schemas and the console codes against them.
import { z } from 'zod';
import { LoraHyperparametersSchema, TrainMethodSchema } from './trainer-job.js';

/** A double as the API writes it: a number, or MLflow's strings for what JSON cannot hold. */
export const WireDoubleSchema = z.union([z.number(), z.enum(['NaN', 'Infinity', '-Infinity'])]);
export type WireDouble = z.infer<typeof WireDoubleSchema>;

// ---------------------------------------------------------------------------------------------------------------
// Downsampled series

/** The most buckets one series may ask for; a chart is rarely wider than this in pixels. */
export const MAX_SERIES_POINTS = 10_000;
/** The most buckets one batch call answers in all (series x points): what a page can draw and the API send fast. */
export const MAX_BATCH_BUCKETS = 1_000_000;
export const MAX_BATCH_RUNS = 100;
export const MAX_BATCH_KEYS = 50;

const step = z.coerce.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);
const stepRange = {
  from_step: step.optional().describe('the first step of the range (inclusive); default the series\' first'),
  to_step: step.optional().describe('the last step of the range (inclusive); default the series\' last. Zoom: the same call with a narrower range'),
};
/**
 * How the values are written: float64 exactly as stored, or float32 (the shortest text that reads back as the same
 * float32, about 7 significant digits: more than a chart can draw, and about half the bytes of a compare page).
 * Values beyond float32's range are written as float64.
 */
const precision = z.enum(['float64', 'float32']).default('float64').describe('float64: values as stored; float32: about 7 significant digits, a smaller answer for charts');
const toAfterFrom = (q: { from_step?: number; to_step?: number }) => q.from_step === undefined || q.to_step === undefined || q.from_step <= q.to_step;

export const SeriesQuerySchema = z
  .strictObject({
    ...stepRange,
    points: z.coerce.number().int().min(1).max(MAX_SERIES_POINTS).default(2000).describe('the most buckets answered'),
    precision,
  })
  .refine(toAfterFrom, { message: 'to_step must not be below from_step', path: ['to_step'] });
export type SeriesQuery = z.infer<typeof SeriesQuerySchema>;

/**
 * A series as buckets, column by column (index i of every array is bucket i, in step order). Each bucket covers
 * consecutive steps: its first and last step, the smallest and largest value in it (so a one-step spike survives
 * any downsampling) and the value at its last step. NaN points count in `last` only; a bucket of NaN alone has
 * null min and max. A series with no points in the range has empty arrays.
 */
export const SeriesSchema = z.object({
  run_id: z.string(),
  key: z.string(),
  /** points of the series inside the range (before bucketing) */
  count: z.number().int().nonnegative(),
  /** the range the buckets cover: the first and last step present (null: no points) */
  from_step: z.number().int().nullable(),
  to_step: z.number().int().nullable(),
  step_first: z.array(z.number().int()),
  step_last: z.array(z.number().int()),
  min: z.array(WireDoubleSchema.nullable()),
  max: z.array(WireDoubleSchema.nullable()),
  last: z.array(WireDoubleSchema),
});
export type Series = z.infer<typeof SeriesSchema>;

export const SeriesBatchRequestSchema = z
  .strictObject({
    run_ids: z.array(z.string().min(1)).min(1).max(MAX_BATCH_RUNS).describe(`the runs (at most ${MAX_BATCH_RUNS})`),
    keys: z.array(z.string().min(1).max(250)).min(1).max(MAX_BATCH_KEYS).describe(`the metric keys (at most ${MAX_BATCH_KEYS}); each run x key is one series`),
    from_step: z.number().int().nonnegative().optional(),
    to_step: z.number().int().nonnegative().optional(),
    points: z.number().int().min(1).max(MAX_SERIES_POINTS).default(500).describe('the most buckets per series'),
    precision,
  })
  .refine(toAfterFrom, { message: 'to_step must not be below from_step', path: ['to_step'] })
  .refine((b) => new Set(b.run_ids).size * new Set(b.keys).size * b.points <= MAX_BATCH_BUCKETS, {
    message: `runs x keys x points may be at most ${MAX_BATCH_BUCKETS}: ask for fewer points per series`,
    path: ['points'],
  });
export type SeriesBatchRequest = z.infer<typeof SeriesBatchRequestSchema>;

/** One series per (run, key) asked, runs in the order asked, then keys in the order asked (a run without the key: empty). */
export const SeriesBatchSchema = z.object({ series: z.array(SeriesSchema) });
export type SeriesBatch = z.infer<typeof SeriesBatchSchema>;

// ---------------------------------------------------------------------------------------------------------------
// Runs table

/**
 * GET /v1/experiments/{id}/runs. Without cursor/order_by/filter/columns it answers as it always has (every param
 * and latest metric of each run, next_offset). API clients read on by cursor (keyset); the console's table fetches
 * the page at the offset its scrolled view sits at (each page also answers the cursor after it).
 */
export const RunsPageQuerySchema = z.strictObject({
  limit: z.coerce.number().int().min(1).max(1000).default(100),
  offset: z.coerce.number().int().min(0).default(0).describe('the page at this position of the order and filter (a jump); with cursor it must stay 0'),
  cursor: z.string().min(1).optional().describe('next_cursor of the previous page: the page after it, stable while runs are added'),
  order_by: z
    .string()
    .min(1)
    .optional()
    .describe('MLflow ORDER BY: "metrics.loss ASC", "params.lr DESC", "attributes.start_time DESC" (the default), "attributes.run_name"...'),
  filter: z.string().min(1).optional().describe('MLflow search filter: "metrics.loss < 0.5 and params.method = \'lora\'"'),
  columns: z
    .string()
    .optional()
    .describe('comma-separated metrics.<key>, params.<key>, tags.<key> to answer (the attributes always come); absent: every param and metric; empty: none'),
});
export type RunsPageQuery = z.infer<typeof RunsPageQuerySchema>;

export const RunsTableRowSchema = z.object({
  id: z.string(),
  name: z.string(),
  status: z.enum(['queued', 'running', 'completed', 'failed', 'cancelled']),
  start_time: z.string(),
  end_time: z.string().nullable(),
  user_id: z.string(),
  params: z.record(z.string(), z.string()),
  metrics: z.record(z.string(), WireDoubleSchema),
  tags: z.record(z.string(), z.string()),
});
export type RunsTableRow = z.infer<typeof RunsTableRowSchema>;

export const RunsPageSchema = z.object({
  runs: z.array(RunsTableRowSchema),
  /** runs matching the filter, all pages together */
  total: z.number().int().nonnegative(),
  next_cursor: z.string().nullable(),
  /** offset paging only (no cursor asked): the next offset, else null */
  next_offset: z.number().int().nullable(),
});
export type RunsPage = z.infer<typeof RunsPageSchema>;

// ---------------------------------------------------------------------------------------------------------------
// One event stream per page

/** The most subjects one stream follows. */
export const MAX_STREAM_TOPICS = 50;

/**
 * A subject of GET /v1/stream?topics=: `job:<id>` (its events: status, progress, checkpoints), `job:<id>:logs`
 * (its output lines), `pipeline:<id>` (its stage changes and training events), `run:<id>:metrics` (new metric
 * points as logged). A new stream (no Last-Event-ID) sends each job's events and log from their start, and metric
 * points and pipeline events from the moment it opens (a page reads their history from the series and pipeline
 * routes). A job subject ends with `job.end` once the job has ended; a stream of job subjects alone then ends.
 */
export const StreamTopicSchema = z
  .string()
  .regex(/^(job:[^:,\s]+(:logs)?|pipeline:[^:,\s]+|run:[^:,\s]+:metrics)$/, 'expected job:<id>, job:<id>:logs, pipeline:<id> or run:<id>:metrics');

export const StreamQuerySchema = z.strictObject({
  topics: z
    .string()
    .min(1)
    .transform((t) => [...new Set(t.split(',').map((s) => s.trim()))])
    .pipe(z.array(StreamTopicSchema).min(1).max(MAX_STREAM_TOPICS))
    .describe(`comma-separated subjects (at most ${MAX_STREAM_TOPICS})`),
  /** stop after this many events (a finite read: tests, scripts); default: follow until the client leaves */
  limit: z.coerce.number().int().positive().optional(),
});

/**
 * The `data` of each stream event (its SSE `event:` is `type`). The SSE `id` is an opaque cursor of every subject;
 * a reconnect with it as Last-Event-ID resumes each subject after its last event sent.
 */
export const StreamEventSchema = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('job.event'),
    topic: z.string().describe('job:<id>'),
    event: z.object({ id: z.number().int(), created_at: z.string(), level: z.string(), type: z.string(), message: z.string(), data: z.unknown() }),
  }),
  z.object({ type: z.literal('job.log'), topic: z.string().describe('job:<id>:logs'), text: z.string().describe('whole lines of output') }),
  z.object({ type: z.literal('job.end'), topic: z.string().describe('job:<id> or job:<id>:logs'), status: z.string(), message: z.string().nullable() }),
  z.object({ type: z.literal('pipeline.event'), topic: z.string().describe('pipeline:<id>'), event: z.record(z.string(), z.unknown()) }),
  z.object({
    type: z.literal('run.metrics'),
    topic: z.string().describe('run:<id>:metrics'),
    step: z.number().int(),
    metrics: z.record(z.string(), z.number().nullable()).describe('the points of one step; null for NaN'),
    timestamp: z.string(),
  }),
  z.object({ type: z.literal('error'), topic: z.string(), message: z.string().describe('why this subject stopped (gone, or no longer readable)') }),
]);
export type StreamEvent = z.infer<typeof StreamEventSchema>;

// ---------------------------------------------------------------------------------------------------------------
// Memory estimate

/** Device memory of the GPUs the console offers, in GiB as the trainer counts it (hardware.device_memory_gb x 2^30). */
export const GPU_MEMORY_GB = {
  'nvidia-t4': 16,
  'nvidia-l4': 24,
  'nvidia-a10g': 24,
  'nvidia-rtx-4090': 24,
  'nvidia-l40s': 48,
  'nvidia-a100-40gb': 40,
  'nvidia-a100-80gb': 80,
  'nvidia-h100-80gb': 80,
  'nvidia-h200': 141,
  'nvidia-b200': 192,
} as const satisfies Record<string, number>;
export const GPU_NAMES = Object.keys(GPU_MEMORY_GB) as [keyof typeof GPU_MEMORY_GB, ...(keyof typeof GPU_MEMORY_GB)[]];

export const MemoryEstimateRequestSchema = z.strictObject({
  base_model: z.string().min(1).describe("the trainer's known architectures (hanzo-tiny-llama, zen-7b, zen-72b) or a base model of the base-models directory"),
  method: TrainMethodSchema.default('lora'),
  hyperparameters: LoraHyperparametersSchema.extend({
    learning_rate: LoraHyperparametersSchema.shape.learning_rate.default(2e-3),
    max_steps: LoraHyperparametersSchema.shape.max_steps.default(200),
    batch_size: LoraHyperparametersSchema.shape.batch_size.default(8),
  }).prefault({}),
  gpu: z
    .strictObject({
      name: z.enum(GPU_NAMES).optional().describe('a GPU of the list; its memory is known'),
      memory_gb: z.number().positive().max(10_000).optional().describe('device memory in GiB (as hardware.device_memory_gb), for a GPU not in the list; with name, it wins'),
      count: z.number().int().positive().max(1024).default(1).describe('GPUs per node'),
      nodes: z.number().int().positive().max(1024).default(1),
      strategy: z.enum(['ddp', 'fsdp', 'deepspeed_zero2', 'deepspeed_zero3']).default('ddp'),
      precision: z.enum(['auto', 'fp32', 'bf16']).default('auto'),
    })
    .refine((g) => g.name !== undefined || g.memory_gb !== undefined, { message: 'give name or memory_gb', path: ['name'] }),
  quantization: z.strictObject({ double_quant: z.boolean().default(true) }).optional().describe('qlora: NF4 with or without double quantization'),
  data: z.strictObject({ packing: z.boolean().default(false) }).prefault({}).describe('packing: chat examples packed into max_seq_length rows (FlexAttention then stores no attention scores)'),
});
export type MemoryEstimateRequest = z.infer<typeof MemoryEstimateRequestSchema>;

export const MemoryEstimateSchema = z.object({
  /** bytes per device, as the trainer's estimator (trainer/hanzo_ml/memory.py) computes them */
  breakdown: z.object({
    weights: z.number().int(),
    adapter: z.number().int(),
    gradients: z.number().int(),
    optimizer: z.number().int(),
    activations: z.number().int(),
    overhead: z.number().int(),
  }),
  total_bytes: z.number().int(),
  device_memory_bytes: z.number().int(),
  devices: z.number().int(),
  trainable_params: z.number().int(),
  /** the largest micro-batch that fits one device (0: not even one example) */
  max_micro_batch: z.number().int().nonnegative(),
  tokens: z.number().int(),
  fits: z.boolean().describe('the job as asked (micro-batch = batch_size) fits one device'),
  verdict: z.string().describe('one sentence for the page: fits, or what would'),
});
export type MemoryEstimate = z.infer<typeof MemoryEstimateSchema>;

// ---------------------------------------------------------------------------------------------------------------
// Queues and usage page (GET /v1/queues, GET /v1/usage?months=)

/** A job of the catalogue that holds or waits for GPUs: queued (validating included), running or paused. */
export const QueueActiveJobSchema = z.object({
  id: z.string(),
  name: z.string(),
  type: z.string(),
  status: z.string(),
  gpus: z.number().int().nonnegative().describe('GPUs it holds or asks for, all nodes together'),
  gpu_type: z.string().nullable().describe('null: any type'),
  position: z.number().int().positive().nullable().describe('queued: its place in the queue (1 = next)'),
  reason: z.string().nullable().describe('queued: why it waits'),
  created_at: z.string(),
  started_at: z.string().nullable(),
});
export type QueueActiveJob = z.infer<typeof QueueActiveJobSchema>;

/** An organization's GPUs of one type: its nominal quota (null: none configured) and what its running jobs hold. */
export const QueueGpuTypeSchema = z.object({ gpu_type: z.string().describe('"any": jobs that asked for no type'), quota: z.number().int().nonnegative().nullable(), in_use: z.number().int().nonnegative() });
export type QueueGpuType = z.infer<typeof QueueGpuTypeSchema>;

/** What each organization of GET /v1/queues adds to the queue's own view: the catalogue's jobs and GPUs per type. */
export const QueueCatalogueSchema = z.object({
  active_jobs: z.array(QueueActiveJobSchema).describe('running first, then waiting in queue order; empty for totals_only'),
  gpu_types: z.array(QueueGpuTypeSchema),
});
export type QueueCatalogue = z.infer<typeof QueueCatalogueSchema>;

// Request bodies of the MLflow tracking REST API (mlflow/protos/service.proto), as the stock client sends them:
// snake_case fields, int64 as numbers or numeric strings, doubles as numbers or "NaN"/"Infinity"/"-Infinity".
import { z } from 'zod';

export const Int64Schema = z
  .union([z.number().int(), z.string().regex(/^-?\d+$/, 'expected an integer').transform(Number)])
  .refine((n) => Number.isSafeInteger(n), 'expected an integer within ±2^53');
/** Milliseconds since the epoch, within what a timestamp column holds. */
export const EpochMsSchema = Int64Schema.refine((n) => n >= 0 && n <= 8.64e15, 'expected milliseconds since the epoch (0 to 8.64e15)');
export const MlflowDoubleSchema = z.union([
  z.number(),
  z.enum(['NaN', 'Infinity', '-Infinity']).transform((s) => (s === 'NaN' ? NaN : s === 'Infinity' ? Infinity : -Infinity)),
  z.string().regex(/^-?\d+(\.\d+)?([eE][-+]?\d+)?$/, 'expected a number').transform(Number),
]);
export const ViewTypeSchema = z.union([
  z.enum(['ACTIVE_ONLY', 'DELETED_ONLY', 'ALL']),
  z.union([z.literal(1), z.literal(2), z.literal(3), z.enum(['1', '2', '3'])]).transform((n) => (['ACTIVE_ONLY', 'DELETED_ONLY', 'ALL'] as const)[Number(n) - 1]!),
]);
export const RunStatusSchema = z.enum(['RUNNING', 'SCHEDULED', 'FINISHED', 'FAILED', 'KILLED']);

const id = (name: string) => z.string({ error: `Missing value for required parameter '${name}'.` }).min(1, `Missing value for required parameter '${name}'.`);
const KeyValueSchema = z.object({ key: z.string(), value: z.string().nullish().transform((v) => v ?? '') });
/** model_id and the dataset fields: a metric of a logged model, computed on that dataset (MLflow 3). */
const ModelMetricFields = { model_id: z.string().optional(), dataset_name: z.string().optional(), dataset_digest: z.string().optional() };
export const MetricSchema = z.object({ key: z.string(), value: MlflowDoubleSchema, timestamp: Int64Schema, step: Int64Schema.optional().default(0), ...ModelMetricFields });
export type MlflowMetric = z.infer<typeof MetricSchema>;

export const CreateExperimentSchema = z.object({ name: id('name'), artifact_location: z.string().optional(), tags: z.array(KeyValueSchema).default([]) });
export const ExperimentIdSchema = z.object({ experiment_id: id('experiment_id') });
export const ExperimentByNameSchema = z.object({ experiment_name: id('experiment_name') });
export const UpdateExperimentSchema = z.object({ experiment_id: id('experiment_id'), new_name: z.string().optional() });
export const DeleteExperimentTagSchema = z.object({ experiment_id: id('experiment_id'), key: id('key') });
export const SetExperimentTagSchema = z.object({ experiment_id: id('experiment_id'), key: id('key'), value: z.string().default('') });
export const SearchExperimentsSchema = z.object({
  max_results: Int64Schema.optional(),
  page_token: z.string().optional(),
  filter: z.string().optional(),
  order_by: z.array(z.string()).default([]),
  view_type: ViewTypeSchema.default('ACTIVE_ONLY'),
});

export const CreateRunSchema = z.object({
  experiment_id: z.string().optional(),
  user_id: z.string().optional(),
  start_time: EpochMsSchema.optional(),
  run_name: z.string().optional(),
  tags: z.array(KeyValueSchema).default([]),
});
/** MLflow 1.x clients send run_uuid; newer ones send run_id (often both). */
const runRef = <T extends z.ZodRawShape>(shape: T) =>
  z.preprocess(
    (b) => (b && typeof b === 'object' && !('run_id' in b) && 'run_uuid' in b ? { ...b, run_id: (b as { run_uuid: unknown }).run_uuid } : b),
    z.object({ run_id: id('run_id'), ...shape }),
  );
export const RunIdSchema = runRef({});
export const UpdateRunSchema = runRef({ status: RunStatusSchema.optional(), end_time: EpochMsSchema.optional(), run_name: z.string().optional() });
export const LogMetricSchema = runRef({ key: id('key'), value: MlflowDoubleSchema, timestamp: Int64Schema, step: Int64Schema.optional().default(0), ...ModelMetricFields });
export const LogParamSchema = runRef({ key: id('key'), value: z.string().nullish().transform((v) => v ?? '') });
export const SetTagSchema = runRef({ key: id('key'), value: z.string().nullish().transform((v) => v ?? '') });
export const DeleteTagSchema = runRef({ key: id('key') });
export const LogBatchSchema = z.object({
  run_id: id('run_id'),
  metrics: z.array(MetricSchema).default([]),
  params: z.array(KeyValueSchema).default([]),
  tags: z.array(KeyValueSchema).default([]),
});
export const SearchRunsSchema = z.object({
  experiment_ids: z.array(z.string()).default([]),
  filter: z.string().optional(),
  run_view_type: ViewTypeSchema.default('ACTIVE_ONLY'),
  max_results: Int64Schema.optional(),
  order_by: z.array(z.string()).default([]),
  page_token: z.string().optional(),
});
export const GetMetricHistorySchema = z.object({
  run_id: z.string().optional(),
  run_uuid: z.string().optional(),
  metric_key: id('metric_key'),
  max_results: Int64Schema.optional(),
  page_token: z.string().optional(),
});

/** Fields that a GET query string may repeat (lists). */
export const LIST_FIELDS = new Set(['experiment_ids', 'order_by', 'run_ids']);

// Request and response shapes of MLflow artifacts, dataset inputs, model outputs and logged models
// (service.proto LogInputs, LogOutputs, LoggedModel*, GetMetricHistoryBulkInterval; mlflow_artifacts.proto), and
// of the /v1 run artifact routes.
import { z } from 'zod';
import { Int64Schema } from './mlflow.js';

const required = (name: string) =>
  z.string({ error: `Missing value for required parameter '${name}'.` }).min(1, `Missing value for required parameter '${name}'.`);
const TagSchema = z.object({ key: z.string(), value: z.string().nullish().transform((v) => v ?? '') });

// ---- artifacts ----

export const ListArtifactsSchema = z.object({ run_id: z.string().optional(), run_uuid: z.string().optional(), path: z.string().optional(), page_token: z.string().optional() });
export const ProxyListSchema = z.object({ path: z.string().optional() });

export const FileInfoSchema = z.object({ path: z.string(), is_dir: z.boolean(), file_size: z.number().int().optional() });
export type FileInfo = z.infer<typeof FileInfoSchema>;

/** `POST /v1/runs/{id}/artifacts?path=<relative path>`: the body is the file's bytes. */
export const RunArtifactUploadQuerySchema = z.strictObject({ path: z.string({ error: 'path is required' }).min(1, 'path is required').max(1024) });
export const RunArtifactListQuerySchema = z.strictObject({ path: z.string().max(1024).optional() });
export const RunArtifactSchema = z.object({
  path: z.string().describe('path relative to the run artifact root'),
  size_bytes: z.number().int(),
  checksum: z.string().describe('"sha256:<hex>"'),
});
export const RunArtifactListSchema = z.object({ root_uri: z.string(), files: z.array(FileInfoSchema) });

// ---- dataset inputs and model outputs ----

export const DatasetSchema = z.object({
  name: required('dataset.name'),
  digest: required('dataset.digest'),
  source_type: required('dataset.source_type'),
  source: required('dataset.source'),
  schema: z.string().optional(),
  profile: z.string().optional(),
});
export const DatasetInputSchema = z.object({ tags: z.array(TagSchema).default([]), dataset: DatasetSchema });
export const LogInputsSchema = z.object({
  run_id: required('run_id'),
  datasets: z.array(DatasetInputSchema).default([]),
  models: z.array(z.object({ model_id: required('model_id') })).default([]),
});
export const LogOutputsSchema = z.object({
  run_id: required('run_id'),
  models: z.array(z.object({ model_id: required('model_id'), step: Int64Schema.optional().default(0) }), {
    error: "Missing value for required parameter 'models'.",
  }),
});

// ---- logged models ----

export const LOGGED_MODEL_STATUSES = ['LOGGED_MODEL_PENDING', 'LOGGED_MODEL_READY', 'LOGGED_MODEL_UPLOAD_FAILED'] as const;
export const LoggedModelStatusSchema = z.union([
  z.enum(LOGGED_MODEL_STATUSES),
  z.union([z.literal(1), z.literal(2), z.literal(3), z.enum(['1', '2', '3'])]).transform((n) => LOGGED_MODEL_STATUSES[Number(n) - 1]!),
]);
export type LoggedModelStatus = (typeof LOGGED_MODEL_STATUSES)[number];

export const CreateLoggedModelSchema = z.object({
  experiment_id: required('experiment_id'),
  name: z.string().optional(),
  model_type: z.string().optional(),
  source_run_id: z.string().optional(),
  params: z.array(TagSchema).default([]),
  tags: z.array(TagSchema).default([]),
});
export const FinalizeLoggedModelSchema = z.object({
  model_id: z.string().optional(),
  status: LoggedModelStatusSchema.optional(),
});
export const LoggedModelTagsSchema = z.object({ tags: z.array(TagSchema).default([]) });
export const LoggedModelParamsSchema = z.object({ params: z.array(TagSchema).default([]) });
export const SearchLoggedModelsSchema = z.object({
  experiment_ids: z.array(z.string()).min(1, "Missing value for required parameter 'experiment_ids'."),
  filter: z.string().optional(),
  datasets: z.array(z.object({ dataset_name: z.string().optional(), dataset_digest: z.string().optional() })).default([]),
  max_results: Int64Schema.optional(),
  order_by: z.array(z.object({ field_name: z.string(), ascending: z.boolean().default(true) })).default([]),
  page_token: z.string().optional(),
});
export const ListLoggedModelArtifactsSchema = z.object({ artifact_directory_path: z.string().optional() });

export const SearchDatasetsSchema = z.object({ experiment_ids: z.array(z.string()).optional() });

// ---- metric history for charts ----

export const MetricHistoryBulkIntervalSchema = z.object({
  run_ids: z.array(z.string()).min(1, "Missing value for required parameter 'run_ids'."),
  metric_key: required('metric_key'),
  start_step: Int64Schema.optional(),
  end_step: Int64Schema.optional(),
  max_results: Int64Schema.optional(),
});

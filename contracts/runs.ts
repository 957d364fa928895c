// /v1 runs (spec 000 "Experiment Tracking"): the bodies that create a run, log its parameters and set its status,
// and the run as GET /v1/runs/{id} returns it. Keys follow MLflow's rules (checked by the route, with MLflow's
// messages); lengths follow MLflow's limits so a run logged here reads the same through the MLflow API.
import { z } from 'zod';

/** Milliseconds since the epoch, or an ISO 8601 date-time, as milliseconds. */
export const EpochOrIsoSchema = z
  .union([
    z.number().int().min(0).max(8.64e15),
    z.iso.datetime({ offset: true }).transform((s) => Date.parse(s)),
  ])
  .describe('milliseconds since the epoch, or an ISO 8601 date-time');

/** Parameter values are strings; numbers and booleans are accepted and stored as their text. */
export const ParamValueSchema = z
  .union([z.string(), z.number(), z.boolean()])
  .transform((v) => String(v))
  .pipe(z.string().max(6000, 'a parameter value is at most 6000 characters'));
const ParamsSchema = z.record(z.string().min(1).max(250), ParamValueSchema);
const TagsSchema = z.record(z.string().min(1).max(250), z.string().max(8000, 'a tag value is at most 8000 characters'));

export const RunCreateSchema = z
  .strictObject({
    experiment_id: z.string().min(1).optional().describe('the experiment; "0" is the Default experiment'),
    experiment_name: z.string().min(1).max(500).optional().describe('the experiment by name, created when absent'),
    run_name: z.string().min(1).max(250).optional(),
    start_time: EpochOrIsoSchema.optional(),
    tags: TagsSchema.default({}),
    params: ParamsSchema.refine((p) => Object.keys(p).length <= 100, 'at most 100 parameters in one request').default({}),
  })
  .refine((b) => !(b.experiment_id && b.experiment_name), { message: 'give experiment_id or experiment_name, not both', path: ['experiment_name'] });
export type RunCreate = z.infer<typeof RunCreateSchema>;

export const RunParamsSchema = z.strictObject({
  params: ParamsSchema.refine((p) => Object.keys(p).length >= 1, 'at least one parameter').refine(
    (p) => Object.keys(p).length <= 100,
    'at most 100 parameters in one request',
  ),
});

/** MLflow's names (what the Python client sends) and the spec's names of the same states. */
export const RunStatusNameSchema = z.enum(['RUNNING', 'FINISHED', 'FAILED', 'KILLED', 'running', 'completed', 'failed', 'cancelled']);
export const RunStatusUpdateSchema = z.strictObject({
  status: RunStatusNameSchema,
  end_time: EpochOrIsoSchema.optional().describe('defaults to now for FINISHED, FAILED and KILLED; cleared for RUNNING'),
});

export const RunArtifactSchema = z.object({
  key: z.string(),
  path: z.string(),
  size_bytes: z.number().int(),
  sha256: z.string(),
  metadata: z.record(z.string(), z.unknown()),
});

export const RunSchema = z.object({
  id: z.string(),
  experiment_id: z.string(),
  name: z.string(),
  status: z.enum(['queued', 'running', 'completed', 'failed', 'cancelled']),
  lifecycle_stage: z.enum(['active', 'deleted']),
  start_time: z.string(),
  end_time: z.string().nullable(),
  user_id: z.string(),
  organization: z.string(),
  artifact_uri: z.string(),
  config: z.unknown(),
  params: z.record(z.string(), z.string()),
  tags: z.record(z.string(), z.string()),
  metrics: z.record(z.string(), z.object({ value: z.union([z.number(), z.enum(['NaN', 'Infinity', '-Infinity'])]), step: z.number().int(), timestamp: z.number().int() })),
  artifacts: z.array(RunArtifactSchema),
});
export type RunView = z.infer<typeof RunSchema>;

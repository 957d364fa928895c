// The model registry's shapes: /v1/models request and response bodies (spec 000), and the request bodies of
// MLflow's model-registry REST API (mlflow/protos/model_registry.proto) as the stock client sends them.
import { z } from 'zod';
import { Int64Schema } from './mlflow.js';

export const MODEL_STAGES = ['none', 'staging', 'production', 'archived'] as const;
export const ModelStageSchema = z.enum(MODEL_STAGES);
export type ModelStage = z.infer<typeof ModelStageSchema>;

/** A registered-model name: what MLflow accepts (no '/' or ':', a clean relative path), at most 256 characters. */
export const ModelNameSchema = z
  .string()
  .min(1, 'a model name is required')
  .max(256, 'a model name is at most 256 characters')
  .refine((s) => s.trim() !== '', 'a model name may not be blank')
  .refine((s) => !s.includes('/') && !s.includes(':'), "a model name cannot contain '/' or ':'");

const TagsSchema = z.record(z.string().min(1).max(250), z.string().max(100_000));

export const ModelCreateSchema = z.strictObject({
  name: ModelNameSchema,
  description: z.string().max(100_000).optional(),
  tags: TagsSchema.optional(),
});
export type ModelCreate = z.infer<typeof ModelCreateSchema>;

export const ModelVersionCreateSchema = z.strictObject({
  run_id: z.string().min(1, 'run_id is required'),
  artifact_path: z
    .string()
    .max(1000)
    .refine((p) => !p.startsWith('/') && !p.split('/').includes('..'), 'artifact_path must be a relative path inside the run\'s artifacts (no leading "/", no "..")'),
  tags: TagsSchema.optional(),
  description: z.string().max(100_000).optional(),
});
export type ModelVersionCreate = z.infer<typeof ModelVersionCreateSchema>;

export const StageChangeSchema = z.strictObject({
  stage: ModelStageSchema,
  reason: z.string().max(2000).optional(),
  override_reason: z
    .string()
    .trim()
    .min(1)
    .max(2000)
    .optional()
    .describe('admin only: why a version the promotion gate quarantined may go to staging or production anyway (audited)'),
});
export type StageChange = z.infer<typeof StageChangeSchema>;

export const RegisteredModelSchema = z.object({
  name: z.string(),
  description: z.string(),
  tags: z.record(z.string(), z.string()),
  created_at: z.string(),
  last_updated_at: z.string(),
});

export const ModelVersionSchema = z.object({
  name: z.string(),
  version: z.number().int(),
  stage: ModelStageSchema,
  run_id: z.string().nullable(),
  dataset_id: z.string().nullable(),
  source: z.string().nullable(),
  description: z.string(),
  architecture: z.string().nullable(),
  base_model: z.string().nullable(),
  method: z.string().nullable(),
  artifacts: z.record(z.string(), z.unknown()),
  metrics: z.record(z.string(), z.unknown()),
  training_config: z.record(z.string(), z.unknown()),
  lineage: z.record(z.string(), z.unknown()),
  tags: z.record(z.string(), z.string()),
  created_at: z.string(),
  created_by: z.string(),
  stage_changed_at: z.string(),
});

export const StageChangeResultSchema = z.object({ version: ModelVersionSchema, archived: z.array(z.number().int()) });

// ---- MLflow model-registry requests ----

const required = (name: string) => z.string({ error: `Missing value for required parameter '${name}'.` });
const KeyValueSchema = z.object({ key: z.string(), value: z.string().nullish().transform((v) => v ?? '') });
/** Versions travel as strings ("3"); a number is accepted too. */
const VersionSchema = z.union([z.string(), z.number().int().transform(String)], { error: "Missing value for required parameter 'version'." });

export const MlflowCreateModelSchema = z.object({ name: required('name'), tags: z.array(KeyValueSchema).default([]), description: z.string().optional() });
export const MlflowModelNameSchema = z.object({ name: required('name') });
export const MlflowRenameModelSchema = z.object({ name: required('name'), new_name: z.string().optional() });
export const MlflowUpdateModelSchema = z.object({ name: required('name'), description: z.string().optional() });
export const MlflowSearchSchema = z.object({
  filter: z.string().optional(),
  max_results: Int64Schema.optional(),
  order_by: z.array(z.string()).default([]),
  page_token: z.string().optional(),
});
export const MlflowLatestVersionsSchema = z.object({ name: required('name'), stages: z.array(z.string()).default([]) });
export const MlflowModelTagSchema = z.object({ name: required('name'), key: required('key'), value: z.string().nullish() });
export const MlflowModelTagKeySchema = z.object({ name: required('name'), key: required('key') });
export const MlflowAliasSchema = z.object({ name: required('name'), alias: z.string().default(''), version: VersionSchema });
export const MlflowAliasRefSchema = z.object({ name: required('name'), alias: z.string().default('') });

export const MlflowCreateVersionSchema = z.object({
  name: required('name'),
  source: required('source'),
  run_id: z.string().optional(),
  tags: z.array(KeyValueSchema).default([]),
  run_link: z.string().optional(),
  description: z.string().optional(),
  model_id: z.string().optional(),
});
export const MlflowVersionRefSchema = z.object({ name: required('name'), version: VersionSchema });
export const MlflowUpdateVersionSchema = z.object({ name: required('name'), version: VersionSchema, description: z.string().optional() });
export const MlflowTransitionSchema = z.object({
  name: required('name'),
  version: VersionSchema,
  stage: required('stage'),
  archive_existing_versions: z.union([z.boolean(), z.enum(['true', 'false']).transform((s) => s === 'true')]).default(false),
  comment: z.string().max(2000).optional().describe("as in MLflow's transition requests; from an admin, the override reason for a quarantined version"),
});
export const MlflowVersionTagSchema = z.object({ name: required('name'), version: VersionSchema, key: required('key'), value: z.string().nullish() });
export const MlflowVersionTagKeySchema = z.object({ name: required('name'), version: VersionSchema, key: required('key') });

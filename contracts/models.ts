// The model registry's shapes: /v1/models request and response bodies (spec 000), and the request bodies of
// MLflow's model-registry REST API (mlflow/protos/model_registry.proto) as the stock client sends them.
import { z } from 'zod';
import { Int64Schema } from './mlflow.js';

export const MODEL_STAGES = ['none', 'staging', 'production', 'archived'] as const;
export const ModelStageSchema = z.enum(MODEL_STAGES);
/** MLflow's ModelVersionStatus, lower-cased: files are copied while pending; only a ready version is pulled. */
export const REGISTRATION_STATUSES = ['pending_registration', 'ready', 'failed_registration'] as const;
export type RegistrationStatus = (typeof REGISTRATION_STATUSES)[number];
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
    .describe(
      'admin only: why a version the promotion gate quarantined, or one that never met an eval suite (ungated), may go to staging or production anyway (audited)',
    ),
});
export type StageChange = z.infer<typeof StageChangeSchema>;

/** POST /v1/models/{name}/versions/{n}/evaluate (`hanzo-ml model evaluate`): the eval job that gates a version. */
export const EvaluateVersionSchema = z.strictObject({
  base_model: z.string().min(1).optional().describe('the base model the adapter is compared with; default: the one the version records'),
  suite: z
    .string()
    .regex(/^[a-z0-9][a-z0-9-]*@\d+$/, "name@version of the organization's suite or a bundled one (recipes/eval/)")
    .optional()
    .describe("the eval suite (name@version); default: the eval job's"),
  dataset: z
    .strictObject({ name: z.string().min(1), version: z.union([z.number().int().positive(), z.literal('latest')]).default('latest') })
    .optional()
    .describe("the dataset version whose test split is scored; default: the one the version was trained on"),
});
export type EvaluateVersion = z.infer<typeof EvaluateVersionSchema>;

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
  status: z.enum(REGISTRATION_STATUSES).describe('pending_registration while the files are copied under the version\'s prefix, then ready or failed_registration'),
  status_message: z.string().nullable().describe('why the registration failed, naming the file; null otherwise'),
  checksum: z.string().nullable().describe("the version's checksum of record: its primary format's manifest checksum"),
  formats: z.array(z.string()).describe('the formats the version carries, primary first'),
  artifacts: z.record(z.string(), z.unknown()),
  metrics: z.record(z.string(), z.unknown()),
  training_config: z.record(z.string(), z.unknown()),
  lineage: z.record(z.string(), z.unknown()),
  tags: z.record(z.string(), z.string()),
  created_at: z.string(),
  created_by: z.string(),
  stage_changed_at: z.string(),
});

// ---- artifacts of record: each format of a version under {org}/{name}/v{version}/{format}/ with a manifest ----

/** A format name: `safetensors`, `lora`, `gguf-q8_0`, `gguf-q4_k_m`, ... (one path segment). */
export const FormatNameSchema = z.string().regex(/^[a-z0-9][a-z0-9._-]{0,63}$/, 'a format is lower-case letters, digits, ".", "_" and "-" (e.g. safetensors, gguf-q8_0)');

const Sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, 'a SHA-256 is 64 lower-case hex digits');

export const MODEL_MANIFEST_SCHEMA = 'hanzo-ml.model-manifest/v1';

/** One file of a format: its path relative to the format's prefix, size and SHA-256. */
export const ManifestFileSchema = z.strictObject({
  path: z
    .string()
    .min(1)
    .refine((p) => !p.startsWith('/') && !p.split('/').some((s) => s === '' || s === '.' || s === '..'), 'a manifest path is relative, without "", "." or ".." segments'),
  size_bytes: z.number().int().nonnegative(),
  sha256: Sha256Hex,
});

/** `manifest.json` of one format of a version: every file with its SHA-256; the format's checksum is this file's. */
export const ModelManifestSchema = z.strictObject({
  schema: z.literal(MODEL_MANIFEST_SCHEMA),
  model: z.string(),
  version: z.number().int().positive(),
  format: FormatNameSchema,
  architecture: z.string().nullable().describe('config.json architectures[0]'),
  base_model: z.string().nullable(),
  method: z.string().nullable().describe('the training method; for an adapter, checked against adapter_config.json peft_type'),
  files: z.array(ManifestFileSchema),
});
export type ModelManifest = z.infer<typeof ModelManifestSchema>;

/** A version's entry for one format (spec 000's artifacts map), with where its manifest is and how many files it lists. */
export const FormatArtifactSchema = z.object({
  path: z.string().describe("the format's prefix, ending in /"),
  size_bytes: z.number().int().nonnegative(),
  checksum: z.string().regex(/^sha256:[0-9a-f]{64}$/).describe('SHA-256 of manifest.json'),
  manifest: z.string(),
  files: z.number().int().nonnegative(),
});
export type FormatArtifact = z.infer<typeof FormatArtifactSchema>;

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

// ---- lineage of one version (GET /v1/models/{name}/versions/{version}/lineage): the console's graph ----

const LineageDatasetSchema = z.object({
  id: z.string(),
  name: z.string(),
  version: z.number().int(),
  sha256: z.string(),
  num_records: z.number().int(),
  created_at: z.string(),
});

/**
 * The chain behind one version, each link as the catalogue recorded it: the dataset version it was trained on (with
 * the versions that dataset was derived from), the pipeline and the jobs it ran, the tracked run, the run's
 * checkpoints, the version's formats and every stage it has been in. A link the version does not record is null
 * or empty (a version registered by hand from a run has no pipeline).
 */
export const ModelLineageSchema = z.object({
  name: z.string(),
  version: z.number().int(),
  stage: ModelStageSchema,
  dataset: LineageDatasetSchema.extend({ parents: z.array(LineageDatasetSchema).describe('the versions it was derived from (dataset lineage)') }).nullable(),
  pipeline: z.object({ id: z.string(), stage: z.string(), outcome: z.string().nullable(), created_at: z.string() }).nullable(),
  jobs: z
    .array(z.object({ id: z.string(), name: z.string(), type: z.string(), status: z.string(), run_id: z.string().nullable() }))
    .describe("the jobs that made the version: a pipeline's stages, oldest first, or the conversion job that registered it"),
  run: z.object({ id: z.string(), name: z.string(), status: z.string(), experiment_id: z.string().describe('as MLflow names it'), mlflow_path: z.string().describe('the run in the MLflow UI') }).nullable(),
  checkpoints: z.array(
    z.object({
      path: z.string(),
      step: z.number().int().nullable(),
      kind: z.string().describe('checkpoint or best_checkpoint'),
      sha256: z.string().describe("SHA-256 of the checkpoint's manifest"),
      size_bytes: z.number().int(),
    }),
  ),
  formats: z.array(z.object({ name: z.string(), checksum: z.string(), size_bytes: z.number().int(), files: z.number().int() })).describe('primary first'),
  stages: z
    .array(z.object({ stage: z.string(), from: z.string().nullable(), actor: z.string(), at: z.string(), reason: z.string() }))
    .describe('oldest first: the stage it was registered in, then each change with who made it and why'),
});
export type ModelLineage = z.infer<typeof ModelLineageSchema>;

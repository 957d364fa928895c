// Registering a model version's files of record runs as a Temporal activity, not in the request: the API (or the
// pipeline's register step) inserts the version pending (MLflow's PENDING_REGISTRATION) and answers; the copy and
// hash of every file then runs under `modelRegistrationWorkflow` (one small workflow per version, on the control
// queue) with heartbeats and a deadline sized to the bytes, and leaves the version ready or failed_registration
// with a message. Nothing here touches I/O: the workflow reads these shapes and the timeouts below.
import { z } from 'zod';
import { FormatNameSchema } from './models.js';

export const modelRegistrationWorkflowId = (versionId: string): string => `model-registration:${versionId}`;

export const RegistrationFileSchema = z.strictObject({
  uri: z.string().min(1).describe('where the file is now: an object URI of this store'),
  path: z.string().min(1).describe("its path inside the format (the manifest's path)"),
  size_bytes: z.number().int().nonnegative().optional().describe('its size when the caller listed it (sizes the deadline)'),
});

export const RegistrationFormatSchema = z.strictObject({
  format: FormatNameSchema,
  files: z.array(RegistrationFileSchema).min(1),
  /** path -> the SHA-256 the copy must have (a GGUF the Candle tool measured): another digest fails the registration */
  expect_sha256: z.record(z.string(), z.string()).default({}),
});

export const ModelDescriptionSchema = z.strictObject({
  architecture: z.string().nullable(),
  base_model: z.string().nullable(),
  method: z.string().nullable(),
});

export const ModelRegistrationInputSchema = z.strictObject({
  version_id: z.string().min(1),
  organization_id: z.string().min(1),
  model_name: z.string().min(1),
  version: z.number().int().positive(),
  formats: z.array(RegistrationFormatSchema).min(1),
  /** null: read from the files' config.json and adapter_config.json (files registered from a run or logged model) */
  description: ModelDescriptionSchema.nullable(),
  /** the format whose copy becomes the version's `source` (the pipeline's merged weights); null keeps the source */
  source_format: z.string().nullable().default(null),
  total_bytes: z.number().int().nonnegative(),
});
export type ModelRegistrationInput = z.input<typeof ModelRegistrationInputSchema>;

export const ModelRegistrationResultSchema = z.object({
  status: z.enum(['ready', 'failed_registration', 'deleted']),
  message: z.string().nullable(),
  artifacts: z.record(z.string(), z.unknown()),
  checksum: z.string().nullable(),
});
export type ModelRegistrationResult = z.infer<typeof ModelRegistrationResultSchema>;

/** The slowest copy we plan for: each byte is copied and read back to hash, at no less than this rate. */
const MIN_BYTES_PER_SECOND = 8 * 1024 * 1024;
/** Room for listing, manifests and a slow start, whatever the size. */
const BASE_SECONDS = 300;

/** The copy activity's deadline: a base plus the time its bytes take at the slowest rate planned for. */
export function registrationTimeoutSeconds(totalBytes: number): number {
  return BASE_SECONDS + Math.ceil(totalBytes / MIN_BYTES_PER_SECOND);
}

/** A copy that stops reporting for this long is presumed lost with its worker and retried elsewhere. */
export const REGISTRATION_HEARTBEAT_TIMEOUT = '1 minute';

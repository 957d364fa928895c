// Dataset preparation (spec 000 "Data Pipeline"): the operations a derived dataset version is made by, the job
// spec the trainer's `prepare-dataset` command reads, and the report it writes back. The API (derive), the
// pipeline's preprocess stage and the CLI all speak these shapes; Python reads the generated JSON Schema.
import { z } from 'zod';

const absPath = z.string().min(1).describe('absolute local path');

/** Formats a source can be in; `.gz` / `.zst` of any of them is recognised by the file name. */
export const SOURCE_FORMATS = ['auto', 'jsonl', 'csv', 'parquet', 'arrow', 'text', 'hf-datasets'] as const;
export const SourceFormatSchema = z
  .enum(SOURCE_FORMATS)
  .describe('auto: from the file name (.jsonl .json .csv .parquet .arrow .feather .txt, then .gz/.zst), a directory with dataset_info.json is hf-datasets');

export const PrepSourceSchema = z.strictObject({
  path: absPath.describe('a file or a directory of files (read in sorted name order)'),
  format: SourceFormatSchema.default('auto'),
  display_name: z.string().min(1).describe('the name errors give for this source (the uploaded file name)'),
  text_unit: z.enum(['line', 'file']).default('line').describe('text sources: a record per line or per file'),
  text_field: z.string().min(1).default('text').describe('columnar sources without messages: the column that holds plain text'),
});
export type PrepSource = z.infer<typeof PrepSourceSchema>;

export const PII_KINDS = ['email', 'phone', 'credit_card', 'iban', 'us_ssn', 'ipv4', 'ipv6', 'secret', 'url_credentials'] as const;
export const PiiKindSchema = z.enum(PII_KINDS);

export const MaskPiiOpSchema = z.strictObject({
  op: z.literal('mask_pii'),
  kinds: z.array(PiiKindSchema).min(1).default([...PII_KINDS]).describe('what to find; each match becomes [REDACTED:<kind>]'),
  tier: z.literal('rules').default('rules').describe('rules: patterns and checksums (Luhn, IBAN mod 97); names and addresses are not found'),
});

export const DedupExactOpSchema = z.strictObject({
  op: z.literal('dedup_exact'),
  against_parents: z.boolean().default(false).describe('also drop records equal to one in an earlier version of the dataset'),
});

export const DedupNearOpSchema = z
  .strictObject({
    op: z.literal('dedup_near'),
    shingle_words: z.number().int().min(1).max(32).default(5).describe('a shingle is this many consecutive words'),
    bands: z.number().int().min(1).max(64).default(14),
    rows: z.number().int().min(1).max(32).default(8).describe('bands x rows = number of MinHash permutations'),
    threshold: z.number().gt(0).max(1).default(0.72).describe('estimated Jaccard similarity at or above which a later record is a duplicate of a kept one'),
    seed: z.number().int().nonnegative().default(1).describe('MinHash permutations: the same seed and input give the same result'),
    against_parents: z.boolean().default(false).describe('also drop records near an earlier version of the dataset'),
  })
  .describe('MinHash LSH over word shingles of the whole conversation; the first of a near-duplicate group is kept');

export const FilterOpSchema = z
  .strictObject({
    op: z.literal('filter'),
    min_tokens: z.number().int().nonnegative().optional().describe("tokens of the rendered conversation (the job's tokenizer)"),
    max_tokens: z.number().int().positive().optional(),
    languages: z.array(z.string().regex(/^[a-z]{2}$/, 'ISO 639-1 code such as en')).min(1).optional().describe('keep records detected as one of these languages'),
    min_language_confidence: z.number().min(0).max(1).default(0.5),
  })
  .refine((f) => f.min_tokens !== undefined || f.max_tokens !== undefined || f.languages !== undefined, {
    message: 'give at least one of min_tokens, max_tokens, languages',
  })
  .refine((f) => f.min_tokens === undefined || f.max_tokens === undefined || f.min_tokens <= f.max_tokens, {
    message: 'min_tokens must not exceed max_tokens',
  });

export const AugmentOpSchema = z
  .strictObject({
    op: z.literal('augment'),
    shuffle_seed: z.number().int().nonnegative().optional().describe('reorder records deterministically'),
    oversample_minority: z
      .strictObject({ field: z.string().min(1).describe('a record field (outside messages) whose values are the classes') })
      .optional()
      .describe('repeat the records of each smaller class until it is as large as the largest'),
  })
  .refine((a) => a.shuffle_seed !== undefined || a.oversample_minority !== undefined, { message: 'give shuffle_seed or oversample_minority' });

export const TokenizeOpSchema = z
  .strictObject({
    op: z.literal('tokenize'),
    max_length: z.number().int().positive().max(131072).default(2048).describe('longer examples are truncated, as the trainer does'),
  })
  .describe("Arrow files of token ids per split, through the trainer's own chat template and packer; the trainer reads them instead of tokenizing again");

export const PrepOperationSchema = z.union([MaskPiiOpSchema, DedupExactOpSchema, DedupNearOpSchema, FilterOpSchema, AugmentOpSchema, TokenizeOpSchema]);
export type PrepOperation = z.infer<typeof PrepOperationSchema>;

export const PrepSplitSchema = z.strictObject({
  seed: z.number().int().nonnegative().default(42),
  train: z.number().min(0).max(1).default(0.8),
  validation: z.number().min(0).max(1).default(0.1),
  test: z.number().min(0).max(1).default(0.1),
});

/** `POST /v1/datasets/{id}/derive` and `hanzo-ml dataset derive`: a new version made from an existing one. */
export const DeriveRequestSchema = z.strictObject({
  name: z.string().min(1).max(128).regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/).optional().describe('default: the parent\'s name (a new version of it)'),
  operations: z.array(PrepOperationSchema).min(1).max(16).describe('applied in order'),
  split: PrepSplitSchema.nullable().default(null).describe("null: keep each record in its parent's split"),
  tokenizer: z.string().min(1).optional().describe("base model whose tokenizer counts, filters and tokenizes; default: the parent's"),
  tags: z.array(z.string().min(1)).default([]),
});
export type DeriveRequest = z.infer<typeof DeriveRequestSchema>;

// ---- the trainer's `prepare-dataset` command --------------------------------------------------

export const PrepareDatasetJobSpecSchema = z.strictObject({
  kind: z.literal('prepare-dataset'),
  job_name: z.string().min(1),
  sources: z
    .array(PrepSourceSchema)
    .min(1)
    .describe('raw input; or, deriving, the parent version\'s normalized split files (jsonl, each with split_of set)'),
  split_of: z
    .record(z.string(), z.enum(['train', 'validation', 'test']))
    .default({})
    .describe('display_name -> split: records of that source stay in that split when split is null'),
  parents: z.array(absPath).default([]).describe('normalized JSONL of earlier versions, for dedup against_parents'),
  operations: z.array(PrepOperationSchema).default([]),
  split: PrepSplitSchema.nullable().default(null),
  tokenizer_path: absPath.describe('a model directory with tokenizer.json (and its chat template)'),
  output_dir: absPath.describe('written: <split>.jsonl, and tokenized/<split>.arrow when a tokenize op ran; appears only when complete'),
  report_path: absPath.describe('where the PrepareReport JSON is written'),
  issues_path: absPath.describe('on bad input (exit code 2): where {"issues": PrepareIssue[]} is written, nothing in output_dir'),
  work_dir: absPath.describe('scratch space for disk-backed dedup buckets'),
  memory_budget_mb: z.number().int().min(64).default(1024).describe('peak memory the job keeps under, whatever the input size'),
  max_errors: z.number().int().positive().default(20),
  threads: z.number().int().positive().default(2),
});
export type PrepareDatasetJobSpec = z.infer<typeof PrepareDatasetJobSpecSchema>;

const SplitFileSchema = z.object({
  path: z.string().describe('relative to output_dir'),
  records: z.number().int().nonnegative(),
  size_bytes: z.number().int().nonnegative(),
  sha256: z.string().length(64),
  tokens: z.number().int().nonnegative(),
});

export const PrepOperationReportSchema = z.object({
  op: z.string(),
  params: z.record(z.string(), z.unknown()),
  records_in: z.number().int().nonnegative(),
  records_out: z.number().int().nonnegative(),
  removed: z.number().int().nonnegative(),
  added: z.number().int().nonnegative().describe('augment: records repeated'),
  details: z.record(z.string(), z.unknown()).describe('mask_pii: {redactions: {kind: count}}; dedup_near: {candidate_pairs, clusters}; filter: removed per reason'),
  seconds: z.number().nonnegative(),
});

export const PrepareReportSchema = z.object({
  records_in: z.number().int().nonnegative(),
  records_out: z.number().int().nonnegative(),
  schema: z.object({ form: z.enum(['messages', 'instruction', 'preference', 'text']).describe('the input\'s form (datasets/ingest/records.ts); text: plain text became one user-free assistant turn'), fields: z.array(z.string()) }),
  operations: z.array(PrepOperationReportSchema),
  splits: z.object({ train: SplitFileSchema, validation: SplitFileSchema, test: SplitFileSchema }),
  tokenized: z
    .object({ max_length: z.number().int(), splits: z.record(z.string(), z.object({ path: z.string(), rows: z.number().int(), tokens: z.number().int(), sha256: z.string().length(64) })) })
    .nullable(),
  tokenizer_sha256: z.string().length(64),
  sha256: z.string().length(64).describe('sha256 of the train, validation and test sha256 hex strings, concatenated (as the upload path)'),
  peak_rss_mb: z.number().nonnegative(),
  seconds: z.number().nonnegative(),
});
export type PrepareReport = z.infer<typeof PrepareReportSchema>;

/** prepare-dataset's progress.json while it reads (trainer/hanzo_ml/dataprep/progress.py), copied up by the job runner. */
export const PrepareProgressSchema = z.object({
  stage: z.literal('reading'),
  records_read: z.number().int().nonnegative(),
  bytes_read: z.number().int().nonnegative().nullable().describe('how far into the input files as stored (compressed bytes of .gz/.zst); null: not known'),
  bytes_total: z.number().int().nonnegative(),
  at: z.string(),
});
export type PrepareProgress = z.infer<typeof PrepareProgressSchema>;

/** The job's failure on bad input: what the API answers as a 4xx. */
export const PrepareIssueSchema = z.object({
  file: z.string(),
  record: z.number().int().nullable().describe('1-based line (text formats) or row (columnar formats)'),
  field: z.string().nullable(),
  message: z.string().describe('what was found and what was expected'),
});

// ---- the derive job -----------------------------------------------------------------------------

/** One preparation job per derived version: its workflow id, and the job's id in GET /v1/jobs. */
export const datasetPreparationWorkflowId = (datasetId: string): string => `dataset-preparation:${datasetId}`;

/** What `datasetPreparationWorkflow` is started with (POST /v1/datasets/{id}/derive). */
export const DatasetPreparationInputSchema = z.strictObject({
  organization_id: z.string(),
  requested_by: z.string(),
  job_id: z.string(),
  parent_id: z.string(),
  dataset_id: z.string().describe('the new version\'s id, chosen before the job runs so that a retry makes the same version'),
  name: z.string(),
  tokenizer: z.string().describe('the base model whose tokenizer counts, filters and tokenizes'),
  request: DeriveRequestSchema,
  heartbeat_timeout: z
    .string()
    .optional()
    .describe("temporal.heartbeat_timeout when the derive was asked for: a cancel reaches the job's activity within it; absent (older workflows): 2 minutes"),
  upload: z
    .strictObject({ raw_uri: z.string().min(1), format: SourceFormatSchema, display_name: z.string().min(1) })
    .optional()
    .describe('an upload: the raw file the request stored; the version (dataset_id, status preparing) exists and the job fills it in'),
});
export type DatasetPreparationInput = z.infer<typeof DatasetPreparationInputSchema>;

export const DatasetPreparationResultSchema = z.object({ dataset_id: z.string(), version: z.number().int(), sha256: z.string() });
export type DatasetPreparationResult = z.infer<typeof DatasetPreparationResultSchema>;

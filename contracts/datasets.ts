// Dataset versions (spec 000 "Dataset Schema").
import { z } from 'zod';
import { PrepareIssueSchema } from './data-prep.js';

/** The formats an upload can be in: jsonl and csv as the request checks them, the rest through prepare-dataset. */
export const UPLOAD_FORMATS = ['jsonl', 'csv', 'parquet', 'arrow', 'text'] as const;
export type UploadFormat = (typeof UPLOAD_FORMATS)[number];

/** preparing: stored raw, its preparation job runs; ready: splits and counts filled in; failed: see its issues. */
export const DATASET_STATUSES = ['preparing', 'ready', 'failed'] as const;
export type DatasetStatus = (typeof DATASET_STATUSES)[number];

export const SplitRatiosSchema = z
  .strictObject({ train: z.number().min(0).max(1), validation: z.number().min(0).max(1), test: z.number().min(0).max(1) })
  // Ratios like 0.7/0.2/0.1 do not sum to exactly 1 in floating point.
  .refine((r) => Math.abs(r.train + r.validation + r.test - 1) <= 1e-6, 'split ratios must sum to 1 (train + validation + test)');
export type SplitRatios = z.infer<typeof SplitRatiosSchema>;

/**
 * One problem in an upload or a preparation: the file, where in it (line for the text formats the request checks,
 * record for what the preparation job reads: a line or a row), the field, what was expected, and the whole message.
 */
export const DatasetIssueSchema = z.object({
  file: z.string(),
  line: z.number().int().nullable().optional().describe('1-based line (jsonl, csv checked in the request); 0 or null: the whole file'),
  record: z.number().int().nullable().optional().describe('1-based line or row (the preparation job)'),
  field: z.string().nullable(),
  expected: z.string().nullable().describe('what the field should have held, when the message says'),
  message: z.string(),
});
export type DatasetIssue = z.infer<typeof DatasetIssueSchema>;

export const DatasetSplitSchema = z.object({
  path: z.string(),
  num_records: z.number().int().nonnegative(),
  size_bytes: z.number().int().nonnegative(),
  sha256: z.string().length(64),
  tokens: z.number().int().nonnegative().nullable(),
});

export const DatasetSchema = z.object({
  id: z.string(),
  name: z.string(),
  version: z.number().int().positive(),
  organization: z.string(),
  created_at: z.string(),
  created_by: z.string(),
  storage_path: z.string(),
  format: z.enum(UPLOAD_FORMATS).describe("the uploaded file's format; a derived version's files are JSONL (jsonl)"),
  size_bytes: z.number().int().nonnegative(),
  num_records: z.number().int().nonnegative(),
  sha256: z.string().length(64),
  schema: z.record(z.string(), z.unknown()),
  splits: z.object({ train: DatasetSplitSchema, validation: DatasetSplitSchema, test: DatasetSplitSchema }).nullable().describe('null until the version is ready'),
  metadata: z.record(z.string(), z.unknown()),
  tags: z.array(z.string()),
  lineage: z.object({
    parent_datasets: z.array(z.string()),
    transform: z.string(),
    operations: z.array(z.record(z.string(), z.unknown())).optional().describe('derived: each operation with its params and counts (records_in, records_out, removed, added, details)'),
  }),
  status: z.enum(DATASET_STATUSES).describe('preparing: an upload stored raw while its preparation job runs (num_records, size_bytes and sha256 are the raw file\'s until ready); failed: see issues'),
  issues: z.array(DatasetIssueSchema).nullable().describe('failed: why, each by file, record and field'),
  job_id: z.string().nullable().describe('the preparation job that makes this version ready (GET /v1/jobs/{job_id})'),
});
export type Dataset = z.infer<typeof DatasetSchema>;

export const DatasetCreateQuerySchema = z.strictObject({
  name: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'letters, digits, ".", "_" and "-", starting with a letter or digit'),
  format: z
    .enum(UPLOAD_FORMATS, { error: `expected one of ${UPLOAD_FORMATS.join(', ')} (a HuggingFace datasets directory is several files and cannot be one upload: upload its data files, or derive from a version)` })
    .describe('jsonl, csv: checked in the request; parquet, arrow (IPC file or stream, Feather v2), text (a record per line): read by the trainer\'s prepare-dataset. A HuggingFace datasets directory is several files: it cannot be one upload (derive from a version instead)'),
  compression: z.enum(['none', 'gzip', 'zstd']).optional().describe('the body is compressed; default: from the x-filename header (.gz, .zst), else none'),
  seed: z.coerce.number().int().nonnegative().default(42),
  train: z.coerce.number().min(0).max(1).default(0.8),
  validation: z.coerce.number().min(0).max(1).default(0.1),
  test: z.coerce.number().min(0).max(1).default(0.1),
  tokenizer: z.string().optional().describe('base model whose tokenizer counts the tokens'),
  tags: z.string().optional().describe('comma-separated'),
  wait: z
    .enum(['true', 'false'])
    .default('false')
    .describe("false: answer 201 at once with the version preparing and its job_id; true: wait for that same preparation job (what older clients expect): 201 with the version ready, 400 with the job's issues, or 202 with the version still preparing when wait_seconds ran out"),
  wait_seconds: z.coerce.number().int().min(1).max(3600).default(240).describe('wait=true: how long the request waits for the preparation job (the default stays under the 300 s many HTTP clients wait for an answer)'),
});

export const SPLITS = ['train', 'validation', 'test'] as const;
export const SplitNameSchema = z.enum(SPLITS);
export type SplitName = z.infer<typeof SplitNameSchema>;

export const DatasetListQuerySchema = z.strictObject({
  name: z.string().optional(),
  tags: z.string().optional().describe('comma-separated: versions with any of these tags'),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
  offset: z.coerce.number().int().min(0).default(0),
});

export const PREVIEW_MAX_RECORDS = 100;
export const DatasetPreviewQuerySchema = z.strictObject({
  split: SplitNameSchema.default('train'),
  n: z.coerce.number().int().min(1).max(PREVIEW_MAX_RECORDS).default(10),
});

export const DatasetDownloadQuerySchema = z.strictObject({ split: SplitNameSchema.default('train') });

export const DatasetDownloadSchema = z.object({
  url: z.string().describe('GET it without a token until expires_at: a pre-signed S3 URL, or an API URL signed for the file store'),
  expires_at: z.string(),
  split: SplitNameSchema,
  sha256: z.string().length(64),
  size_bytes: z.number().int().nonnegative(),
});

/** How long a download URL stays valid. */
export const DOWNLOAD_URL_TTL_SECONDS = 900;

/** The answer to a derive: the preparation job runs; the version appears (GET /v1/datasets/{id}) once it is stored. */
export const DeriveAcceptedSchema = z.object({
  job_id: z.string().describe('GET /v1/jobs/{job_id}: type data_preparation, parent dataset:<parent id>'),
  dataset_id: z.string().describe('the id the new version will have; GET /v1/datasets/{dataset_id} answers 404 until it is stored'),
  workflow_id: z.string(),
});
export type DeriveAccepted = z.infer<typeof DeriveAcceptedSchema>;

/** A failed upload or preparation on bad input: each problem found, by file, record and field. */
export const DatasetIssuesSchema = z.object({ issues: z.array(DatasetIssueSchema) });

/**
 * `expected one of a, b, got "c"` -> `one of a, b`; `field is missing (expected string)` -> `string`: the
 * expectation a message states, if it states one.
 */
export function expectedOf(message: string): string | null {
  const m = /\bexpected ([^;]+?)(?:,? (?:got|but|found)\b|[;.]|$)/i.exec(message);
  return m ? unopenedCut(m[1]!.trim()) : null;
}

/** Text up to a closing parenthesis it did not open itself (the end of the parenthesis the expectation sits in). */
function unopenedCut(text: string): string {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '(') depth++;
    else if (text[i] === ')' && --depth < 0) return text.slice(0, i).trim();
  }
  return text;
}

/** The preparation job's issue in the API's shape. */
export const prepareIssueView = (i: z.infer<typeof PrepareIssueSchema>): DatasetIssue => ({ file: i.file, record: i.record, field: i.field, expected: expectedOf(i.message), message: i.message });

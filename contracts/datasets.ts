// Dataset versions (spec 000 "Dataset Schema").
import { z } from 'zod';

export const SplitRatiosSchema = z
  .strictObject({ train: z.number().min(0).max(1), validation: z.number().min(0).max(1), test: z.number().min(0).max(1) })
  // Ratios like 0.7/0.2/0.1 do not sum to exactly 1 in floating point.
  .refine((r) => Math.abs(r.train + r.validation + r.test - 1) <= 1e-6, 'split ratios must sum to 1 (train + validation + test)');
export type SplitRatios = z.infer<typeof SplitRatiosSchema>;

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
  format: z.enum(['jsonl', 'csv']),
  size_bytes: z.number().int().nonnegative(),
  num_records: z.number().int().nonnegative(),
  sha256: z.string().length(64),
  schema: z.record(z.string(), z.unknown()),
  splits: z.object({ train: DatasetSplitSchema, validation: DatasetSplitSchema, test: DatasetSplitSchema }),
  metadata: z.record(z.string(), z.unknown()),
  tags: z.array(z.string()),
  lineage: z.object({ parent_datasets: z.array(z.string()), transform: z.string() }),
});
export type Dataset = z.infer<typeof DatasetSchema>;

export const DatasetCreateQuerySchema = z.strictObject({
  name: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'letters, digits, ".", "_" and "-", starting with a letter or digit'),
  format: z.enum(['jsonl', 'csv']),
  seed: z.coerce.number().int().nonnegative().default(42),
  train: z.coerce.number().min(0).max(1).default(0.8),
  validation: z.coerce.number().min(0).max(1).default(0.1),
  test: z.coerce.number().min(0).max(1).default(0.1),
  tokenizer: z.string().optional().describe('base model whose tokenizer counts the tokens'),
  tags: z.string().optional().describe('comma-separated'),
});

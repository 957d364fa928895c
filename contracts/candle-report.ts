// The JSON report printed on stdout by the Rust Candle tool (`hanzo-ml-candle <verb> ... --json`).
// Exported as JSON Schema to contracts/generated/candle-report.schema.json; the Rust tests check against it.
import { z } from 'zod';

export const CandleOutputFileSchema = z.object({
  path: z.string(),
  size_bytes: z.number().int().nonnegative(),
  sha256: z.string().length(64),
});
export type CandleOutputFile = z.infer<typeof CandleOutputFileSchema>;

export const CandleCheckSchema = z.object({
  name: z.string().describe('e.g. "load", "finite_logits", "perplexity_agreement", "gguf_roundtrip"'),
  ok: z.boolean(),
  detail: z.string(),
});

const CandlePerplexitySchema = z.object({
  candle: z.number(),
  reference: z.number().nullable(),
  relative_diff: z.number().nullable(),
  tolerance: z.number(),
  threshold: z.number().nullable().describe('the absolute bound checked (check_perplexity_threshold), when one was given'),
  num_tokens: z.number().int(),
});

export const CandleReportSchema = z.object({
  command: z.enum(['validate', 'quantize']),
  ok: z.boolean().describe('true only when every check passed; the tool exits non-zero otherwise'),
  model_dir: z.string(),
  checks: z.array(CandleCheckSchema),
  perplexity: CandlePerplexitySchema.nullable().describe('held-out perplexity: the target (assistant) tokens when the file has a target_mask'),
  general_perplexity: CandlePerplexitySchema.nullable().describe('capability retention: perplexity on general text, every token scored'),
  quantization: z
    .object({ dtype: z.string(), tensors: z.number().int(), perplexity: z.number().nullable() })
    .nullable(),
  outputs: z.array(CandleOutputFileSchema),
  error: z.string().nullable(),
});
export type CandleReport = z.infer<typeof CandleReportSchema>;

// Cost before launch and spending after: the estimate a dry run answers, an organization's budget this month,
// and the monthly usage report (GET /v1/usage). The API, the CLI and the OpenAPI document read these shapes.
import { z } from 'zod';

export const CostEstimateSchema = z.object({
  tokens: z.number().int().nonnegative().describe('training tokens, counted as the trainer counts them (TrainResult.totals.tokens)'),
  steps: z.number().int().positive().describe('optimizer steps'),
  epochs: z.number().nonnegative().describe('passes over the training items the steps make'),
  train_items: z.number().int().nonnegative().describe('training examples, or packed rows with data.packing'),
  gpu_type: z.string().describe('the device type the job is accounted under: its gpu_type, "gpu" for none named, "cpu" for a CPU job'),
  gpu_hours: z.number().nonnegative().describe('device-hours: (startup_gpu_seconds + tokens / tokens_per_gpu_second) / 3600'),
  usd: z.number().nonnegative(),
  price_per_gpu_hour_usd: z.number().nonnegative(),
  tokens_per_gpu_second: z.number().positive(),
  startup_gpu_seconds: z
    .number()
    .nonnegative()
    .describe("device-seconds a job pays whatever its length (warm-up, compilation), fitted with the per-token cost to finished jobs' (tokens, device-hours); 0 with the config basis or when they cannot separate it"),
  basis: z.enum(['measured', 'config']).describe('measured: from finished jobs of the same gpu_type, method and base model; config: trainer.tokens_per_gpu_second'),
  samples: z.number().int().nonnegative().describe('finished jobs the measured throughput comes from'),
});
export type CostEstimate = z.infer<typeof CostEstimateSchema>;

export const BudgetStateSchema = z.object({
  monthly_budget_usd: z.number().nonnegative(),
  spent_usd: z.number().nonnegative().describe('cost of the jobs that finished this calendar month (UTC)'),
  left_usd: z.number().nonnegative(),
});
export type BudgetState = z.infer<typeof BudgetStateSchema>;

export const DryRunQuerySchema = z.object({
  dry_run: z.enum(['true', 'false']).optional().describe('true: answer the cost estimate and start nothing'),
});

export const PipelineDryRunSchema = z.object({
  dry_run: z.literal(true),
  estimate: CostEstimateSchema,
  budget: BudgetStateSchema.nullable().describe("null: the organization has no scheduler.monthly_budgets_usd entry"),
  fits_budget: z.boolean().nullable(),
});
export type PipelineDryRun = z.infer<typeof PipelineDryRunSchema>;

export const UsageQuerySchema = z.object({
  month: z
    .string()
    .regex(/^\d{4}-(0[1-9]|1[0-2])$/, 'expected YYYY-MM')
    .optional()
    .describe('calendar month (UTC); default the current one'),
  organization: z.string().optional().describe("one organization's usage: your own, or any for an admin of the operator organization"),
  months: z.coerce
    .number()
    .int()
    .min(1)
    .max(24)
    .optional()
    .describe('admins: also answer history, the totals of this many calendar months ending with month (the console\'s usage page)'),
});

/** One organization's totals of one month. */
export const MonthUsageSchema = z.object({
  organization_id: z.string(),
  gpu_hours: z.number().nonnegative().describe('device-hours of the train jobs that finished in the month'),
  cost_usd: z.number().nonnegative(),
  jobs: z.number().int().nonnegative(),
  monthly_budget_usd: z.number().nonnegative().nullable(),
});
export type MonthUsage = z.infer<typeof MonthUsageSchema>;

export const UsageReportSchema = z.object({
  month: z.string(),
  organizations: z.array(MonthUsageSchema),
  history: z
    .array(z.object({ month: z.string(), organizations: z.array(MonthUsageSchema) }))
    .optional()
    .describe('with months: one entry per month, oldest first, the last being month'),
});
export type UsageReport = z.infer<typeof UsageReportSchema>;

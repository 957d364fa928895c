// Evaluation suites (recipes/eval/<name>-v<version>.yaml) and the gate's decision recorded on a model version.
import { z } from 'zod';

/** Version tags the gate owns: set at registration when it fails, never by a tag call. */
export const QUARANTINE_TAG = 'quarantined';
export const QUARANTINE_REASON_TAG = 'quarantine_reason';
export const QUARANTINE_OVERRIDE_TAG = 'quarantine_override';
export const GATE_TAGS: readonly string[] = [QUARANTINE_TAG, QUARANTINE_REASON_TAG, QUARANTINE_OVERRIDE_TAG];

export const GateReferenceSchema = z.enum(['base', 'production']);
export type GateReference = z.infer<typeof GateReferenceSchema>;

/** The metrics each task measures; a metric of another task has no per-example scores to compare. */
export const TASK_METRICS = {
  test: ['exact_match', 'perplexity'],
  retention: ['perplexity'],
  instructions: ['pass_rate'],
} as const;

export const GateMetricSchema = z.strictObject({
  task: z
    .enum(['test', 'retention', 'instructions'])
    .describe("test: the dataset's test split; retention: the suite's general text; instructions: the suite's instruction set, checked by code"),
  metric: z.enum(['exact_match', 'perplexity', 'pass_rate']),
  direction: z.enum(['higher', 'lower']).describe('which way is better'),
  max_regression: z.number().min(0).describe('largest accepted relative regression against a reference: 0.05 = 5% worse'),
  against: z.array(GateReferenceSchema).min(1).default(['base', 'production']),
});
export type GateMetric = z.infer<typeof GateMetricSchema>;

export const EvalSuiteSchema = z
  .strictObject({
    name: z.string().regex(/^[a-z0-9][a-z0-9-]*$/),
    version: z.number().int().positive(),
    bootstrap: z
      .strictObject({
        resamples: z.number().int().min(100).max(100_000).default(1000),
        confidence: z.number().gt(0.5).lt(1).default(0.95),
        seed: z.number().int().nonnegative().default(0),
      })
      .prefault({}),
    general_text: z.string().min(1).nullable().default(null).describe('repository-relative plain-text file; required by a retention metric'),
    instructions: z
      .string()
      .min(1)
      .nullable()
      .default(null)
      .describe('repository-relative JSONL instruction set (trainer/hanzo_ml/instructions.py); required by an instructions metric'),
    metrics: z.array(GateMetricSchema).min(1),
  })
  .refine((s) => s.general_text !== null || !s.metrics.some((m) => m.task === 'retention'), { message: 'a retention metric needs general_text', path: ['general_text'] })
  .refine((s) => s.instructions !== null || !s.metrics.some((m) => m.task === 'instructions'), { message: 'an instructions metric needs instructions', path: ['instructions'] })
  .refine((s) => s.metrics.every((m) => (TASK_METRICS[m.task] as readonly string[]).includes(m.metric)), {
    message: `a task is measured by its own metrics: ${Object.entries(TASK_METRICS)
      .map(([task, metrics]) => `${task}: ${metrics.join(', ')}`)
      .join('; ')}`,
    path: ['metrics'],
  })
  .refine((s) => s.metrics.every((m) => (m.metric !== 'exact_match' && m.metric !== 'pass_rate') || m.direction === 'higher'), { message: 'exact_match and pass_rate are better when higher', path: ['metrics'] });
export type EvalSuite = z.infer<typeof EvalSuiteSchema>;

/** One metric, candidate against one reference, on the same examples. */
export const GateComparisonSchema = z.object({
  task: z.string(),
  metric: z.string(),
  against: GateReferenceSchema,
  candidate: z.number(),
  reference: z.number(),
  regression: z.number().describe('relative change for the worse: +0.10 = 10% worse, negative = better'),
  ci: z.tuple([z.number(), z.number()]).describe('paired bootstrap interval of `regression`'),
  significant: z.boolean().describe('the interval excludes 0: the difference is not noise at this confidence'),
  max_regression: z.number(),
  passed: z.boolean(),
});
export type GateComparison = z.infer<typeof GateComparisonSchema>;

export const GateDecisionSchema = z.object({
  suite: z.string().describe('name@version'),
  passed: z.boolean(),
  reason: z.string(),
  confidence: z.number(),
  resamples: z.number().int(),
  comparisons: z.array(GateComparisonSchema),
  production_version: z.number().int().nullable().describe('the production version compared against; null: none yet'),
  skipped: z.array(z.string()).describe('references the suite names that this job had no scores for (no production version yet)'),
});
export type GateDecision = z.infer<typeof GateDecisionSchema>;

// Evaluation suites (recipes/eval/<name>-v<version>.yaml) and the gate's decision recorded on a model version.
import { z } from 'zod';

/** Version tags the gate owns: set at registration when it fails, never by a tag call. */
export const QUARANTINE_TAG = 'quarantined';
export const QUARANTINE_REASON_TAG = 'quarantine_reason';
export const QUARANTINE_OVERRIDE_TAG = 'quarantine_override';
export const GATE_TAGS: readonly string[] = [QUARANTINE_TAG, QUARANTINE_REASON_TAG, QUARANTINE_OVERRIDE_TAG];

export const GateReferenceSchema = z.enum(['base', 'production']);
export type GateReference = z.infer<typeof GateReferenceSchema>;

export const GateMetricSchema = z.strictObject({
  task: z.enum(['test', 'retention']).describe("test: the dataset's test split; retention: the suite's general text"),
  metric: z.enum(['exact_match', 'perplexity']),
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
    metrics: z.array(GateMetricSchema).min(1),
  })
  .refine((s) => s.general_text !== null || !s.metrics.some((m) => m.task === 'retention'), { message: 'a retention metric needs general_text', path: ['general_text'] })
  .refine((s) => s.metrics.every((m) => m.task !== 'test' || m.metric !== 'exact_match' || m.direction === 'higher'), { message: 'exact_match is better when higher', path: ['metrics'] });
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

// Evaluation suites (bundled: recipes/eval/<name>-v<version>.yaml; an organization's own: registered through
// /v1/eval-suites) and the gate's decision recorded on a model version.
import { z } from 'zod';

/** Version tags the gate owns: set at registration when it fails, never by a tag call. */
export const QUARANTINE_TAG = 'quarantined';
export const QUARANTINE_REASON_TAG = 'quarantine_reason';
export const QUARANTINE_OVERRIDE_TAG = 'quarantine_override';
/** Set when a comparison's interval straddles its limit: the version waits for a human, who sees why. */
export const GATE_INCONCLUSIVE_TAG = 'gate_inconclusive';
/** Set when an admin let a version that never met a suite toward production anyway: the override's reason. */
export const GATE_OVERRIDE_TAG = 'gate_override';
export const GATE_TAGS: readonly string[] = [QUARANTINE_TAG, QUARANTINE_REASON_TAG, QUARANTINE_OVERRIDE_TAG, GATE_INCONCLUSIVE_TAG, GATE_OVERRIDE_TAG];

/** Seed 001: a fine-tune keeps more than 90% of the base model's capability. */
export const DEFAULT_MIN_RETENTION = 0.9;

export const GateReferenceSchema = z.enum(['base', 'production']);
export type GateReference = z.infer<typeof GateReferenceSchema>;

/** The metrics each task measures; a metric of another task has no per-example scores to compare. */
export const TASK_METRICS = {
  test: ['exact_match', 'perplexity'],
  retention: ['perplexity'],
  instructions: ['pass_rate'],
  safety: ['refusal_rate'],
} as const;

/**
 * A split of one of the organization's dataset versions used as a held-out set: `dataset` is NAME@VERSION or the
 * version's id. Its records are chat messages (a dataset version is normalised to them on upload).
 */
export const DatasetSplitRefSchema = z.strictObject({
  dataset: z.string().regex(/^([a-z0-9][a-z0-9._-]*@\d+|[0-9a-f-]{36})$/i, 'NAME@VERSION or a dataset version id'),
  split: z.enum(['train', 'validation', 'test']).default('test'),
});
export type DatasetSplitRef = z.infer<typeof DatasetSplitRefSchema>;

/** A held-out set: a repository-relative file bundled with the product, or a split of a dataset version. */
const HeldoutSchema = z.union([z.string().min(1), DatasetSplitRefSchema]);
export type Heldout = z.infer<typeof HeldoutSchema>;

export const GateMetricSchema = z.strictObject({
  task: z
    .enum(['test', 'retention', 'instructions', 'safety'])
    .describe(
      "test: the suite's test split (default: the pipeline's dataset's); retention: the suite's general text; instructions: the suite's " +
        'instruction set, checked by code; safety: prompts whose expected answer is a refusal, checked by code',
    ),
  metric: z.enum(['exact_match', 'perplexity', 'pass_rate', 'refusal_rate']),
  direction: z.enum(['higher', 'lower']).describe('which way is better'),
  max_regression: z
    .number()
    .min(0)
    .optional()
    .describe('task metrics: largest accepted relative regression against a reference: 0.05 = 5% worse'),
  min_retention: z
    .number()
    .gt(0)
    .max(1)
    .optional()
    .describe(
      'retention metrics: the share of the reference\'s capability the candidate keeps at least (candidate / reference; ' +
        `for perplexity reference / candidate): 0.9 = 90%. Default for a retention metric: ${DEFAULT_MIN_RETENTION}`,
    ),
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
    decide_by: z
      .enum(['estimate', 'interval'])
      .default('estimate')
      .describe(
        'estimate: a metric passes when its point estimate is within its limit (suites up to support-desk@2, kept as ' +
          'their decisions were made); interval: block when the whole confidence interval is beyond the limit, ' +
          'inconclusive (held for a human) when it straddles it, pass otherwise',
      ),
    test: DatasetSplitRefSchema.nullable()
      .default(null)
      .describe("a dataset version's split the test metrics are measured on; null: the test split of the dataset the pipeline trains on"),
    general_text: HeldoutSchema.nullable()
      .default(null)
      .describe(
        'general text of the domain: a repository-relative plain-text file (documents separated by blank lines), or a dataset ' +
          "version's split whose records are chat (each record's messages, joined, are one document); required by a retention metric",
      ),
    instructions: z
      .string()
      .min(1)
      .nullable()
      .default(null)
      .describe('repository-relative JSONL instruction set (trainer/hanzo_ml/instructions.py); required by an instructions metric'),
    safety: HeldoutSchema.nullable()
      .default(null)
      .describe(
        'prompts whose expected answer is a refusal (trainer/hanzo_ml/safety.py): a repository-relative chat JSONL file or a dataset ' +
          "version's split; a record ending with an assistant turn must have a refusal there; required by a safety metric",
      ),
    metrics: z.array(GateMetricSchema).min(1),
  })
  .refine((s) => s.general_text !== null || !s.metrics.some((m) => m.task === 'retention'), { message: 'a retention metric needs general_text', path: ['general_text'] })
  .refine((s) => s.instructions !== null || !s.metrics.some((m) => m.task === 'instructions'), { message: 'an instructions metric needs instructions', path: ['instructions'] })
  .refine((s) => s.safety !== null || !s.metrics.some((m) => m.task === 'safety'), { message: 'a safety metric needs safety', path: ['safety'] })
  .refine((s) => s.metrics.every((m) => (TASK_METRICS[m.task] as readonly string[]).includes(m.metric)), {
    message: `a task is measured by its own metrics: ${Object.entries(TASK_METRICS)
      .map(([task, metrics]) => `${task}: ${metrics.join(', ')}`)
      .join('; ')}`,
    path: ['metrics'],
  })
  .refine((s) => s.metrics.every((m) => m.metric === 'perplexity' || m.direction === 'higher'), { message: 'exact_match, pass_rate and refusal_rate are better when higher', path: ['metrics'] })
  .superRefine((s, ctx) => {
    s.metrics.forEach((m, i) => {
      if (m.max_regression !== undefined && m.min_retention !== undefined)
        ctx.addIssue({ code: 'custom', path: ['metrics', i], message: 'give max_regression or min_retention, not both' });
      if (m.task !== 'retention' && m.min_retention !== undefined)
        ctx.addIssue({ code: 'custom', path: ['metrics', i, 'min_retention'], message: 'min_retention is for retention metrics; a task metric is limited by max_regression' });
      if (m.task !== 'retention' && m.max_regression === undefined)
        ctx.addIssue({ code: 'custom', path: ['metrics', i, 'max_regression'], message: `a ${m.task} metric needs max_regression` });
      // A ratio against a score that can be zero is undefined: retention is measured by perplexity (always >= 1).
      if (m.task === 'retention' && m.metric !== 'perplexity')
        ctx.addIssue({ code: 'custom', path: ['metrics', i, 'metric'], message: 'a retention metric is a ratio to the base score, which must not be zero: use perplexity' });
    });
  });
export type EvalSuite = z.infer<typeof EvalSuiteSchema>;

/** How a metric's comparison is limited: a relative regression (task metrics) or a retention floor. */
export function gateLimitOf(m: GateMetric): { rule: 'max_regression' | 'min_retention'; limit: number } {
  if (m.max_regression !== undefined) return { rule: 'max_regression', limit: m.max_regression };
  return { rule: 'min_retention', limit: m.min_retention ?? DEFAULT_MIN_RETENTION };
}

/** One metric, candidate against one reference, on the same examples. */
export const GateComparisonSchema = z.object({
  task: z.string(),
  metric: z.string(),
  against: GateReferenceSchema,
  candidate: z.number(),
  reference: z.number(),
  regression: z.number().describe('relative change for the worse: +0.10 = 10% worse, negative = better; with a zero reference, the absolute change for the worse'),
  ci: z.tuple([z.number(), z.number()]).describe('paired bootstrap interval of the statistic the limit applies to: `regression`, or `retention` for a retention floor'),
  significant: z.boolean().describe('the interval of the difference excludes 0: the difference is not noise at this confidence'),
  max_regression: z.number().nullable(),
  passed: z.boolean(),
  // Added with support-desk@3's rules; absent from decisions recorded before.
  absolute: z.number().optional().describe('candidate - reference'),
  absolute_ci: z.tuple([z.number(), z.number()]).optional().describe('paired bootstrap interval of `absolute`'),
  relative: z.number().nullable().optional().describe('(candidate - reference) / reference; null when the reference is 0'),
  change: z.enum(['better', 'worse', 'same']).optional().describe('which way the candidate moved, by the metric\'s direction'),
  improved: z.boolean().optional().describe('an improvement whose interval excludes zero: the only kind the report claims'),
  rule: z.enum(['max_regression', 'min_retention']).optional(),
  limit: z.number().optional().describe('max_regression, or the retention floor'),
  retention: z.number().nullable().optional().describe('retention metrics: candidate / reference (perplexity: reference / candidate)'),
  verdict: z.enum(['pass', 'inconclusive', 'block']).optional(),
});
export type GateComparison = z.infer<typeof GateComparisonSchema>;

export const GateDecisionSchema = z.object({
  suite: z.string().describe('name@version'),
  passed: z.boolean().describe('verdict is pass'),
  verdict: z.enum(['pass', 'inconclusive', 'block']).optional().describe('block if any comparison blocks, else inconclusive if any is, else pass'),
  reason: z.string(),
  confidence: z.number(),
  resamples: z.number().int(),
  comparisons: z.array(GateComparisonSchema),
  production_version: z.number().int().nullable().describe('the production version compared against; null: none yet'),
  skipped: z.array(z.string()).describe('references the suite names that this job had no scores for (no production version yet)'),
});
export type GateDecision = z.infer<typeof GateDecisionSchema>;

/** A decision's verdict; one recorded before verdicts existed passed or blocked. */
export function gateVerdict(g: Pick<GateDecision, 'passed' | 'verdict'>): 'pass' | 'inconclusive' | 'block' {
  return g.verdict ?? (g.passed ? 'pass' : 'block');
}

/** A suite as the API shows it: an organization's own (registered through /v1/eval-suites) or a bundled one. */
export const EvalSuiteViewSchema = z.object({
  suite: z.string().describe('name@version, as a pipeline names it'),
  name: z.string(),
  version: z.number().int().positive(),
  source: z.enum(['organization', 'bundled']).describe("organization: the caller's organization's own, found first; bundled: recipes/eval/, readable by every organization"),
  created_at: z.string().nullable().describe('null for a bundled suite'),
  created_by: z.string().nullable().describe('null for a bundled suite'),
  definition: z.record(z.string(), z.unknown()).describe('the suite as checked, defaults filled in (EvalSuiteSchema)'),
});
export type EvalSuiteView = z.infer<typeof EvalSuiteViewSchema>;

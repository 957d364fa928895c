// The promotion gate over per-example scores (lib/eval-gate.ts) and the suites it reads (recipes/eval/): every
// comparison against base and production, per-metric thresholds, and a paired bootstrap interval that says
// whether a difference is noise. The scores are built here; the eval job that measures them is tested in
// trainer/tests/test_evaluate.py and end to end in test/gate-quarantine.test.ts.
import { describe, expect, it } from 'vitest';
import { EvalSuiteSchema, type EvalSuite } from '../contracts/eval-suite.js';
import type { EvalScores, ExampleScores } from '../contracts/trainer-job.js';
import { evalGate, pairedBootstrap } from '../lib/eval-gate.js';
import { loadEvalSuite } from '../lib/eval-suites.js';

/** n test examples (NLL per example over 2 tokens, exact match) and m general-text documents of 10 tokens. */
function model(p: { exact: number[]; testNll: number[]; generalNll: number[] }): ExampleScores {
  return {
    test: { nll: p.testNll.map((x) => 2 * x), tokens: p.testNll.map(() => 2), exact_match: p.exact },
    general: { nll: p.generalNll.map((x) => 10 * x), tokens: p.generalNll.map(() => 10) },
  };
}

/** Deterministic "noise": a fixed wobble per example. */
const wobble = (n: number, scale: number, offset = 0) => Array.from({ length: n }, (_, i) => offset + scale * Math.sin(1.7 * i + 0.3));

const suite = (over: Partial<Record<'exact' | 'ppl' | 'retention', number>> = {}): EvalSuite =>
  EvalSuiteSchema.parse({
    name: 'unit',
    version: 1,
    general_text: 'examples/heldout/general-text.txt',
    metrics: [
      { task: 'test', metric: 'exact_match', direction: 'higher', max_regression: over.exact ?? 0.05 },
      { task: 'test', metric: 'perplexity', direction: 'lower', max_regression: over.ppl ?? 0.1 },
      { task: 'retention', metric: 'perplexity', direction: 'lower', max_regression: over.retention ?? 0.1 },
    ],
  });

const N = 120;
const base = model({ exact: wobble(N, 0).map(() => 0), testNll: wobble(N, 0.3, 4), generalNll: wobble(60, 0.2, 0.6) });

describe('eval gate', () => {
  it('quarantines a candidate that regresses on retention even though it beats base on the task', () => {
    const candidate = model({ exact: wobble(N, 0).map((_, i) => (i % 5 === 0 ? 0 : 1)), testNll: wobble(N, 0.3, 0.5), generalNll: wobble(60, 0.2, 1.4) });
    const gate = evalGate(suite(), { models: { base, tuned: candidate } });
    expect(gate.passed).toBe(false);
    const byKey = Object.fromEntries(gate.comparisons.map((c) => [`${c.task}/${c.metric}/${c.against}`, c]));
    expect(byKey['test/exact_match/base']).toMatchObject({ candidate: 0.8, reference: 0, passed: true });
    expect(byKey['test/perplexity/base']!.passed).toBe(true);
    expect(byKey['test/perplexity/base']!.regression).toBeLessThan(-0.9); // far better than base on the task
    const retention = byKey['retention/perplexity/base']!;
    expect(retention.passed).toBe(false);
    expect(retention.regression).toBeCloseTo(Math.exp(0.8) - 1, 6); // exp(1.4) / exp(0.6) - 1
    expect(retention.significant).toBe(true);
    expect(retention.ci[0]).toBeGreaterThan(0.1);
    expect(gate.reason).toMatch(/^regression: retention\/perplexity vs base: 4\.05\d\d vs 1\.82\d\d \(\+122\.6% worse, 95% CI \[\+\d+\.\d%, \+\d+\.\d%\]\) > \+10\.0% allowed$/);
    expect(gate.skipped).toEqual(['production']); // no production version scored: nothing to compare with
  });

  it('passes a candidate equal to production within noise only when the threshold allows the difference', () => {
    const production = model({ exact: wobble(N, 0).map((_, i) => (i % 4 === 0 ? 0 : 1)), testNll: wobble(N, 0.3, 0.5), generalNll: wobble(60, 0.2, 0.65) });
    // The same model but for 3 answers in 120 and a hair of perplexity: a difference of the size noise makes.
    const candidate = model({
      exact: production.test.exact_match.map((x, i) => (i === 1 || i === 2 || i === 3 ? 0 : x)),
      testNll: wobble(N, 0.3, 0.505),
      generalNll: wobble(60, 0.2, 0.652),
    });
    const scores: EvalScores = { models: { base, tuned: candidate, production } };
    const strict = evalGate(suite({ exact: 0 }), scores, 7);
    const lenient = evalGate(suite({ exact: 0.05 }), scores, 7);
    const em = (g: typeof strict) => g.comparisons.find((c) => c.metric === 'exact_match' && c.against === 'production')!;
    expect(em(strict).regression).toBeCloseTo(3 / 90, 6); // 87/120 vs 90/120
    expect(em(strict).significant).toBe(false); // the interval straddles 0: noise, and reported as such
    expect(em(strict).ci[0]).toBeLessThanOrEqual(0);
    expect(strict.passed).toBe(false);
    expect(strict.reason).toContain('test/exact_match vs production: 0.7250 vs 0.7500');
    expect(strict.reason).toContain('within noise');
    expect(lenient.passed).toBe(true);
    expect(lenient.production_version).toBe(7);
    expect(lenient.comparisons).toHaveLength(6);
  });

  it('computes a reproducible paired interval that contains the point estimate', () => {
    const candidate = model({ exact: wobble(N, 0).map(() => 1), testNll: wobble(N, 0.3, 3.8), generalNll: wobble(60, 0.2, 0.62) });
    const m = suite().metrics[2]!;
    const b = suite().bootstrap;
    const a1 = pairedBootstrap(candidate, base, m, b, 3);
    expect(pairedBootstrap(candidate, base, m, b, 3)).toEqual(a1);
    expect(a1[0]).toBeLessThan(Math.exp(0.02) - 1);
    expect(a1[1]).toBeGreaterThan(Math.exp(0.02) - 1);
    // Paired: the per-document difficulty cancels, so the interval is far tighter than the spread of documents.
    expect(a1[1] - a1[0]).toBeLessThan(0.01);
  });

  it('loads the bundled suites and names the file and field of a broken one', async () => {
    // v1 keeps the metrics its recorded decisions were made on; v2 adds instruction following.
    const v1 = await loadEvalSuite('support-desk@1');
    expect(v1.metrics.map((m) => `${m.task}/${m.metric}`)).toEqual(['test/exact_match', 'test/perplexity', 'retention/perplexity']);
    expect(v1.instructions).toBeNull();
    const s = await loadEvalSuite('support-desk@2');
    expect(s.metrics.map((m) => `${m.task}/${m.metric}`)).toEqual(['test/exact_match', 'test/perplexity', 'retention/perplexity', 'instructions/pass_rate']);
    expect(s.general_text).toBe('examples/heldout/general-text.txt');
    expect(s.instructions).toBe('examples/heldout/instructions.jsonl');
    await expect(loadEvalSuite('support-desk@9')).rejects.toThrow(/support-desk-v9\.yaml does not exist/);
    await expect(loadEvalSuite('Support Desk')).rejects.toThrow(/expected name@version/);
    expect(EvalSuiteSchema.safeParse({ name: 'x', version: 1, metrics: [{ task: 'retention', metric: 'perplexity', direction: 'lower', max_regression: 0.1 }] }).error?.issues[0]?.path).toEqual(['general_text']);
  });

  describe('over the instruction set', () => {
    /** Pass (1) or fail (0) per prompt of the instruction set, with the ids the eval job writes. */
    const followed = (pass: number[], ids = pass.map((_, i) => `if-${i}`)): ExampleScores['instructions'] => ({
      id: ids,
      kind: pass.map((_, i) => (i % 2 ? 'max_words' : 'lowercase')),
      answer: pass.map((p) => (p ? 'shipping' : 'The shipping team will')),
      pass,
    });
    const withInstructions = (m: ExampleScores, pass: number[], ids?: string[]): ExampleScores => ({ ...m, instructions: followed(pass, ids) });
    const instructionSuite = (maxRegression: number): EvalSuite =>
      EvalSuiteSchema.parse({
        name: 'unit',
        version: 1,
        instructions: 'examples/heldout/instructions.jsonl',
        metrics: [{ task: 'instructions', metric: 'pass_rate', direction: 'higher', max_regression: maxRegression }],
      });
    const M = 64;
    const rate = (k: number) => Array.from({ length: M }, (_, i) => (i % 8 < k ? 1 : 0)); // k in 8 followed

    it('passes a candidate that follows more instructions than base and quarantines one that follows fewer than production', () => {
      const scores: EvalScores = { models: { base: withInstructions(base, rate(2)), tuned: withInstructions(base, rate(4)), production: withInstructions(base, rate(7)) } };
      const gate = evalGate(instructionSuite(0.1), scores, 3);
      const vs = (against: string) => gate.comparisons.find((c) => c.against === against)!;
      expect(vs('base')).toMatchObject({ task: 'instructions', metric: 'pass_rate', candidate: 0.5, reference: 0.25, passed: true });
      expect(vs('base').regression).toBeCloseTo(-1, 6); // twice base's rate: 100% better
      expect(vs('production')).toMatchObject({ candidate: 0.5, reference: 0.875, passed: false, significant: true });
      expect(vs('production').regression).toBeCloseTo(3 / 7, 6);
      expect(vs('production').ci[0]).toBeGreaterThan(0.2); // paired: 24 prompts lost, none won
      expect(gate.passed).toBe(false);
      expect(gate.reason).toMatch(/^regression: instructions\/pass_rate vs production: 0\.5000 vs 0\.8750 \(\+42\.9% worse, 95% CI \[\+\d+\.\d%, \+\d+\.\d%\]\) > \+10\.0% allowed$/);
    });

    it('calls a difference of one prompt in 64 noise, and lets the threshold decide', () => {
      const production = rate(6);
      const candidate = production.map((x, i) => (i === 0 ? 0 : x)); // one instruction fewer followed
      const scores: EvalScores = { models: { base: withInstructions(base, rate(0)), tuned: withInstructions(base, candidate), production: withInstructions(base, production) } };
      const strict = evalGate(instructionSuite(0), scores);
      const lenient = evalGate(instructionSuite(0.05), scores);
      const vs = (g: typeof strict) => g.comparisons.find((c) => c.against === 'production')!;
      expect(vs(strict).regression).toBeCloseTo(1 / 48, 6);
      expect(vs(strict).significant).toBe(false);
      expect(strict.passed).toBe(false);
      expect(lenient.passed).toBe(true);
      // base followed none: no reference to regress from, so the comparison cannot fail
      expect(lenient.comparisons.find((c) => c.against === 'base')).toMatchObject({ reference: 0, regression: 0, passed: true });
    });

    it('refuses to compare without instruction scores or on different prompts', () => {
      expect(() => evalGate(instructionSuite(0.1), { models: { base, tuned: withInstructions(base, rate(4)) } })).toThrow('instructions/pass_rate: candidate has 64 examples, base has 0; the gate compares the same examples');
      expect(() => evalGate(instructionSuite(0.1), { models: { base: withInstructions(base, rate(4)), tuned: base } })).toThrow('instructions/pass_rate: candidate has 0 examples, base has 64');
      const other = rate(4).map((_, i) => `other-${i}`);
      expect(() => evalGate(instructionSuite(0.1), { models: { base: withInstructions(base, rate(4), other), tuned: withInstructions(base, rate(4)) } })).toThrow(
        'instructions/pass_rate: candidate and base were scored on different prompts; the gate compares the same examples',
      );
    });

    it('needs the instruction file and the metric that measures it', () => {
      const issue = (metric: object, extra: object = {}) => EvalSuiteSchema.safeParse({ name: 'x', version: 1, ...extra, metrics: [{ direction: 'higher', max_regression: 0.1, ...metric }] }).error?.issues[0];
      expect(issue({ task: 'instructions', metric: 'pass_rate' })).toMatchObject({ path: ['instructions'], message: 'an instructions metric needs instructions' });
      const file = { instructions: 'examples/heldout/instructions.jsonl' };
      expect(issue({ task: 'instructions', metric: 'exact_match' }, file)?.message).toMatch(/^a task is measured by its own metrics: .*instructions: pass_rate/);
      expect(issue({ task: 'test', metric: 'pass_rate' }, file)?.message).toMatch(/^a task is measured by its own metrics/);
      expect(issue({ task: 'instructions', metric: 'pass_rate', direction: 'lower' }, file)?.message).toBe('exact_match and pass_rate are better when higher');
      expect(issue({ task: 'instructions', metric: 'pass_rate' }, file)).toBeUndefined();
    });
  });
});

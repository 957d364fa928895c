// The promotion gate over per-example scores (lib/eval-gate.ts) and the suites it reads (recipes/eval/): every
// comparison against base and production, per-metric thresholds, and a paired bootstrap interval that says
// whether a difference is noise. The scores are built here; the eval job that measures them is tested in
// trainer/tests/test_evaluate.py and end to end in test/gate-quarantine.test.ts.
import { describe, expect, it } from 'vitest';
import { EvalSuiteSchema, type EvalSuite } from '../contracts/eval-suite.js';
import type { EvalScores, ExampleScores } from '../contracts/trainer-job.js';
import { describeComparison, evalGate, pairedBootstrap } from '../lib/eval-gate.js';
import { loadEvalSuite } from '../lib/eval-suites.js';
import { gateTags } from '../activities/registry.js';

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
    expect(gate.reason).toMatch(
      /^regression: retention\/perplexity vs base: 4\.05\d\d vs 1\.82\d\d: \+2\.2\d{3} absolute \(\+122\.6% relative\), worse, 95% CI \[\+\d\.\d{4}, \+\d\.\d{4}\]; at most \+10\.0% worse allowed \(worse by 95% CI \[\+\d+\.\d%, \+\d+\.\d%\]\) -> block$/,
    );
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
    expect(strict.reason).toContain('worse within noise');
    expect(lenient.passed).toBe(true);
    expect(lenient.production_version).toBe(7);
    expect(lenient.comparisons).toHaveLength(6);
  });

  it('computes a reproducible paired interval that contains the point estimate', () => {
    const candidate = model({ exact: wobble(N, 0).map(() => 1), testNll: wobble(N, 0.3, 3.8), generalNll: wobble(60, 0.2, 0.62) });
    const m = suite().metrics[2]!;
    const b = suite().bootstrap;
    const [a1] = pairedBootstrap(candidate, base, m, b, 3) as [[number, number]];
    expect(pairedBootstrap(candidate, base, m, b, 3)).toEqual([a1]);
    expect(a1![0]).toBeLessThan(Math.exp(0.02) - 1);
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

  it('blocks a candidate that stopped refusing the safety set, compared prompt by prompt', async () => {
    const v4 = await loadEvalSuite('support-desk@4');
    expect(v4.safety).toBe('examples/heldout/safety.jsonl');
    const safetyOnly = EvalSuiteSchema.parse({ ...v4, metrics: v4.metrics.filter((m) => m.task === 'safety') });
    const ids = Array.from({ length: 64 }, (_, i) => `safety-${i}`);
    const refusing = (share: number): ExampleScores => ({
      ...base,
      safety: { id: ids, answer: ids.map(() => ''), pass: ids.map((_, i) => (i < share * 64 ? 1 : 0)) },
    });
    const blocked = evalGate(safetyOnly, { models: { base: refusing(0.9), tuned: refusing(0.3) } });
    expect(blocked.comparisons[0]).toMatchObject({ task: 'safety', metric: 'refusal_rate', change: 'worse', verdict: 'block' });
    expect(blocked.verdict).toBe('block');
    expect(evalGate(safetyOnly, { models: { base: refusing(0.9), tuned: refusing(0.95) } }).verdict).toBe('pass');
    const shuffled = refusing(0.9);
    shuffled.safety!.id = [...ids].reverse();
    expect(() => evalGate(safetyOnly, { models: { base: refusing(0.9), tuned: shuffled } })).toThrow(/safety\/refusal_rate: candidate and base were scored on different prompts/);
    expect(EvalSuiteSchema.safeParse({ ...v4, safety: null }).error?.issues[0]).toMatchObject({ path: ['safety'], message: 'a safety metric needs safety' });
  });

  describe('by the rules of support-desk@3: honest changes, retention floors and significance', () => {
    /** A v3-style suite: the exact-match task metric and the general-text retention floor, decided by interval. */
    const v3 = (floor = 0.9): EvalSuite =>
      EvalSuiteSchema.parse({
        name: 'unit',
        version: 3,
        decide_by: 'interval',
        general_text: 'examples/heldout/general-text.txt',
        metrics: [
          { task: 'test', metric: 'exact_match', direction: 'higher', max_regression: 0.05, against: ['base'] },
          { task: 'retention', metric: 'perplexity', direction: 'lower', min_retention: floor, against: ['base'] },
        ],
      });
    /** A candidate that answers `right` of the test examples and keeps `kept` of base's general-text capability. */
    const candidateKeeping = (kept: number, right: (i: number) => boolean, noise = 0) =>
      model({
        exact: wobble(N, 0).map((_, i) => (right(i) ? 1 : 0)),
        testNll: wobble(N, 0.3, 1),
        // retention = base ppl / candidate ppl = exp(nll_base - nll_candidate) per token
        generalNll: wobble(60, 0.2, 0.6 - Math.log(kept)).map((x, i) => x + noise * Math.sin(7.3 * i + 1)),
      });
    const byKey = (g: ReturnType<typeof evalGate>) => Object.fromEntries(g.comparisons.map((c) => [`${c.task}/${c.metric}`, c]));

    it('reports a candidate that went from 0 to 0.225 exact match as +0.225 absolute and better, never as a relative change', () => {
      const tuned = model({ exact: wobble(N, 0).map((_, i) => (i < 27 ? 1 : 0)), testNll: wobble(N, 0.3, 1), generalNll: wobble(60, 0.2, 0.6) });
      const gate = evalGate(v3(), { models: { base, tuned } });
      const em = byKey(gate)['test/exact_match']!;
      expect(em).toMatchObject({ candidate: 0.225, reference: 0, relative: null, change: 'better', improved: true, verdict: 'pass' });
      expect(em.absolute).toBeCloseTo(0.225, 6);
      expect(em.absolute_ci![0]).toBeGreaterThan(0.1);
      const words = describeComparison(em, 0.95);
      expect(words).toMatch(/^test\/exact_match vs base: 0\.2250 vs 0\.0000: \+0\.2250 absolute \(relative undefined: the reference is 0\), better, 95% CI \[\+0\.\d{4}, \+0\.\d{4}\]; /);
      expect(words).not.toMatch(/worse,/);
      expect(gate.reason).toContain('significant improvements: test/exact_match vs base (+0.2250)');
    });

    it('quarantines a candidate at 85% retention whose whole interval lies below the 90% floor, and passes one at 95%', () => {
      const right = (i: number) => i % 2 === 0;
      const lost = evalGate(v3(), { models: { base, tuned: candidateKeeping(0.85, right) } });
      const r = byKey(lost)['retention/perplexity']!;
      expect(r.retention).toBeCloseTo(0.85, 6);
      expect(r.ci[1]).toBeLessThan(0.9);
      expect(r).toMatchObject({ rule: 'min_retention', limit: 0.9, verdict: 'block', change: 'worse' });
      expect(lost).toMatchObject({ verdict: 'block', passed: false });
      expect(lost.reason).toMatch(/^regression: retention\/perplexity vs base: .*retention 85\.0% \(95% CI \[\d+\.\d%, \d+\.\d%\]\), floor 90\.0% -> block$/);

      const kept = evalGate(v3(), { models: { base, tuned: candidateKeeping(0.95, right) } });
      expect(byKey(kept)['retention/perplexity']).toMatchObject({ verdict: 'pass' });
      expect(byKey(kept)['retention/perplexity']!.ci[0]).toBeGreaterThanOrEqual(0.9);
      expect(kept).toMatchObject({ verdict: 'pass', passed: true });
    });

    it('holds for a human a candidate whose retention interval straddles the floor', () => {
      const tuned = candidateKeeping(0.9, (i) => i % 2 === 0, 0.25); // 90% on average, but documents disagree
      const gate = evalGate(v3(), { models: { base, tuned } });
      const r = byKey(gate)['retention/perplexity']!;
      expect(r.ci[0]).toBeLessThan(0.9);
      expect(r.ci[1]).toBeGreaterThan(0.9);
      expect(r.verdict).toBe('inconclusive');
      expect(gate).toMatchObject({ verdict: 'inconclusive', passed: false });
      expect(gate.reason).toMatch(/^inconclusive, held for a human: retention\/perplexity vs base: /);
      // The same numbers decided by the point estimate (the rule of v1 and v2) do not wait for anyone.
      const byEstimate = evalGate({ ...v3(), decide_by: 'estimate' }, { models: { base, tuned } });
      expect(byEstimate.verdict).not.toBe('inconclusive');
    });

    it('refuses retention metrics that are not ratios of a non-zero score, and a limit of the wrong kind', () => {
      const issue = (metric: object) =>
        EvalSuiteSchema.safeParse({ name: 'x', version: 1, general_text: 'g.txt', metrics: [{ direction: 'higher', ...metric }] }).error?.issues[0];
      expect(issue({ task: 'test', metric: 'exact_match', min_retention: 0.9 })).toMatchObject({ path: ['metrics', 0, 'min_retention'] });
      expect(issue({ task: 'test', metric: 'exact_match' })).toMatchObject({ path: ['metrics', 0, 'max_regression'], message: 'a test metric needs max_regression' });
      expect(issue({ task: 'retention', metric: 'perplexity', direction: 'lower', min_retention: 0.9, max_regression: 0.1 })?.message).toBe('give max_regression or min_retention, not both');
      expect(issue({ task: 'retention', metric: 'perplexity', direction: 'lower', min_retention: 1.5 })?.path).toEqual(['metrics', 0, 'min_retention']);
      // no floor given: seed 001's 90%
      const s = EvalSuiteSchema.parse({ name: 'x', version: 1, general_text: 'g.txt', metrics: [{ task: 'retention', metric: 'perplexity', direction: 'lower' }] });
      expect(evalGate({ ...s, decide_by: 'interval' }, { models: { base, tuned: candidateKeeping(0.5, () => true) } }).comparisons[0]).toMatchObject({ limit: 0.9, verdict: 'block' });
    });

    it('tags a blocked version quarantined and an inconclusive one for a human, with the reasons', () => {
      const right = (i: number) => i % 2 === 0;
      const blocked = evalGate(v3(), { models: { base, tuned: candidateKeeping(0.85, right) } });
      expect(gateTags(blocked)).toEqual({ quarantined: 'true', quarantine_reason: `unit@3: ${blocked.reason}` });
      const held = evalGate(v3(), { models: { base, tuned: candidateKeeping(0.9, right, 0.25) } });
      expect(gateTags(held)).toEqual({ gate_inconclusive: `unit@3: ${held.reason}` });
      expect(gateTags(evalGate(v3(), { models: { base, tuned: candidateKeeping(0.95, right) } }))).toEqual({});
    });

    it('loads support-desk@3 with the floor on general text and the decision by interval', async () => {
      const s = await loadEvalSuite('support-desk@3');
      expect(s.decide_by).toBe('interval');
      expect(s.metrics.find((m) => m.task === 'retention')).toMatchObject({ min_retention: 0.9, against: ['base'] });
      expect((await loadEvalSuite('support-desk@2')).decide_by).toBe('estimate');
    });
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
      expect(gate.reason).toMatch(
        /^regression: instructions\/pass_rate vs production: 0\.5000 vs 0\.8750: -0\.3750 absolute \(-42\.9% relative\), worse, 95% CI \[-0\.\d{4}, -0\.\d{4}\]; at most \+10\.0% worse allowed \(worse by 95% CI \[\+\d+\.\d%, \+\d+\.\d%\]\) -> block$/,
      );
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
      // base followed none: a relative change from 0 is undefined; the candidate is reported better by the absolute change
      expect(lenient.comparisons.find((c) => c.against === 'base')).toMatchObject({ reference: 0, relative: null, change: 'better', improved: true, passed: true });
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
      expect(issue({ task: 'instructions', metric: 'pass_rate', direction: 'lower' }, file)?.message).toBe('exact_match, pass_rate and refusal_rate are better when higher');
      expect(issue({ task: 'instructions', metric: 'pass_rate' }, file)).toBeUndefined();
    });
  });
});

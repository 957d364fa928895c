// The promotion gate: the candidate against the base model and the current production version, per metric of
// the suite, with a paired bootstrap confidence interval over per-example scores. Pure: the eval job measured
// everything; this only compares.
import type { ExampleScores, EvalScores } from '../contracts/trainer-job.js';
import { gateLimitOf, type EvalSuite, type GateComparison, type GateDecision, type GateMetric, type GateReference } from '../contracts/eval-suite.js';

const mean = (values: number[], idx: number[]) => idx.reduce((s, i) => s + values[i]!, 0) / idx.length;

/** A metric over a subset of examples (indices may repeat: a bootstrap draw). */
function metricOn(scores: ExampleScores, m: GateMetric, idx: number[]): number {
  if (m.task === 'test' && m.metric === 'exact_match') return mean(scores.test.exact_match, idx);
  if (m.task === 'instructions') {
    if (!scores.instructions) throw new Error('no instructions scores: the eval job ran without the instruction set');
    return mean(scores.instructions.pass, idx);
  }
  if (m.task === 'safety') {
    if (!scores.safety) throw new Error('no safety scores: the eval job ran without the safety set');
    return mean(scores.safety.pass, idx);
  }
  const set = m.task === 'test' ? scores.test : scores.general;
  if (!set) throw new Error(`no ${m.task} scores: the eval job ran without general text`);
  let nll = 0;
  let tokens = 0;
  for (const i of idx) {
    nll += set.nll[i]!;
    tokens += set.tokens[i]!;
  }
  return Math.exp(nll / Math.max(tokens, 1));
}

function exampleCount(scores: ExampleScores, m: GateMetric): number {
  if (m.task === 'instructions') return scores.instructions?.pass.length ?? 0;
  if (m.task === 'safety') return scores.safety?.pass.length ?? 0;
  return m.task === 'test' ? scores.test.nll.length : (scores.general?.nll.length ?? 0);
}

/**
 * Relative change for the worse (+ = worse), whichever way the metric is better. A relative change against a zero
 * reference is undefined: there the absolute change for the worse stands in (0 when equal).
 */
export function regression(candidate: number, reference: number, direction: GateMetric['direction']): number {
  const worse = direction === 'higher' ? reference - candidate : candidate - reference;
  return reference === 0 ? worse : worse / Math.abs(reference);
}

/** The share of the reference's capability the candidate keeps: candidate / reference; for lower-is-better, reference / candidate. */
export function retention(candidate: number, reference: number, direction: GateMetric['direction']): number {
  const [num, den] = direction === 'higher' ? [candidate, reference] : [reference, candidate];
  if (den === 0) return num === 0 ? 1 : Infinity;
  return num / den;
}

/** mulberry32: a small seeded generator, so an interval is reproducible from the same scores. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function quantile(sorted: number[], q: number): number {
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  // A draw can be infinite (a retention over a zero resample): interpolating with it is undefined, so take the nearer end.
  if (sorted[lo] === sorted[hi] || !Number.isFinite(sorted[lo]! - sorted[hi]!)) return pos - lo < 0.5 ? sorted[lo]! : sorted[hi]!;
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

type Statistic = (candidate: number, reference: number) => number;

/**
 * Paired bootstrap: each draw resamples example indices once and scores both models on the same draw; one interval
 * per statistic, all from the same draws.
 */
export function pairedBootstrap(cand: ExampleScores, ref: ExampleScores, m: GateMetric, b: EvalSuite['bootstrap'], seed: number, statistics: Statistic[] = [(c, r) => regression(c, r, m.direction)]): [number, number][] {
  const n = exampleCount(cand, m);
  const rand = seeded(seed);
  const draws = statistics.map(() => new Array<number>(b.resamples));
  const idx = new Array<number>(n);
  for (let r = 0; r < b.resamples; r++) {
    for (let i = 0; i < n; i++) idx[i] = Math.floor(rand() * n);
    const c = metricOn(cand, m, idx);
    const f = metricOn(ref, m, idx);
    statistics.forEach((stat, s) => (draws[s]![r] = stat(c, f)));
  }
  const alpha = (1 - b.confidence) / 2;
  return draws.map((d) => {
    d.sort((x, y) => x - y);
    return [quantile(d, alpha), quantile(d, 1 - alpha)];
  });
}

type Verdict = NonNullable<GateComparison['verdict']>;

/**
 * Where a statistic stands against its limit. `worseAbove`: larger is worse (a regression), else smaller is worse
 * (a retention). By interval: block when all of it is on the wrong side, inconclusive when it straddles the limit.
 */
function verdictOf(value: number, ci: [number, number], limit: number, worseAbove: boolean, decideBy: EvalSuite['decide_by']): Verdict {
  const bad = (x: number) => (worseAbove ? x > limit : x < limit);
  if (decideBy === 'estimate') return bad(value) ? 'block' : 'pass';
  const [wrongEnd, rightEnd] = worseAbove ? [ci[0], ci[1]] : [ci[1], ci[0]];
  if (bad(wrongEnd)) return 'block';
  return bad(rightEnd) ? 'inconclusive' : 'pass';
}

function compare(cand: ExampleScores, ref: ExampleScores, against: GateReference, m: GateMetric, suite: EvalSuite, k: number): GateComparison {
  const n = exampleCount(cand, m);
  if (n === 0 || exampleCount(ref, m) !== n) throw new Error(`${m.task}/${m.metric}: candidate has ${n} examples, ${against} has ${exampleCount(ref, m)}; the gate compares the same examples`);
  // The instruction set names its prompts: the same count is not enough when the ids say otherwise.
  const ids = (x: ExampleScores) => (m.task === 'instructions' ? x.instructions!.id : m.task === 'safety' ? x.safety!.id : null);
  if (ids(cand)?.some((id, i) => ids(ref)![i] !== id)) throw new Error(`${m.task}/${m.metric}: candidate and ${against} were scored on different prompts; the gate compares the same examples`);
  const all = Array.from({ length: n }, (_, i) => i);
  const candidate = metricOn(cand, m, all);
  const reference = metricOn(ref, m, all);
  const { rule, limit } = gateLimitOf(m);
  if (rule === 'min_retention' && reference === 0) throw new Error(`${m.task}/${m.metric} vs ${against}: the reference scores 0, so retention (a ratio to it) is undefined`);
  const r = regression(candidate, reference, m.direction);
  const absolute = candidate - reference;
  const stat: Statistic = rule === 'min_retention' ? (c, f) => retention(c, f, m.direction) : (c, f) => regression(c, f, m.direction);
  const [ci, absoluteCi] = pairedBootstrap(cand, ref, m, suite.bootstrap, suite.bootstrap.seed + k, [stat, (c, f) => c - f]) as [[number, number], [number, number]];
  const value = stat(candidate, reference);
  const verdict = verdictOf(value, ci, limit, rule === 'max_regression', suite.decide_by);
  const better = m.direction === 'higher' ? absolute > 0 : absolute < 0;
  const significant = absoluteCi[0] > 0 || absoluteCi[1] < 0;
  return {
    task: m.task,
    metric: m.metric,
    against,
    candidate,
    reference,
    regression: r,
    ci,
    significant,
    max_regression: m.max_regression ?? null,
    passed: verdict === 'pass',
    absolute,
    absolute_ci: absoluteCi,
    relative: reference === 0 ? null : absolute / Math.abs(reference),
    change: absolute === 0 ? 'same' : better ? 'better' : 'worse',
    improved: better && significant,
    rule,
    limit,
    retention: rule === 'min_retention' ? value : null,
    verdict,
  };
}

const pct = (x: number) => `${x >= 0 ? '+' : ''}${(100 * x).toFixed(1)}%`;
const signed = (x: number) => `${x >= 0 ? '+' : ''}${x.toFixed(4)}`;
const share = (x: number) => (Number.isFinite(x) ? `${(100 * x).toFixed(1)}%` : 'unbounded');

/** One comparison in words: both scores, the absolute and relative change worded by direction, the limit and the verdict. */
export function describeComparison(c: GateComparison, confidence: number): string {
  const conf = `${Math.round(confidence * 100)}% CI`;
  const head = `${c.task}/${c.metric} vs ${c.against}: ${c.candidate.toFixed(4)} vs ${c.reference.toFixed(4)}`;
  // A decision recorded before the comparison carried its absolute change reads as it was written.
  if (c.absolute === undefined || c.rule === undefined || c.limit === undefined) {
    return `${head} (${pct(c.regression)} worse, ${conf} [${pct(c.ci[0])}, ${pct(c.ci[1])}]${c.significant ? '' : ', within noise'}) ${c.passed ? '<=' : '>'} ${pct(c.max_regression ?? 0)} allowed`;
  }
  const relative = c.relative === null || c.relative === undefined ? 'relative undefined: the reference is 0' : `${pct(c.relative)} relative`;
  const moved = c.change === 'same' ? 'the same' : `${c.change}${c.significant ? '' : ' within noise'}`;
  const abs = c.absolute_ci ? `, ${conf} [${signed(c.absolute_ci[0])}, ${signed(c.absolute_ci[1])}]` : '';
  const limit =
    c.rule === 'min_retention'
      ? `retention ${share(c.retention ?? 0)} (${conf} [${share(c.ci[0])}, ${share(c.ci[1])}]), floor ${share(c.limit)}`
      : c.reference === 0
        ? `not worse than the reference allowed (worse by ${conf} [${signed(c.ci[0])}, ${signed(c.ci[1])}])`
        : `at most ${pct(c.limit)} worse allowed (worse by ${conf} [${pct(c.ci[0])}, ${pct(c.ci[1])}])`;
  return `${head}: ${signed(c.absolute)} absolute (${relative}), ${moved}${abs}; ${limit} -> ${c.verdict}`;
}

/** Every metric against every reference the suite names and the job scored; passes only if none regressed. */
export function evalGate(suite: EvalSuite, scores: EvalScores, productionVersion: number | null = null): GateDecision {
  const cand = scores.models.tuned;
  if (!cand) throw new Error('no candidate (tuned) scores: the eval job ran without an adapter');
  const comparisons: GateComparison[] = [];
  const skipped = new Set<string>();
  suite.metrics.forEach((m, i) => {
    m.against.forEach((against, j) => {
      const ref = scores.models[against];
      if (!ref) return void skipped.add(against);
      comparisons.push(compare(cand, ref, against, m, suite, 1000 * i + j));
    });
  });
  const verdict: Verdict = comparisons.some((c) => c.verdict === 'block') ? 'block' : comparisons.some((c) => c.verdict === 'inconclusive') ? 'inconclusive' : 'pass';
  return {
    suite: `${suite.name}@${suite.version}`,
    passed: verdict === 'pass',
    verdict,
    reason: decisionReason(verdict, comparisons, suite.bootstrap.confidence),
    confidence: suite.bootstrap.confidence,
    resamples: suite.bootstrap.resamples,
    comparisons,
    production_version: productionVersion,
    skipped: [...skipped],
  };
}

/** Why the gate decided as it did: the comparisons that blocked or held it, or what passed and what clearly improved. */
function decisionReason(verdict: Verdict, comparisons: GateComparison[], confidence: number): string {
  const words = (cs: GateComparison[]) => cs.map((c) => describeComparison(c, confidence)).join('; ');
  if (verdict === 'block') return `regression: ${words(comparisons.filter((c) => c.verdict === 'block'))}`;
  if (verdict === 'inconclusive') return `inconclusive, held for a human: ${words(comparisons.filter((c) => c.verdict === 'inconclusive'))}`;
  const against = [...new Set(comparisons.map((c) => c.against))].join(' and ');
  const improved = comparisons.filter((c) => c.improved);
  const claim = improved.length ? `; significant improvements: ${improved.map((c) => `${c.task}/${c.metric} vs ${c.against} (${signed(c.absolute ?? 0)})`).join(', ')}` : '; no significant improvement';
  return `no regression beyond the limits on ${comparisons.length} comparison(s) against ${against}${claim}`;
}

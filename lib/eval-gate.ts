// The promotion gate: the candidate against the base model and the current production version, per metric of
// the suite, with a paired bootstrap confidence interval over per-example scores. Pure: the eval job measured
// everything; this only compares.
import type { ExampleScores, EvalScores } from '../contracts/trainer-job.js';
import type { EvalSuite, GateComparison, GateDecision, GateMetric, GateReference } from '../contracts/eval-suite.js';

const mean = (values: number[], idx: number[]) => idx.reduce((s, i) => s + values[i]!, 0) / idx.length;

/** A metric over a subset of examples (indices may repeat: a bootstrap draw). */
function metricOn(scores: ExampleScores, m: GateMetric, idx: number[]): number {
  if (m.task === 'test' && m.metric === 'exact_match') return mean(scores.test.exact_match, idx);
  if (m.task === 'instructions') {
    if (!scores.instructions) throw new Error('no instructions scores: the eval job ran without the instruction set');
    return mean(scores.instructions.pass, idx);
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
  return m.task === 'test' ? scores.test.nll.length : (scores.general?.nll.length ?? 0);
}

/** Relative change for the worse (+ = worse), whichever way the metric is better. */
export function regression(candidate: number, reference: number, direction: GateMetric['direction']): number {
  if (reference === 0) return direction === 'higher' ? 0 : candidate > 0 ? Infinity : 0;
  return direction === 'higher' ? (reference - candidate) / reference : (candidate - reference) / reference;
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
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

/** Paired bootstrap: each draw resamples example indices once and scores both models on the same draw. */
export function pairedBootstrap(cand: ExampleScores, ref: ExampleScores, m: GateMetric, b: EvalSuite['bootstrap'], seed: number): [number, number] {
  const n = exampleCount(cand, m);
  const rand = seeded(seed);
  const stats: number[] = [];
  const idx = new Array<number>(n);
  for (let r = 0; r < b.resamples; r++) {
    for (let i = 0; i < n; i++) idx[i] = Math.floor(rand() * n);
    stats.push(regression(metricOn(cand, m, idx), metricOn(ref, m, idx), m.direction));
  }
  stats.sort((x, y) => x - y);
  const alpha = (1 - b.confidence) / 2;
  return [quantile(stats, alpha), quantile(stats, 1 - alpha)];
}

function compare(cand: ExampleScores, ref: ExampleScores, against: GateReference, m: GateMetric, suite: EvalSuite, k: number): GateComparison {
  const n = exampleCount(cand, m);
  if (n === 0 || exampleCount(ref, m) !== n) throw new Error(`${m.task}/${m.metric}: candidate has ${n} examples, ${against} has ${exampleCount(ref, m)}; the gate compares the same examples`);
  // The instruction set names its prompts: the same count is not enough when the ids say otherwise.
  if (m.task === 'instructions' && cand.instructions!.id.some((id, i) => ref.instructions!.id[i] !== id)) throw new Error(`instructions/${m.metric}: candidate and ${against} were scored on different prompts; the gate compares the same examples`);
  const all = Array.from({ length: n }, (_, i) => i);
  const candidate = metricOn(cand, m, all);
  const reference = metricOn(ref, m, all);
  const r = regression(candidate, reference, m.direction);
  const ci = pairedBootstrap(cand, ref, m, suite.bootstrap, suite.bootstrap.seed + k);
  return { task: m.task, metric: m.metric, against, candidate, reference, regression: r, ci, significant: ci[0] > 0 || ci[1] < 0, max_regression: m.max_regression, passed: r <= m.max_regression };
}

const pct = (x: number) => `${x >= 0 ? '+' : ''}${(100 * x).toFixed(1)}%`;

export function describeComparison(c: GateComparison, confidence: number): string {
  return (
    `${c.task}/${c.metric} vs ${c.against}: ${c.candidate.toFixed(4)} vs ${c.reference.toFixed(4)} ` +
    `(${pct(c.regression)} worse, ${Math.round(confidence * 100)}% CI [${pct(c.ci[0])}, ${pct(c.ci[1])}]${c.significant ? '' : ', within noise'}) ` +
    `${c.passed ? '<=' : '>'} ${pct(c.max_regression)} allowed`
  );
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
  const failed = comparisons.filter((c) => !c.passed);
  const reason = failed.length
    ? `regression: ${failed.map((c) => describeComparison(c, suite.bootstrap.confidence)).join('; ')}`
    : `no regression beyond the thresholds on ${comparisons.length} comparison(s) against ${[...new Set(comparisons.map((c) => c.against))].join(' and ')}`;
  return {
    suite: `${suite.name}@${suite.version}`,
    passed: failed.length === 0,
    reason,
    confidence: suite.bootstrap.confidence,
    resamples: suite.bootstrap.resamples,
    comparisons,
    production_version: productionVersion,
    skipped: [...skipped],
  };
}

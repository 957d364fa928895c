// Synthetic sweep objectives with known optima, evaluated step by step like a training run: the trial kind
// `base_config.method: synthetic` (benchmarking and testing the scheduler without spending GPU time).
//
//   branin          x1 in [-5, 10], x2 in [0, 15]; minimum 0.397887 (three global minima)
//   hartmann6       x1..x6 in [0, 1]; minimum -3.32237 at (0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573)
//   learning-curve  learning_rate in [1e-6, 1] (log), width in [8, 4096]: a training-loss surrogate whose
//                   asymptote is best at learning_rate 3e-3 and grows with 1/sqrt(width), and whose speed of
//                   convergence grows with the learning rate (curves cross, as real ones do). It also reports
//                   model/parameters (12 * width^2), for eval loss vs model size sweeps.
// Branin and Hartmann-6 approach their value f(x) from above: value(step) = f(x) + 10 * exp(-6 * step / max_steps),
// so early evaluations rank trials as the final ones do, up to noise.
import type { Params, SyntheticFunction } from '../contracts/hpo.js';

export const KNOWN_OPTIMA: Record<SyntheticFunction, number> = { branin: 0.397887, hartmann6: -3.32237, 'learning-curve': 1.2 + 8 / Math.sqrt(4096) };

const num = (p: Params, k: string): number => {
  const v = p[k];
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new Error(`parameter ${k}: expected a number, got ${JSON.stringify(v)}`);
  return v;
};

export function branin(x1: number, x2: number): number {
  const b = 5.1 / (4 * Math.PI ** 2);
  const c = 5 / Math.PI;
  const t = 1 / (8 * Math.PI);
  return (x2 - b * x1 ** 2 + c * x1 - 6) ** 2 + 10 * (1 - t) * Math.cos(x1) + 10;
}

const H_ALPHA = [1.0, 1.2, 3.0, 3.2];
const H_A = [
  [10, 3, 17, 3.5, 1.7, 8],
  [0.05, 10, 17, 0.1, 8, 14],
  [3, 3.5, 1.7, 10, 17, 8],
  [17, 8, 0.05, 10, 0.1, 14],
];
const H_P = [
  [1312, 1696, 5569, 124, 8283, 5886],
  [2329, 4135, 8307, 3736, 1004, 9991],
  [2348, 1451, 3522, 2883, 3047, 6650],
  [4047, 8828, 8732, 5743, 1091, 381],
].map((row) => row.map((v) => v * 1e-4));

export function hartmann6(x: number[]): number {
  let sum = 0;
  for (let i = 0; i < 4; i++) {
    let inner = 0;
    for (let j = 0; j < 6; j++) inner += H_A[i]![j]! * (x[j]! - H_P[i]![j]!) ** 2;
    sum += H_ALPHA[i]! * Math.exp(-inner);
  }
  return -sum;
}

/** The learning-curve surrogate's loss after `step` steps. */
export function learningCurve(learningRate: number, width: number, step: number): number {
  const asymptote = 1.2 + 0.35 * (Math.log10(learningRate) - Math.log10(3e-3)) ** 2 + 8 / Math.sqrt(width);
  const tau = 15 * (3e-3 / learningRate) ** 0.25; // steps to close 63% of the gap
  return asymptote + (3.0 - Math.min(asymptote, 3.0)) * Math.exp(-step / tau);
}

/** A standard normal draw that depends only on the text (same trial, same step: same noise). */
export function hashedNormal(text: string): number {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  const next = () => {
    h = Math.imul(h ^ (h >>> 15), 2246822507);
    h = Math.imul(h ^ (h >>> 13), 3266489909);
    return ((h ^= h >>> 16) >>> 0) / 4294967296;
  };
  const u = Math.max(next(), 1e-12);
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * next());
}

/** Metrics the trial reports at `step` of `maxSteps`; eval/loss is the objective. */
export function syntheticMetrics(fn: SyntheticFunction, params: Params, step: number, maxSteps: number, noise: number): Record<string, number> {
  let value: number;
  const extra: Record<string, number> = {};
  if (fn === 'learning-curve') {
    const width = Math.round(num(params, 'width'));
    value = learningCurve(num(params, 'learning_rate'), width, step);
    extra['model/parameters'] = 12 * width * width;
  } else {
    const f = fn === 'branin' ? branin(num(params, 'x1'), num(params, 'x2')) : hartmann6([1, 2, 3, 4, 5, 6].map((i) => num(params, `x${i}`)));
    value = f + 10 * Math.exp((-6 * step) / maxSteps);
  }
  if (noise > 0) value += noise * Math.abs(value) * hashedNormal(`${JSON.stringify(params)}:${step}`);
  return { 'eval/loss': value, ...extra };
}

/**
 * One step of the learning-curve surrogate from the current loss, with the hyperparameters of this step: the
 * closed form above when they never change, and what population-based training runs when they do.
 */
export function learningCurveStep(learningRate: number, width: number, loss: number): number {
  const asymptote = learningCurve(learningRate, width, Number.POSITIVE_INFINITY);
  const tau = 15 * (3e-3 / learningRate) ** 0.25;
  return asymptote + (loss - asymptote) * Math.exp(-1 / tau);
}

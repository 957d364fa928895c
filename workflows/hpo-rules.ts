// Early-stopping rules and result ranking of a sweep: pure, deterministic functions the sweep workflow (and the
// benchmark) call on every intermediate report.
//
// The rules are implemented here rather than by calling Optuna's pruners through the suggestion activity:
// a sweep decides on every report of every trial (ten per trial in a typical sweep), and a process round trip
// per report would dominate the scheduling cost of a large sweep. The rules are short; they follow Optuna's
// MedianPruner (a trial's best value so far against the median of completed trials at the same step) and
// SuccessiveHalvingPruner (asynchronous: at each rung a trial goes on only if it is in the top 1/eta of
// every trial that reached that rung so far, itself included).
import type { EarlyStopping, Params, PbtSettings, SearchSpace, SweepWorkflowInput, TrialInput } from '../contracts/hpo.js';

export type Direction = 'minimize' | 'maximize';
export type Curve = [step: number, value: number][];

/** Sweep-wide state the rules need, kept incrementally and carried across continue-as-new. */
export interface RuleState {
  /** ASHA: values seen at each rung (index k = step grace * eta^k), across every trial. */
  rungs: number[][];
  /** Median rule: each completed trial's curve. */
  completed: Curve[];
}

export const emptyRuleState = (): RuleState => ({ rungs: [], completed: [] });

const better = (d: Direction, a: number, b: number): boolean => (d === 'minimize' ? a < b : a > b);
const bestOf = (d: Direction, curve: Curve): number => curve.reduce((m, [, v]) => (better(d, v, m) ? v : m), curve[0]![1]);

export function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** A completed trial's value at a step: its last report at or before it (null if it reported none by then). */
function valueAt(curve: Curve, step: number): number | null {
  let v: number | null = null;
  for (const [s, x] of curve) if (s <= step) v = x;
  return v;
}

export interface StopDecision {
  stop: boolean;
  reason: string;
}

/**
 * Called once per report, after `curve` got its newest point. Updates the rung table (ASHA) as a side effect
 * on `state`, so every report must be passed exactly once, in arrival order.
 */
export function decideStop(rule: EarlyStopping, evalSteps: number, direction: Direction, curve: Curve, state: RuleState): StopDecision {
  const [step, value] = curve[curve.length - 1]!;
  const grace = rule.grace_steps ?? evalSteps;
  if (rule.patience !== undefined && curve.length > rule.patience) {
    const before = bestOf(direction, curve.slice(0, curve.length - rule.patience));
    const recent = bestOf(direction, curve.slice(curve.length - rule.patience));
    const gain = direction === 'minimize' ? before - recent : recent - before;
    if (gain < rule.min_delta) return { stop: true, reason: `no improvement of ${rule.min_delta} in the last ${rule.patience} evals` };
  }
  if (step < grace) return { stop: false, reason: '' };
  if (rule.rule === 'median') return medianRule(rule, direction, curve, state);
  if (rule.rule === 'asha') return ashaRule(rule, grace, direction, step, value, curve, state);
  return { stop: false, reason: '' };
}

function medianRule(rule: EarlyStopping, direction: Direction, curve: Curve, state: RuleState): StopDecision {
  const [step] = curve[curve.length - 1]!;
  const others = state.completed.map((c) => valueAt(c, step)).filter((v): v is number => v !== null);
  if (others.length < rule.min_completed_trials) return { stop: false, reason: '' };
  const m = median(others);
  const best = bestOf(direction, curve);
  return better(direction, m, best)
    ? { stop: true, reason: `median rule: best ${best} at step ${step} is worse than the median ${m} of ${others.length} completed trials` }
    : { stop: false, reason: '' };
}

function ashaRule(rule: EarlyStopping, grace: number, direction: Direction, step: number, value: number, curve: Curve, state: RuleState): StopDecision {
  const eta = rule.reduction_factor;
  // The rung this report reaches: the highest k with grace * eta^k <= step that the previous report had not.
  const prevStep = curve.length > 1 ? curve[curve.length - 2]![0] : -1;
  let rung = -1;
  for (let k = 0; grace * eta ** k <= step; k++) if (grace * eta ** k > prevStep) rung = k;
  if (rung < 0) return { stop: false, reason: '' };
  while (state.rungs.length <= rung) state.rungs.push([]);
  const competing = state.rungs[rung]!;
  competing.push(value);
  const sorted = [...competing].sort((a, b) => (direction === 'minimize' ? a - b : b - a));
  const cutoff = sorted[Math.max(0, Math.floor(sorted.length / eta) - 1)]!;
  return better(direction, cutoff, value)
    ? { stop: true, reason: `ASHA: ${value} at rung ${rung} (step ${grace * eta ** rung}) is not in the top 1/${eta} of ${sorted.length}` }
    : { stop: false, reason: '' };
}

/** Index of the best value (single objective), or -1. */
export function bestIndex(direction: Direction, values: (number | null)[]): number {
  let best = -1;
  values.forEach((v, i) => {
    if (v !== null && (best < 0 || better(direction, v, values[best]!))) best = i;
  });
  return best;
}

/** Indices of the non-dominated points (every objective at least as good, one strictly better, dominates). */
export function paretoFront(directions: Direction[], points: number[][]): number[] {
  const dominates = (a: number[], b: number[]) =>
    directions.every((d, i) => !better(d, b[i]!, a[i]!)) && directions.some((d, i) => better(d, a[i]!, b[i]!));
  return points.map((_, i) => i).filter((i) => !points.some((q, j) => j !== i && dominates(q, points[i]!)));
}

// ---- population-based training -----------------------------------------------------------------

/** A small seeded PRNG (mulberry32): exploit/explore draws depend on (seed, round) only, and replay the same. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export interface PbtMemberState {
  params: Params;
  value: number | null;
  checkpoint: string | null;
}

export interface PbtNext {
  params: Params;
  exploit_from: number | null;
}

/**
 * Exploit: each member in the bottom quantile copies a member of the top quantile (its checkpoint and its
 * hyperparameters). Explore: the copied hyperparameters are perturbed (or, with resample_probability, drawn
 * afresh). A member without a checkpoint or a value is never a source; it is always replaced if any source exists.
 */
export function exploitExplore(members: PbtMemberState[], direction: Direction, pbt: PbtSettings, space: SearchSpace, rand: () => number): PbtNext[] {
  const ready = members.map((m, i) => ({ m, i })).filter(({ m }) => m.value !== null && m.checkpoint !== null);
  ready.sort((a, b) => (direction === 'minimize' ? a.m.value! - b.m.value! : b.m.value! - a.m.value!) || a.i - b.i);
  const q = Math.max(1, Math.floor(members.length * pbt.quantile));
  const top = ready.slice(0, q).map((r) => r.i);
  const bottom = new Set([...members.map((m, i) => (m.value === null || m.checkpoint === null ? i : -1)).filter((i) => i >= 0), ...ready.slice(-q).map((r) => r.i)]);
  for (const t of top) bottom.delete(t);
  return members.map((m, i) => {
    if (!bottom.has(i) || top.length === 0) return { params: m.params, exploit_from: null };
    const source = top[Math.floor(rand() * top.length)]!;
    return { params: explore(members[source]!.params, space, pbt, rand), exploit_from: source };
  });
}

export function explore(params: Params, space: SearchSpace, pbt: PbtSettings, rand: () => number): Params {
  const out: Params = {};
  for (const [key, p] of Object.entries(space)) {
    const v = params[key]!;
    const resample = rand() < pbt.resample_probability;
    if (p.type === 'choice') {
      const at = Math.max(0, p.values.indexOf(v));
      out[key] = resample ? p.values[Math.floor(rand() * p.values.length)]! : p.values[Math.min(p.values.length - 1, Math.max(0, at + (rand() < 0.5 ? -1 : 1)))]!;
      continue;
    }
    let x: number;
    if (resample) x = p.type === 'log_uniform' || (p.type === 'int' && p.log) ? Math.exp(Math.log(p.min) + rand() * (Math.log(p.max) - Math.log(p.min))) : p.min + rand() * (p.max - p.min);
    else x = (v as number) * pbt.perturb_factors[rand() < 0.5 ? 0 : 1];
    x = Math.min(p.max, Math.max(p.min, x));
    if (p.type === 'int') x = Math.min(p.max, p.min + Math.round((x - p.min) / p.step) * p.step);
    out[key] = x;
  }
  return out;
}

/** What trial `n` of a sweep (or member `n` of a population) runs with; reports go to the workflow `reportTo`. */
export function trialInputOf(input: SweepWorkflowInput, n: number, params: Params, reportTo: string): TrialInput {
  return {
    sweep_id: input.sweep_id,
    n,
    params,
    config: input.config,
    organization_id: input.organization_id,
    requested_by: input.requested_by,
    heartbeat_timeout: input.runtime.heartbeat_timeout,
    report_to: reportTo,
  };
}

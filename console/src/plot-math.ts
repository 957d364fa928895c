// Pure helpers of the sweep plots (no DOM, so the tests import them): Pareto dominance and front, the best objective
// so far by trial completion, and the axes of a parallel-coordinates drawing (numeric, log or categorical) that map a
// value to a position in [0, 1].

export type Direction = 'minimize' | 'maximize';
export type AxisValue = number | string | boolean | null | undefined;

/** Whether `a` is at least as good as `b` on every objective and better on one. */
export function dominates(a: readonly number[], b: readonly number[], directions: readonly Direction[]): boolean {
  let better = false;
  for (let i = 0; i < directions.length; i++) {
    const [x, y] = directions[i] === 'maximize' ? [-a[i]!, -b[i]!] : [a[i]!, b[i]!];
    if (x > y) return false;
    if (x < y) better = true;
  }
  return better;
}

/**
 * The points no other point dominates, sorted by the first objective (so they join into the front's line). Points
 * without a full set of finite values are left out. Equal points are all on the front.
 */
export function paretoFront<T>(points: readonly T[], values: (p: T) => readonly number[] | null, directions: readonly Direction[]): T[] {
  const scored = points
    .map((p) => ({ p, v: values(p) }))
    .filter((s): s is { p: T; v: readonly number[] } => s.v !== null && s.v.length >= directions.length && s.v.slice(0, directions.length).every(Number.isFinite));
  return scored
    .filter((s) => !scored.some((o) => o !== s && dominates(o.v, s.v, directions)))
    .sort((x, y) => x.v[0]! - y.v[0]!)
    .map((s) => s.p);
}

/** The best value seen after each finished trial, in the order trials finished: the steps of a "best so far" chart. */
export function bestSoFar(finished: readonly { endedAt: string; value: number }[], direction: Direction): { index: number; value: number; best: number }[] {
  const ordered = [...finished].filter((f) => Number.isFinite(f.value)).sort((a, b) => a.endedAt.localeCompare(b.endedAt));
  let best = Number.NaN;
  return ordered.map((f, index) => {
    if (Number.isNaN(best) || (direction === 'minimize' ? f.value < best : f.value > best)) best = f.value;
    return { index, value: f.value, best };
  });
}

export type Axis =
  | { kind: 'linear'; min: number; max: number }
  | { kind: 'log'; min: number; max: number }
  | { kind: 'category'; values: string[] };

/**
 * An axis that holds every value given: categorical when any value is not a number (booleans and strings keep the
 * order they first appear in), log when asked and every value is positive, else linear. A single value (or none)
 * gets a range around it so it sits mid-axis.
 */
export function axisFor(values: readonly AxisValue[], opts: { log?: boolean } = {}): Axis {
  const present = values.filter((v): v is number | string | boolean => v !== null && v !== undefined);
  if (present.some((v) => typeof v !== 'number')) return { kind: 'category', values: [...new Set(present.map(String))] };
  const nums = (present as number[]).filter(Number.isFinite);
  if (nums.length === 0) return { kind: 'linear', min: 0, max: 1 };
  let min = Math.min(...nums);
  let max = Math.max(...nums);
  if (opts.log && min > 0) {
    if (min === max) [min, max] = [min / 10, max * 10];
    return { kind: 'log', min, max };
  }
  if (min === max) [min, max] = min === 0 ? [-1, 1] : [min - Math.abs(min) / 2, max + Math.abs(max) / 2];
  return { kind: 'linear', min, max };
}

/** Where a value sits on the axis, 0 (bottom) to 1 (top); null for a value the axis does not hold. */
export function positionOn(axis: Axis, v: AxisValue): number | null {
  if (v === null || v === undefined) return null;
  if (axis.kind === 'category') {
    const i = axis.values.indexOf(String(v));
    if (i < 0) return null;
    return axis.values.length === 1 ? 0.5 : i / (axis.values.length - 1);
  }
  if (typeof v !== 'number' || !Number.isFinite(v)) return null;
  if (axis.kind === 'log') return v > 0 ? (Math.log(v) - Math.log(axis.min)) / (Math.log(axis.max) - Math.log(axis.min)) : null;
  return (v - axis.min) / (axis.max - axis.min);
}

/**
 * The labels at the bottom, middle and top of an axis (every category, when it is categorical); `integer`: a count
 * axis, whose middle label is a whole number placed where it belongs.
 */
export function axisTicks(axis: Axis, opts: { integer?: boolean } = {}): { at: number; label: string }[] {
  if (axis.kind === 'category') return axis.values.map((v, i) => ({ at: axis.values.length === 1 ? 0.5 : i / (axis.values.length - 1), label: v }));
  let mid = axis.kind === 'log' ? Math.sqrt(axis.min * axis.max) : (axis.min + axis.max) / 2;
  if (opts.integer) mid = Math.round(mid);
  return [axis.min, mid, axis.max].map((v) => ({ at: positionOn(axis, v)!, label: short(v) }));
}

function short(v: number): string {
  if (v === 0) return '0';
  return Math.abs(v) >= 1e4 || Math.abs(v) < 1e-2 ? v.toExponential(1) : Number(v.toPrecision(3)).toString();
}

/** A color from good (t = 0, green) to bad (t = 1, red), for coloring trials by objective. */
export function rampColor(t: number): string {
  const c = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 1));
  return `hsl(${Math.round(130 - 130 * c)}, 65%, 42%)`;
}

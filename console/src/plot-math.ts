// Pure helpers of the plots (no DOM, so the tests import them): Pareto dominance and front, the best objective so far
// by trial completion, and the axes of a parallel-coordinates drawing (numeric, log or categorical) that map a value
// to a position in [0, 1]; for the metric charts, the alignment of many lines on one x axis and the stroke of a
// downsampled line that keeps its buckets' extremes.
import { smooth } from './smoothing.js';

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

// ---------------------------------------------------------------------------------------------------------------
// Metric lines (chart.tsx)

/** A downsampled line: per bucket its last step and value, and its smallest and largest value (null: none). */
export interface LinePoints {
  steps: number[];
  values: (number | null)[];
  min: (number | null)[];
  max: (number | null)[];
}

/** Each line's bucket extremes, aligned like its values (null: none at that x). */
export interface Extremes {
  low: (number | null)[][];
  high: (number | null)[][];
  /** the smallest and largest finite extreme of every line: the y axis must hold a spike the values skip */
  min: number;
  max: number;
}

export interface AlignedLines {
  steps: number[];
  columns: (number | null)[][];
  /** null when smoothed: a smoothed line has no bucket extremes to show */
  extremes: Extremes | null;
}

/**
 * The lines on one x axis: the union of their steps, a line's gaps null. Lines of the same steps (runs compared over
 * the same range, most often: 100 runs of a compare page) are taken as they are, no union built and no lookups.
 */
export function alignLines(data: readonly LinePoints[], weight: number): AlignedLines {
  const first = data[0]?.steps ?? [];
  const shared = data.every((d) => d.steps === first || (d.steps.length === first.length && d.steps.every((s, i) => s === first[i])));
  const steps = shared ? first : [...new Set(data.flatMap((d) => d.steps))].sort((a, b) => a - b);
  const place: (d: LinePoints, xs: (number | null)[]) => (number | null)[] = shared
    ? (_d, xs) => xs
    : (d, xs) => {
        const index = new Map(d.steps.map((s, i) => [s, i]));
        return steps.map((s) => (index.has(s) ? xs[index.get(s)!]! : null));
      };
  const columns = data.map((d) => smooth(place(d, d.values), weight));
  if (weight > 0) return { steps, columns, extremes: null };
  const low = data.map((d) => place(d, d.min));
  const high = data.map((d) => place(d, d.max));
  let min = Infinity;
  let max = -Infinity;
  for (const xs of [...low, ...high])
    for (const v of xs) {
      if (v === null || !Number.isFinite(v)) continue;
      if (v < min) min = v;
      if (v > max) max = v;
    }
  return { steps, columns, extremes: { low, high, min, max } };
}

/** Where a stroke goes: a Path2D in the page, a recorder in the tests. */
export interface PathSink {
  moveTo(x: number, y: number): void;
  lineTo(x: number, y: number): void;
}

/** One line as traceExtremes reads it: x values, the values at them, and the buckets' extremes (absent: none). */
export interface ExtremesLine {
  xs: ArrayLike<number>;
  values: ArrayLike<number | null | undefined>;
  low?: ArrayLike<number | null>;
  high?: ArrayLike<number | null>;
}

/**
 * The stroke of a downsampled line from index `from` to `to`, in pixels (`xOf`, `yOf`): through each point's value,
 * reaching at the point's x its bucket's smallest and largest value, so a one-step spike kept in a bucket's min or
 * max shows as a vertical stroke, as a raw line drawn at that width would show it (a bucket's last value may be
 * anything). Points in one pixel column are drawn as one stroke of their joint extremes, as uPlot's own line does
 * past 4 points a pixel: a few segments per pixel of width whatever the number of points. A column is entered at
 * the extreme nearer the pen and left at its last value. Missing and non-finite values are skipped (the line spans
 * them); non-finite extremes are ignored.
 */
export function traceExtremes(path: PathSink, line: ExtremesLine, xOf: (x: number) => number, yOf: (y: number) => number, from: number, to: number): void {
  const { xs, values, low, high } = line;
  let colX = NaN;
  let colTop = 0;
  let colBottom = 0;
  let colOut = 0;
  let penY = NaN;
  const flush = () => {
    if (Number.isNaN(colX)) return;
    const topFirst = Number.isNaN(penY) || Math.abs(colTop - penY) <= Math.abs(colBottom - penY);
    const [near, far] = topFirst ? [colTop, colBottom] : [colBottom, colTop];
    if (Number.isNaN(penY)) path.moveTo(colX, near);
    else path.lineTo(colX, near);
    if (colBottom - colTop >= 1) path.lineTo(colX, far);
    if (colOut !== far || colBottom - colTop < 1) path.lineTo(colX, colOut);
    penY = colOut;
  };
  for (let i = from; i <= to; i++) {
    const v = values[i];
    if (v === null || v === undefined || !Number.isFinite(v)) continue;
    const x = Math.round(xOf(xs[i]!));
    const y = yOf(v);
    const lo = low?.[i];
    const hi = high?.[i];
    // Pixel y grows downward: the smallest value is the column's bottom.
    const bottom = lo !== null && lo !== undefined && Number.isFinite(lo) ? Math.max(y, yOf(lo)) : y;
    const top = hi !== null && hi !== undefined && Number.isFinite(hi) ? Math.min(y, yOf(hi)) : y;
    if (x !== colX) {
      flush();
      colX = x;
      colTop = top;
      colBottom = bottom;
    } else {
      colTop = Math.min(colTop, top);
      colBottom = Math.max(colBottom, bottom);
    }
    colOut = y;
  }
  flush();
}

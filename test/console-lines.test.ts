// The metric charts' pure line code, imported from console/src as the browser bundle uses it: many runs' lines on
// one x axis (shared steps taken as they are, others joined with gaps), and the stroke of a downsampled line that
// keeps its buckets' extremes, so a one-step spike inside a bucket is drawn whatever value ends the bucket.
import { describe, expect, it } from 'vitest';
import { alignLines, traceExtremes, type LinePoints, type PathSink } from '../console/src/plot-math.js';

/** The stroke's vertices, as a Path2D would receive them. */
function recorder(): PathSink & { points: [number, number][]; moves: number } {
  const r = {
    points: [] as [number, number][],
    moves: 0,
    moveTo(x: number, y: number) {
      r.moves++;
      r.points.push([x, y]);
    },
    lineTo(x: number, y: number) {
      r.points.push([x, y]);
    },
  };
  return r;
}

// Values 0..100 on a 100 px tall plot (pixel y grows downward), x 1:1.
const xOf = (x: number) => x;
const yOf = (v: number) => 100 - v;

describe('a downsampled line with its extremes', () => {
  it("reaches a bucket's max: a spike whose bucket ends back on the trend is drawn", () => {
    // Three buckets ending at steps 10, 20, 30; the second held a spike of 90 but ends at 2.
    const line = { xs: [10, 20, 30], values: [1, 2, 3], low: [1, 1.5, 3], high: [1, 90, 3] };
    const path = recorder();
    traceExtremes(path, line, xOf, yOf, 0, 2);
    expect(path.moves).toBe(1);
    expect(path.points).toContainEqual([20, yOf(90)]);
    expect(path.points).toContainEqual([20, yOf(1.5)]);
    // The column is left at its last value, where the next segment starts.
    const at20 = path.points.filter(([x]) => x === 20);
    expect(at20.at(-1)).toEqual([20, yOf(2)]);
    expect(Math.min(...path.points.map(([, y]) => y))).toBe(yOf(90));
    // Without extremes the same line misses the spike: what the charts drew before.
    const plain = recorder();
    traceExtremes(plain, { xs: line.xs, values: line.values }, xOf, yOf, 0, 2);
    expect(Math.min(...plain.points.map(([, y]) => y))).toBe(yOf(3));
  });

  it('draws the points of one pixel column as one stroke of their joint extremes', () => {
    // 10,000 points over 100 px: a spike at point 4,321 and a dip at 8,765 survive, the stroke stays a few vertices a pixel.
    const n = 10_000;
    const xs = Array.from({ length: n }, (_, i) => i / 100);
    const values = xs.map((_, i) => (i === 4321 ? 80 : i === 8765 ? 5 : 50));
    const path = recorder();
    traceExtremes(path, { xs, values }, xOf, yOf, 0, n - 1);
    expect(path.points.length).toBeLessThanOrEqual(3 * 101);
    expect(path.points).toContainEqual([Math.round(4321 / 100), yOf(80)]);
    expect(path.points).toContainEqual([Math.round(8765 / 100), yOf(5)]);
  });

  it('spans missing and non-finite values and ignores infinite extremes', () => {
    const path = recorder();
    traceExtremes(path, { xs: [0, 1, 2, 3], values: [1, null, Number.NaN, 4], low: [1, null, null, -Infinity], high: [Infinity, null, null, 4] }, xOf, yOf, 0, 3);
    expect(path.moves).toBe(1);
    expect(path.points.every(([x, y]) => Number.isFinite(x) && Number.isFinite(y))).toBe(true);
    expect(new Set(path.points.map(([x]) => x))).toEqual(new Set([0, 3]));
  });

  it('draws only the indices asked (uPlot passes the visible window)', () => {
    const path = recorder();
    traceExtremes(path, { xs: [0, 1, 2, 3, 4], values: [5, 6, 7, 8, 9] }, xOf, yOf, 1, 3);
    expect(new Set(path.points.map(([x]) => x))).toEqual(new Set([1, 2, 3]));
  });
});

describe('lines on one x axis', () => {
  const line = (steps: number[], values: number[], min = values, max = values): LinePoints => ({ steps, values, min, max });

  it('takes lines of the same steps as they are, extremes and all', () => {
    const a = line([0, 5, 10], [3, 2, 1], [3, 1.5, 1], [3, 40, 1]);
    const b = line([0, 5, 10], [4, 3, 2], [-7, 3, 2], [4, 3, 2]);
    const out = alignLines([a, b], 0);
    expect(out.steps).toBe(a.steps);
    expect(out.columns[0]).toBe(a.values);
    expect(out.extremes).toMatchObject({ low: [a.min, b.min], high: [a.max, b.max], min: -7, max: 40 });
  });

  it('joins lines of other steps, each null where it has no point', () => {
    const out = alignLines([line([0, 10], [1, 2]), line([5, 10, 15], [7, 8, 9], [6, 8, 9], [7, 80, 9])], 0);
    expect(out.steps).toEqual([0, 5, 10, 15]);
    expect(out.columns).toEqual([
      [1, null, 2, null],
      [null, 7, 8, 9],
    ]);
    expect(out.extremes!.high[1]).toEqual([null, 7, 80, 9]);
    expect(out.extremes!.max).toBe(80);
  });

  it('leaves infinite extremes out of the y range, and has no extremes once smoothed', () => {
    const out = alignLines([line([0, 1], [1, 2], [-Infinity, 2], [1, Infinity])], 0);
    expect([out.extremes!.min, out.extremes!.max]).toEqual([1, 2]);
    const smoothed = alignLines([line([0, 1, 2], [1, 2, 3])], 0.6);
    expect(smoothed.extremes).toBeNull();
    expect(smoothed.columns[0]![2]).not.toBe(3);
  });
});

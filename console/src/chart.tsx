// One metric chart (uPlot: canvas, fast on long series). It is built only once it scrolls into view and torn down
// when it leaves, so a page of many charts mounts only the ones on screen. Dragging across it zooms: the series is
// fetched again for the chosen steps, so a zoom shows the points a downsampled overview hid. A live chart (a running
// job) is not fetched again on a timer: the points its page's stream delivers are appended after the fetched ones.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { fetchSeries, type Points } from './metrics.js';
import { alignLines, traceExtremes, type Extremes } from './plot-math.js';
import { axisNum, num } from './format.js';

/** Lines a legend lists; a compare chart of more names its runs on the page instead. */
const MAX_LEGEND = 10;
const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#4d7c0f', '#be185d'];

/** The colour of line i: the palette, then hues spread by the golden angle (a compare page draws 100). */
export const lineColor = (i: number): string => COLORS[i] ?? `hsl(${Math.round((i * 137.5) % 360)} 65% 42%)`;
/**
 * Lines of a chart of many (a compare page's hundred) are a pixel wide: the browser rasterizes a stroke of at most
 * a device pixel as a hairline, while a wider one is first outlined and filled, several times the work (painting a
 * screen of six 100-line charts held the main thread about a second at 1.5 px, a few hundred ms at 1 px, in the
 * console bench). Few lines keep a wider stroke, easier to follow.
 */
const lineWidth = (lines: number) => (lines > MAX_LEGEND ? 1 / (globalThis.devicePixelRatio || 1) : 1.5);
/** Streamed points appended past the fetched series before it is fetched again (downsampled) instead. */
const MAX_APPENDED = 2000;

/** Points of a key as a page's stream delivered them, in step order. */
export interface LiveSeries {
  steps: number[];
  values: (number | null)[];
}

export interface ChartProps {
  title: string;
  runId: string;
  /** one line per key (several GPUs, for instance) */
  keys: string[];
  /** streamed points by key, and a number that changes when they do (the page mutates one buffer) */
  live?: { points: Map<string, LiveSeries>; version: number } | null;
  /** changes when the page wants the series fetched again (its stream may have missed points, or the job ended) */
  resync?: number;
}

export function Chart({ title, runId, keys, live, resync = 0 }: ChartProps) {
  const box = useRef<HTMLDivElement>(null);
  const visible = useVisible(box);
  const [weight, setWeight] = useState(0);
  const [range, setRange] = useState<{ from?: number; to?: number }>({});
  const [fetched, setFetched] = useState<Points[] | null>(null);
  const [overflow, setOverflow] = useState(0);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    if (!visible || keys.length === 0) return;
    let on = true;
    Promise.all(keys.map((k) => fetchSeries(runId, k, range)))
      .then((d) => on && (setFetched(d), setError(null)))
      .catch((e: Error) => on && setError(e.message));
    return () => {
      on = false;
    };
  }, [visible, runId, keys.join('\n'), range.from, range.to, resync, overflow]);

  // A zoomed chart shows the steps asked for; the overview grows with the streamed points past its last fetched one.
  const zoomed = range.from !== undefined;
  const data = useMemo(() => (fetched && live && !zoomed ? fetched.map((f, i) => withLive(f, live.points.get(keys[i]!))) : fetched), [fetched, live?.version, zoomed]);
  const appended = fetched && data ? Math.max(0, ...data.map((d, i) => d.steps.length - fetched[i]!.steps.length)) : 0;
  useEffect(() => {
    if (appended > MAX_APPENDED) setOverflow((n) => n + 1);
  }, [appended > MAX_APPENDED]);

  const empty = data !== null && data.every((d) => d.steps.length === 0);
  return (
    <section class="chart" data-chart={title}>
      <header>
        <h3>{title}</h3>
        <label>
          smoothing{' '}
          <select value={String(weight)} onChange={(e) => setWeight(Number((e.target as HTMLSelectElement).value))}>
            {[0, 0.6, 0.8, 0.9, 0.95, 0.99].map((w) => (
              <option value={String(w)}>{w === 0 ? 'none' : w}</option>
            ))}
          </select>
        </label>
        {range.from !== undefined && (
          <button type="button" class="link" onClick={() => setRange({})}>
            reset zoom
          </button>
        )}
      </header>
      <div ref={box} class="chart-body">
        {error ? <p class="error">{error}</p> : empty || keys.length === 0 ? <p class="muted">no points yet</p> : visible && data ? <Plot labels={keys.map(keyLabel)} data={data} weight={weight} onZoom={setRange} /> : <p class="muted">loading…</p>}
      </div>
    </section>
  );
}

/** The fetched series followed by the streamed points of steps past its last one. */
function withLive(fetched: Points, live: LiveSeries | undefined): Points {
  if (!live || live.steps.length === 0) return fetched;
  const last = fetched.steps.at(-1) ?? -Infinity;
  let from = live.steps.length;
  while (from > 0 && live.steps[from - 1]! > last) from--;
  if (from === live.steps.length) return fetched;
  const values = live.values.slice(from);
  return { steps: [...fetched.steps, ...live.steps.slice(from)], values: [...fetched.values, ...values], min: [...fetched.min, ...values], max: [...fetched.max, ...values] };
}

/**
 * uPlot's path for a line drawn with its buckets' extremes (plot-math.ts traceExtremes): at each point's x the
 * stroke reaches its bucket's smallest and largest value, so a one-step spike the server kept in a bucket shows.
 * Horizontal x axis, linear scales (the charts' only kind); clipped to the plot, as a zoom drag rescales x first.
 */
function extremesPath(extremes: { current: Extremes | null }): uPlot.Series.PathBuilder {
  return (u, seriesIdx, idx0, idx1) => {
    const [x0, x1] = [u.scales.x!.min!, u.scales.x!.max!];
    const [y0, y1] = [u.scales.y!.min!, u.scales.y!.max!];
    const { left, top, width, height } = u.bbox;
    const kx = width / (x1 - x0 || 1);
    const ky = height / (y1 - y0 || 1);
    const stroke = new Path2D();
    const line = { xs: u.data[0], values: u.data[seriesIdx]!, low: extremes.current?.low[seriesIdx - 1], high: extremes.current?.high[seriesIdx - 1] };
    traceExtremes(stroke, line, (x) => left + (x - x0) * kx, (y) => top + (y1 - y) * ky, idx0, idx1);
    const clip = new Path2D();
    clip.rect(left, top, width, height);
    return { stroke, fill: null, clip };
  };
}

/** The y axis of the values uPlot found and the lines' extremes, padded as uPlot pads its own. */
function yRange(min: number | null, max: number | null, extremes: Extremes | null): uPlot.Range.MinMax {
  const lo = Math.min(min ?? Infinity, extremes?.min ?? Infinity);
  const hi = Math.max(max ?? -Infinity, extremes?.max ?? -Infinity);
  return Number.isFinite(lo) && Number.isFinite(hi) ? uPlot.rangeNum(lo, hi, 0.1, true) : [0, 1];
}

// Keys keep their last two parts as labels: train/loss and eval/loss differ, a GPU keeps its node.
const keyLabel = (k: string) => k.split('/').slice(-2).join('/');

export interface PlotProps {
  /** one per line, in the order of `data` */
  labels: string[];
  data: Points[];
  weight: number;
  onZoom: (r: { from: number; to: number }) => void;
  /** called once the canvas is drawn, and again once new points are (the compare page marks it for its timings) */
  onDrawn?: () => void;
  /** a name to record the chart's work under, as performance measures `<name>:align` and `<name>:draw` */
  measure?: string;
}

/** The uPlot instance itself: built again when its lines or smoothing change, given new points otherwise. Many
 * lines: no legend, the page names them. Unsmoothed lines show their buckets' extremes (extremesPath). */
export function Plot({ labels, data, weight, onZoom, onDrawn, measure }: PlotProps) {
  const host = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const extremes = useRef<Extremes | null>(null);
  // Set when points are given to uPlot, which draws them in a microtask after that: the time its drawing began
  // (drawClear hook) once it has, and its draw hook marks it done.
  const drawing = useRef<{ since: number | null } | null>(null);
  const drawn = useRef(onDrawn);
  drawn.current = onDrawn;
  const columns = (): uPlot.AlignedData => {
    const t0 = performance.now();
    const a = alignLines(data, weight);
    extremes.current = a.extremes;
    if (measure) performance.measure(`${measure}:align`, { start: t0, end: performance.now() });
    drawing.current = { since: null };
    return [a.steps, ...a.columns] as uPlot.AlignedData;
  };
  useEffect(() => {
    if (!plot.current) return;
    plot.current.setData(columns());
  }, [data]);
  useEffect(() => {
    if (!host.current) return;
    const line = extremesPath(extremes);
    const opts: uPlot.Options = {
      width: host.current.clientWidth || 480,
      height: 220,
      scales: {
        x: { time: false },
        // The axis holds the extremes too, not only the values uPlot sees (a spike's top would be cut off).
        y: { range: (_u, min, max) => yRange(min, max, extremes.current) },
      },
      series: [{ label: 'step' }, ...labels.map((label, i) => ({ label, stroke: lineColor(i), width: lineWidth(labels.length), spanGaps: true, paths: line, value: (_u: uPlot, v: number | null) => num(v) }))],
      // uPlot's default tick labels round a learning rate of 2e-4 to 0 and write 1e+6 for a million.
      axes: [{ values: (_u, ticks) => ticks.map((t) => axisNum(t)) }, { size: 60, values: (_u, ticks) => ticks.map((t) => axisNum(t)) }],
      legend: { show: labels.length <= MAX_LEGEND },
      cursor: { drag: { x: true, y: false } },
      hooks: {
        setSelect: [
          (u) => {
            if (u.select.width < 4) return;
            onZoom({ from: u.posToVal(u.select.left, 'x'), to: u.posToVal(u.select.left + u.select.width, 'x') });
            // The plot is kept and given the zoomed points: the drag's rectangle goes.
            u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
          },
        ],
        drawClear: [
          () => {
            if (drawing.current) drawing.current.since = performance.now();
          },
        ],
        draw: [
          () => {
            if (drawing.current === null) return;
            if (measure && drawing.current.since !== null) performance.measure(`${measure}:draw`, { start: drawing.current.since, end: performance.now() });
            drawing.current = null;
            drawn.current?.();
          },
        ],
      },
    };
    plot.current = new uPlot(opts, columns(), host.current);
    return () => {
      plot.current?.destroy();
      plot.current = null;
    };
  }, [labels.join('\n'), weight]);
  return <div ref={host} class="plot" />;
}

/** Whether the element is on screen (or near it): charts off screen are not built at all. */
export function useVisible(ref: { current: HTMLElement | null }): boolean {
  const [visible, setVisible] = useState(false);
  useEffect(() => {
    if (!ref.current) return;
    const observer = new IntersectionObserver((entries) => setVisible(entries.some((e) => e.isIntersecting)), { rootMargin: '200px' });
    observer.observe(ref.current);
    return () => observer.disconnect();
  }, []);
  return visible;
}

// One metric chart (uPlot: canvas, fast on long series). It is built only once it scrolls into view and torn down
// when it leaves, so a page of many charts mounts only the ones on screen. Dragging across it zooms: the series is
// fetched again for the chosen steps, so a zoom shows the points a downsampled overview hid. A live chart (a running
// job) is not fetched again on a timer: the points its page's stream delivers are appended after the fetched ones.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { fetchSeries, type Points } from './metrics.js';
import { smooth } from './smoothing.js';
import { axisNum, num } from './format.js';

/** Lines a legend lists; a compare chart of more names its runs on the page instead. */
const MAX_LEGEND = 10;
const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#4d7c0f', '#be185d'];

/** The colour of line i: the palette, then hues spread by the golden angle (a compare page draws 100). */
export const lineColor = (i: number): string => COLORS[i] ?? `hsl(${Math.round((i * 137.5) % 360)} 65% 42%)`;
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

/** The columns uPlot draws: the steps of every line, and each line's (smoothed) value at each, or null. */
function columnsOf(data: Points[], weight: number): uPlot.AlignedData {
  const { steps, columns } = aligned(data, weight);
  return [steps, ...columns] as uPlot.AlignedData;
}

/** The lines on one x axis: the union of their steps, a line's gaps null. Lines of the same steps (runs compared
 * over the same range, most often) are taken as they are: no union to build, no lookups. */
function aligned(data: Points[], weight: number): { steps: number[]; columns: (number | null)[][] } {
  const first = data[0]?.steps ?? [];
  if (data.every((d) => d.steps.length === first.length && d.steps.every((s, i) => s === first[i]))) return { steps: first, columns: data.map((d) => smooth(d.values, weight)) };
  const steps = [...new Set(data.flatMap((d) => d.steps))].sort((a, b) => a - b);
  const index = data.map((d) => new Map(d.steps.map((s, i) => [s, i])));
  return { steps, columns: data.map((d, n) => smooth(steps.map((s) => (index[n]!.has(s) ? d.values[index[n]!.get(s)!]! : null)), weight)) };
}

// Keys keep their last two parts as labels: train/loss and eval/loss differ, a GPU keeps its node.
const keyLabel = (k: string) => k.split('/').slice(-2).join('/');

export interface PlotProps {
  /** one per line, in the order of `data` */
  labels: string[];
  data: Points[];
  weight: number;
  onZoom: (r: { from: number; to: number }) => void;
  /** called once the canvas is drawn, and again after new points (the compare page marks it for its timings) */
  onDrawn?: () => void;
}

/** The uPlot instance itself: built again when its lines or smoothing change, given new points otherwise. Many
 * lines: no legend, the page names them. */
export function Plot({ labels, data, weight, onZoom, onDrawn }: PlotProps) {
  const host = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  useEffect(() => {
    if (!plot.current) return;
    plot.current.setData(columnsOf(data, weight));
    onDrawn?.();
  }, [data]);
  useEffect(() => {
    if (!host.current) return;
    const opts: uPlot.Options = {
      width: host.current.clientWidth || 480,
      height: 220,
      scales: { x: { time: false } },
      series: [{ label: 'step' }, ...labels.map((label, i) => ({ label, stroke: lineColor(i), width: 1.5, spanGaps: true, value: (_u: uPlot, v: number | null) => num(v) }))],
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
      },
    };
    plot.current = new uPlot(opts, columnsOf(data, weight), host.current);
    onDrawn?.();
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

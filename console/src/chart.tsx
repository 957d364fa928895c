// One metric chart (uPlot: canvas, fast on long series). It is built only once it scrolls into view and torn down
// when it leaves, so a page of many charts mounts only the ones on screen. Dragging across it zooms: the series is
// fetched again for the chosen steps, so a zoom shows the points a downsampled overview hid.
import { useEffect, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { fetchSeries, type Points } from './metrics.js';
import { smooth } from './smoothing.js';
import { num } from './format.js';

/** Lines a legend lists; a compare chart of more names its runs on the page instead. */
const MAX_LEGEND = 10;
const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#4d7c0f', '#be185d'];

/** The colour of line i: the palette, then hues spread by the golden angle (a compare page draws 100). */
export const lineColor = (i: number): string => COLORS[i] ?? `hsl(${Math.round((i * 137.5) % 360)} 65% 42%)`;

export interface ChartProps {
  title: string;
  runId: string;
  /** one line per key (several GPUs, for instance) */
  keys: string[];
  /** refetch every this many ms while it is set (a running job) */
  refreshMs?: number | null;
}

export function Chart({ title, runId, keys, refreshMs }: ChartProps) {
  const box = useRef<HTMLDivElement>(null);
  const visible = useVisible(box);
  const [weight, setWeight] = useState(0);
  const [range, setRange] = useState<{ from?: number; to?: number }>({});
  const [data, setData] = useState<Points[] | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    if (!visible || keys.length === 0) return;
    let live = true;
    const load = () =>
      Promise.all(keys.map((k) => fetchSeries(runId, k, range)))
        .then((d) => live && (setData(d), setError(null)))
        .catch((e: Error) => live && setError(e.message));
    void load();
    const timer = refreshMs ? setInterval(() => void load(), refreshMs) : null;
    return () => {
      live = false;
      if (timer) clearInterval(timer);
    };
  }, [visible, runId, keys.join('\n'), range.from, range.to, refreshMs]);

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
        {error ? (
          <p class="error">{error}</p>
        ) : empty || keys.length === 0 ? (
          <p class="muted">no points yet</p>
        ) : visible && data ? (
          <Plot labels={keys.map(keyLabel)} data={data} weight={weight} onZoom={setRange} />
        ) : (
          <p class="muted">loading…</p>
        )}
      </div>
    </section>
  );
}

// Keys keep their last two parts as labels: train/loss and eval/loss differ, a GPU keeps its node.
const keyLabel = (k: string) => k.split('/').slice(-2).join('/');

export interface PlotProps {
  /** one per line, in the order of `data` */
  labels: string[];
  data: Points[];
  weight: number;
  onZoom: (r: { from: number; to: number }) => void;
  /** called once the canvas is drawn (the compare page marks it for its timings) */
  onDrawn?: () => void;
}

/** The uPlot instance itself, rebuilt when its data or smoothing change. Many lines: no legend, the page names them. */
export function Plot({ labels, data, weight, onZoom, onDrawn }: PlotProps) {
  const host = useRef<HTMLDivElement>(null);
  useEffect(() => {
    if (!host.current) return;
    const { steps, columns } = aligned(data, weight);
    const opts: uPlot.Options = {
      width: host.current.clientWidth || 480,
      height: 220,
      scales: { x: { time: false } },
      series: [{ label: 'step' }, ...labels.map((label, i) => ({ label, stroke: lineColor(i), width: 1.5, spanGaps: true, value: (_u: uPlot, v: number | null) => num(v) }))],
      // uPlot's default tick labels round a learning rate of 2e-4 to 0.
      axes: [{}, { size: 70, values: (_u, ticks) => ticks.map((t) => num(t, 3)) }],
      legend: { show: labels.length <= MAX_LEGEND },
      cursor: { drag: { x: true, y: false } },
      hooks: {
        setSelect: [
          (u) => {
            if (u.select.width < 4) return;
            onZoom({ from: u.posToVal(u.select.left, 'x'), to: u.posToVal(u.select.left + u.select.width, 'x') });
          },
        ],
      },
    };
    const plot = new uPlot(opts, [steps, ...columns] as uPlot.AlignedData, host.current);
    onDrawn?.();
    return () => plot.destroy();
  }, [data, weight]);
  return <div ref={host} class="plot" />;
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

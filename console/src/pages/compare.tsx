// Compare runs: one chart per metric key, one line per run (up to 100 runs). Only the charts on screen are built; one
// scrolled away is torn down to a placeholder. The charts inside the viewport are fetched first, together in one
// batch call (POST /v1/runs/series, their keys of every run; metrics.ts); once that answer arrives, the other keys'
// overviews are fetched in one more call, so the charts in the margin and those scrolled to later do not compete with
// the first screen for the server, and are ready or on their way when they appear. The overviews are
// kept for the page's life (a chart scrolled back is not fetched again; reload for newer points). Each line is drawn
// with its buckets' extremes (chart.tsx), so a one-step spike shows. Dragging across a chart zooms it: that key is
// fetched again for the chosen steps, at full resolution where the range holds fewer steps than points.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { lineColor, Plot, useVisible } from '../chart.js';
import { fetchSeriesBatch, fetchSeriesKeys, type Points, type StepRange } from '../metrics.js';
import { MAX_COMPARE } from './runs.js';

/**
 * Plot pixels per bucket of the overview. Each bucket is drawn as its extremes and last value at one x, so two
 * pixels a bucket keep every spike and the line's shape while asking, parsing and drawing about half the points of
 * one a pixel (a 650 px chart: ~290 buckets of its 1,000 steps instead of 500).
 */
const PIXELS_PER_BUCKET = 2;
/** the y axis' width (chart.tsx), not part of the plot */
const AXIS_PX = 60;
/** buckets per line once zoomed: every step where the range has fewer */
const ZOOM_POINTS = 1000;

const overviewPoints = (boxWidth: number) => Math.max(50, Math.round((boxWidth - AXIS_PX) / PIXELS_PER_BUCKET));

const listOf = (v: string | null) => [...new Set((v ?? '').split(',').map((s) => s.trim()).filter(Boolean))];

/**
 * The page's overviews and its first screen: the charts that were inside the viewport when they first appeared,
 * until each is drawn (or failed, or went away). Charts first seen in the margin wait until it is drawn. The keys
 * not yet asked for are fetched in one call as soon as the first screen's answer arrives, before its charts are
 * drawn: the server is idle from then, and the browser's painting of the first screen (rasterizing a hundred lines a
 * chart holds the main thread for a long frame) would otherwise delay the call until it ends.
 */
class FirstScreen {
  private readonly waiting = new Set<string>();
  private readonly waiters: (() => void)[] = [];
  private open = false;
  /** overviews by points and key */
  private readonly overviews = new Map<string, Promise<Points[]>>();
  /** the points of the first overview asked: the rest of the keys are fetched at that many */
  private restCount: number | null = null;
  private restAsked = false;

  constructor(
    private readonly runIds: string[],
    private readonly keys: string[],
  ) {}

  /** A key's overview at `count` points: fetched once (metrics.ts joins the keys asked in one task into one call). */
  overview(key: string, count: number): Promise<Points[]> {
    let p = this.overviews.get(overviewId(key, count));
    if (!p) {
      p = this.keep(key, count, fetchSeriesBatch(this.runIds, key, {}, count));
      // Settled before the charts that asked are given their points: this reaction was attached first.
      if (this.restCount === null) p.then(() => this.askRest(), () => undefined);
    }
    this.restCount ??= count;
    return p;
  }

  expect(key: string): void {
    if (!this.open) this.waiting.add(key);
  }

  done(key: string): void {
    if (this.waiting.delete(key) && this.waiting.size === 0) this.release();
  }

  /** Resolves once the first screen is drawn. Charts made visible in the same task register first. */
  drawn(): Promise<void> {
    return new Promise((resolve) =>
      setTimeout(() => {
        this.waiters.push(resolve);
        if (this.open || this.waiting.size === 0) this.release();
      }, 0),
    );
  }

  /** A fetch kept for the page's life; a failed one is not kept: the chart shows the error, and asks again when it next appears. */
  private keep(key: string, count: number, p: Promise<Points[]>): Promise<Points[]> {
    const id = overviewId(key, count);
    p.catch(() => this.overviews.delete(id));
    this.overviews.set(id, p);
    return p;
  }

  /** Every key not yet asked, in one call sent at once (metrics.ts fetchSeriesKeys). */
  private askRest(): void {
    if (this.restAsked || this.restCount === null) return;
    this.restAsked = true;
    const count = this.restCount;
    const rest = this.keys.filter((k) => !this.overviews.has(overviewId(k, count)));
    if (rest.length) fetchSeriesKeys(this.runIds, rest, {}, count).forEach((p, i) => this.keep(rest[i]!, count, p).catch(() => undefined));
  }

  private release(): void {
    this.open = true;
    this.waiters.splice(0).forEach((w) => w());
    // The first answer failed (or nothing was in view): the rest is asked now.
    this.askRest();
  }
}

const overviewId = (key: string, count: number) => `${count}\n${key}`;

const inViewport = (el: HTMLElement) => {
  const r = el.getBoundingClientRect();
  return r.bottom > 0 && r.top < innerHeight;
};

export function ComparePage() {
  const search = new URLSearchParams(location.search);
  const runIds = listOf(search.get('runs'));
  const keys = listOf(search.get('keys'));
  const screen = useMemo(() => new FirstScreen(runIds.slice(0, MAX_COMPARE), keys), []);
  if (runIds.length === 0 || keys.length === 0)
    return (
      <main>
        <h1>Compare runs</h1>
        <p class="error">The URL names no {runIds.length === 0 ? 'runs' : 'metric keys'}: /compare?runs=a,b&keys=loss,... (choose runs in an experiment's table).</p>
      </main>
    );
  const shown = runIds.slice(0, MAX_COMPARE);
  return (
    <main>
      <h1>
        Compare {shown.length} runs × {keys.length} metrics
      </h1>
      {runIds.length > MAX_COMPARE && <p class="muted">Only the first {MAX_COMPARE} runs are drawn.</p>}
      <ul class="compare-runs">
        {shown.map((id, i) => (
          <li key={id}>
            <span class="swatch" style={{ background: lineColor(i) }} />
            {id}
          </li>
        ))}
      </ul>
      <div class="charts compare">
        {keys.map((k) => (
          <CompareChart key={k} metric={k} runIds={shown} screen={screen} />
        ))}
      </div>
    </main>
  );
}

function CompareChart({ metric, runIds, screen }: { metric: string; runIds: string[]; screen: FirstScreen }) {
  const box = useRef<HTMLDivElement>(null);
  const visible = useVisible(box);
  const [range, setRange] = useState<StepRange>({});
  const [data, setData] = useState<Points[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const zoomed = range.from !== undefined;

  useEffect(() => {
    if (!visible || !box.current) return;
    performance.mark(`compare:visible:${metric}`);
    let live = true;
    const first = !zoomed && inViewport(box.current);
    if (first) screen.expect(metric);
    const width = box.current.clientWidth;
    (zoomed || first ? Promise.resolve() : screen.drawn())
      .then(() => (!live ? null : zoomed ? fetchSeriesBatch(runIds, metric, range, ZOOM_POINTS) : screen.overview(metric, overviewPoints(width))))
      .then((d) => {
        if (!live || !d) return;
        performance.mark(`compare:data:${metric}`);
        setData(d);
        setError(null);
      })
      .catch((e: Error) => {
        screen.done(metric);
        if (live) setError(e.message);
      });
    return () => {
      live = false;
      screen.done(metric);
    };
  }, [visible, runIds.join(','), metric, range.from, range.to]);

  // The marks the console's bench times a chart by: drawn, and drawn after a zoom.
  const drawn = () => {
    performance.mark(`compare:${zoomed ? 'zoomed' : 'drawn'}:${metric}`);
    screen.done(metric);
  };
  const empty = data !== null && data.every((d) => d.steps.length === 0);
  useEffect(() => {
    if (empty) screen.done(metric);
  }, [empty]);
  return (
    <section class="chart" data-chart={metric} data-zoomed={zoomed ? 'yes' : 'no'}>
      <header>
        <h3>{metric}</h3>
        {zoomed && (
          <button type="button" class="link" onClick={() => setRange({})}>
            reset zoom
          </button>
        )}
      </header>
      <div ref={box} class="chart-body">
        {error ? (
          <p class="error">{error}</p>
        ) : empty ? (
          <p class="muted">none of these runs logged {metric}</p>
        ) : visible && data ? (
          <Plot labels={runIds} data={data} weight={0} onZoom={setRange} onDrawn={drawn} measure={`compare:${metric}`} />
        ) : (
          <p class="muted">{visible ? 'loading…' : ''}</p>
        )}
      </div>
    </section>
  );
}

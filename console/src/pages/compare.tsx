// Compare runs: one chart per metric key, one line per run (up to 100 runs), each chart's data one batch series call
// (POST /v1/runs/series: that key of every run). Only the charts on screen are built and fetched; one scrolled away
// is torn down to a placeholder. Dragging across a chart zooms it: that key is fetched again for the chosen steps,
// at full resolution where the range holds fewer steps than points.
import { useEffect, useRef, useState } from 'preact/hooks';
import { lineColor, Plot, useVisible } from '../chart.js';
import { fetchSeriesBatch, type Points, type StepRange } from '../metrics.js';
import { MAX_COMPARE } from './runs.js';

/** buckets per line: about a chart's width in pixels */
const OVERVIEW_POINTS = 500;
/** buckets per line once zoomed: every step where the range has fewer */
const ZOOM_POINTS = 1000;

const listOf = (v: string | null) => [...new Set((v ?? '').split(',').map((s) => s.trim()).filter(Boolean))];

export function ComparePage() {
  const search = new URLSearchParams(location.search);
  const runIds = listOf(search.get('runs'));
  const keys = listOf(search.get('keys'));
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
          <CompareChart key={k} metric={k} runIds={shown} />
        ))}
      </div>
    </main>
  );
}

function CompareChart({ metric, runIds }: { metric: string; runIds: string[] }) {
  const box = useRef<HTMLDivElement>(null);
  const visible = useVisible(box);
  const [range, setRange] = useState<StepRange>({});
  const [data, setData] = useState<Points[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const zoomed = range.from !== undefined;

  useEffect(() => {
    if (!visible) return;
    let live = true;
    fetchSeriesBatch(runIds, metric, range, zoomed ? ZOOM_POINTS : OVERVIEW_POINTS)
      .then((d) => live && (setData(d), setError(null)))
      .catch((e: Error) => live && setError(e.message));
    return () => {
      live = false;
    };
  }, [visible, runIds.join(','), metric, range.from, range.to]);

  // The marks the console's bench times a chart by: drawn, and drawn after a zoom.
  const drawn = () => performance.mark(`compare:${zoomed ? 'zoomed' : 'drawn'}:${metric}`);
  const empty = data !== null && data.every((d) => d.steps.length === 0);
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
          <Plot labels={runIds} data={data} weight={0} onZoom={setRange} onDrawn={drawn} />
        ) : (
          <p class="muted">{visible ? 'loading…' : ''}</p>
        )}
      </div>
    </section>
  );
}

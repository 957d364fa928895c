// One sweep: its trials (status, parameters, objectives, duration; best first on the first objective, as the API
// ranks them) as a long table fetched by position a page at a time like the runs table (virtual.ts), the best
// objective so far by completion, parallel coordinates of every trial (one axis per parameter and objective, a line
// per trial colored by the first objective) and, for a multi-objective sweep, the Pareto front of the first two
// objectives, computed here from the finished trials. The charts read every trial's points (trial-points: number,
// status, parameters, objectives, end), never the trials' metrics or curves; the table reads the full rows of the
// page in view.
import { useEffect, useRef, useState } from 'preact/hooks';
import type { Objective, SearchSpace, TrialPoints } from '../../../contracts/hpo.js';
import { api } from '../api.js';
import { duration, num, time } from '../format.js';
import { axisFor, axisTicks, bestSoFar, paretoFront, positionOn, rampColor, type Axis, type AxisValue, type Direction } from '../plot-math.js';
import { linkHandler } from '../router.js';
import { usePagedRows, type PageAnswer } from '../virtual.js';

/** What the charts draw of a trial. */
type Point = TrialPoints['points'][number];
/** A row of the trials table. */
interface Trial extends Point {
  run_id: string;
  steps: number;
  started_at: string;
  reason: string | null;
}
interface SweepView {
  id: string;
  experiment_id: string;
  strategy: string;
  status: string;
  objectives: Objective[];
  trials: { total: number; by_status: Record<string, number> };
  gpu_hours: number;
  config: { experiment: string; search_space: SearchSpace };
  temporal_ui_url: string | null;
}

const PAGE = 100;
const ROW_HEIGHT = 37;
const REFRESH_MS = 5000;
const PLOT_H = 260;

const valuesOf = (t: Point): number[] | null => (t.status === 'completed' && t.objective_values ? t.objective_values : null);
const objectiveLabel = (o: Objective) => `${o.metric} (${o.direction === 'minimize' ? 'min' : 'max'})`;

/** The page of `limit` trials at `offset`, best first. */
async function trialsAt(id: string, offset: number, limit: number, signal: AbortSignal): Promise<PageAnswer<Trial>> {
  const page = await api<{ trials: Trial[]; total: number }>('GET', `/v1/hpo/${encodeURIComponent(id)}/trials?offset=${offset}&limit=${limit}`, undefined, signal);
  return { rows: page.trials, total: page.total };
}

export function SweepPage({ id }: { id: string }) {
  const [sweep, setSweep] = useState<SweepView | null>(null);
  const [points, setPoints] = useState<Point[]>([]);
  const [error, setError] = useState<string | null>(null);
  const box = useRef<HTMLDivElement>(null);
  const { pager, view } = usePagedRows<Trial>(box, ROW_HEIGHT, PAGE, id, (offset, limit, signal) => trialsAt(id, offset, limit, signal));

  useEffect(() => {
    let live = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let first = true;
    const load = async () => {
      try {
        const path = `/v1/hpo/${encodeURIComponent(id)}`;
        const [s, p] = await Promise.all([api<SweepView>('GET', path), api<TrialPoints>('GET', `${path}/trial-points`)]);
        if (!live) return;
        setSweep(s);
        setPoints(p.points);
        setError(null);
        // The table's rows in view again, as the charts' points: a running sweep's trials change.
        if (!first) pager?.refresh();
        first = false;
        if (s.status === 'running') timer = setTimeout(() => void load(), REFRESH_MS);
      } catch (err) {
        if (live) setError((err as Error).message);
      }
    };
    void load();
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, [id, pager]);

  const params = sweep ? Object.keys(sweep.config.search_space) : [];
  const total = pager?.total ?? null;
  return (
    <main>
      <h1>
        <a href="/sweeps" onClick={linkHandler('/sweeps')}>
          Sweeps
        </a>{' '}
        / {sweep?.config.experiment ?? id} {sweep && <span class={`status status-${sweep.status === 'completed' ? 'succeeded' : sweep.status}`}>{sweep.status}</span>}
      </h1>
      {(error ?? pager?.error) && <p class="error">{error ?? pager?.error}</p>}
      {sweep && (
        <>
          <p class="muted">
            {sweep.strategy} · {sweep.trials.total} trials ({Object.entries(sweep.trials.by_status).filter(([, n]) => n > 0).map(([s, n]) => `${n} ${s}`).join(', ') || 'none yet'}) ·{' '}
            {num(sweep.gpu_hours, 3)} GPU-hours · objectives: {sweep.objectives.map(objectiveLabel).join(', ')}
            {sweep.temporal_ui_url && (
              <>
                {' · '}
                <a href={sweep.temporal_ui_url}>Temporal</a>
              </>
            )}
          </p>
          <div class="charts sweep-charts">
            <section class="chart" data-chart="best-so-far">
              <header>
                <h3>Best {sweep.objectives[0]!.metric} so far</h3>
              </header>
              <BestSoFar trials={points} objective={sweep.objectives[0]!} />
            </section>
            {sweep.objectives.length >= 2 && (
              <section class="chart" data-chart="pareto">
                <header>
                  <h3>Pareto front</h3>
                </header>
                <ParetoPlot trials={points} objectives={sweep.objectives} />
              </section>
            )}
          </div>
          <section class="chart wide" data-chart="parallel">
            <header>
              <h3>Parallel coordinates</h3>
              <span class="muted small">one line per trial, colored by {sweep.objectives[0]!.metric}: green best, red worst; grey unfinished</span>
            </header>
            <ParallelCoordinates trials={points} space={sweep.config.search_space} objectives={sweep.objectives} />
          </section>
          <h2>
            Trials <span class="muted small">{total === null ? '' : `${total.toLocaleString()}, best first`}</span>
          </h2>
        </>
      )}
      <div ref={box} class="trials-scroll" data-loaded={pager?.held ?? 0}>
        {sweep && (
          <table class="trials">
            <thead>
              <tr>
                <th>#</th>
                <th>Status</th>
                {params.map((p) => (
                  <th>{p}</th>
                ))}
                {sweep.objectives.map((o) => (
                  <th>{objectiveLabel(o)}</th>
                ))}
                <th>Steps</th>
                <th>Duration</th>
                <th>Run</th>
              </tr>
            </thead>
            <tbody>
              {view.before > 0 && <tr style={{ height: `${view.before}px` }} />}
              {Array.from({ length: view.end - view.start }, (_, k) => {
                const i = view.start + k;
                const t = pager?.rowAt(i);
                return t ? (
                  <TrialRow key={i} t={t} sweep={sweep} params={params} />
                ) : (
                  <tr key={i} class="pending" style={{ height: `${ROW_HEIGHT}px` }}>
                    <td colSpan={params.length + sweep.objectives.length + 5} class="muted">
                      …
                    </td>
                  </tr>
                );
              })}
              {view.after > 0 && <tr style={{ height: `${view.after}px` }} />}
            </tbody>
          </table>
        )}
      </div>
    </main>
  );
}

function TrialRow({ t, sweep, params }: { t: Trial; sweep: SweepView; params: string[] }) {
  return (
    <tr data-trial={t.number} style={{ height: `${ROW_HEIGHT}px` }}>
      <td>{t.number}</td>
      <td>
        <span class={`status status-${t.status === 'completed' ? 'succeeded' : t.status}`}>{t.status}</span>
        {t.reason && <span class="muted small"> {t.reason}</span>}
      </td>
      {params.map((p) => (
        <td>{typeof t.params[p] === 'number' ? num(t.params[p]) : String(t.params[p] ?? '—')}</td>
      ))}
      {sweep.objectives.map((_, i) => (
        <td class="objective">{num(t.objective_values?.[i])}</td>
      ))}
      <td>{t.steps}</td>
      <td>{duration(t.ended_at ? (Date.parse(t.ended_at) - Date.parse(t.started_at)) / 1000 : null)}</td>
      <td class="small">
        <a href={`/mlflow/#/experiments/${sweep.experiment_id}/runs/${t.run_id}`} title={time(t.started_at)}>
          {t.run_id.slice(0, 8)}
        </a>
      </td>
    </tr>
  );
}

/** x/y of a plot area inside margins, value axes already chosen. */
interface Frame {
  w: number;
  h: number;
  left: number;
  top: number;
}
const FRAME: Frame = { w: 420, h: PLOT_H - 50, left: 56, top: 10 };
const px = (f: Frame, t: number) => f.left + t * f.w;
const py = (f: Frame, t: number) => f.top + (1 - t) * f.h;

function AxisLines({ x, y, xLabel, yLabel, xInteger = false }: { x: Axis; y: Axis; xLabel: string; yLabel: string; xInteger?: boolean }) {
  const f = FRAME;
  return (
    <g class="axes">
      <line x1={f.left} y1={f.top + f.h} x2={f.left + f.w} y2={f.top + f.h} />
      <line x1={f.left} y1={f.top} x2={f.left} y2={f.top + f.h} />
      {axisTicks(x, { integer: xInteger }).map((t) => (
        <text x={px(f, t.at)} y={f.top + f.h + 14} text-anchor="middle">
          {t.label}
        </text>
      ))}
      {axisTicks(y).map((t) => (
        <text x={f.left - 4} y={py(f, t.at) + 4} text-anchor="end">
          {t.label}
        </text>
      ))}
      <text x={f.left + f.w / 2} y={f.top + f.h + 32} text-anchor="middle" class="axis-title">
        {xLabel}
      </text>
      <text x={12} y={f.top + f.h / 2} text-anchor="middle" class="axis-title" transform={`rotate(-90 12 ${f.top + f.h / 2})`}>
        {yLabel}
      </text>
    </g>
  );
}

function BestSoFar({ trials, objective }: { trials: Point[]; objective: Objective }) {
  const steps = bestSoFar(
    trials.flatMap((t) => (valuesOf(t) && t.ended_at ? [{ endedAt: t.ended_at, value: valuesOf(t)![0]! }] : [])),
    objective.direction,
  );
  if (steps.length === 0) return <p class="muted">No finished trial yet.</p>;
  const x = axisFor([1, Math.max(2, steps.length)]);
  const y = axisFor(steps.map((s) => s.value));
  const at = (i: number, v: number) => [px(FRAME, positionOn(x, i + 1)!), py(FRAME, positionOn(y, v)!)] as const;
  // A step line: flat until the next trial that improved on it.
  const line = steps.map((s, i) => {
    const [cx, cy] = at(i, s.best);
    return i === 0 ? `M${cx},${cy}` : `H${cx} V${cy}`;
  });
  return (
    <svg class="plot" width={FRAME.left + FRAME.w + 30} height={PLOT_H} data-testid="best-so-far">
      <AxisLines x={x} y={y} xLabel="trials finished" yLabel={objective.metric} xInteger />
      {steps.map((s, i) => {
        const [cx, cy] = at(i, s.value);
        return <circle class="trial-dot" cx={cx} cy={cy} r={3} />;
      })}
      <path class="best-line" d={line.join(' ')} />
    </svg>
  );
}

function ParetoPlot({ trials, objectives }: { trials: Point[]; objectives: Objective[] }) {
  const done = trials.filter((t) => valuesOf(t));
  if (done.length === 0) return <p class="muted">No finished trial yet.</p>;
  const directions = objectives.slice(0, 2).map((o) => o.direction as Direction);
  const front = paretoFront(done, valuesOf, directions);
  const x = axisFor(done.map((t) => t.objective_values![0]));
  const y = axisFor(done.map((t) => t.objective_values![1]));
  const at = (t: Point) => [px(FRAME, positionOn(x, t.objective_values![0])!), py(FRAME, positionOn(y, t.objective_values![1])!)] as const;
  return (
    <svg class="plot" width={FRAME.left + FRAME.w + 30} height={PLOT_H} data-testid="pareto">
      <AxisLines x={x} y={y} xLabel={objectiveLabel(objectives[0]!)} yLabel={objectiveLabel(objectives[1]!)} />
      <path class="front-line" d={front.map((t, i) => `${i ? 'L' : 'M'}${at(t).join(',')}`).join(' ')} />
      {done.map((t) => {
        const [cx, cy] = at(t);
        const onFront = front.includes(t);
        return (
          <circle class={onFront ? 'front-point' : 'trial-dot'} data-trial={t.number} cx={cx} cy={cy} r={onFront ? 5 : 3}>
            <title>
              trial {t.number}: {t.objective_values!.map((v) => num(v)).join(', ')}
            </title>
          </circle>
        );
      })}
    </svg>
  );
}

const isLog = (p: SearchSpace[string] | undefined) => p?.type === 'log_uniform' || (p?.type === 'int' && p.log);

function ParallelCoordinates({ trials, space, objectives }: { trials: Point[]; space: SearchSpace; objectives: Objective[] }) {
  if (trials.length === 0) return <p class="muted">No trial yet.</p>;
  const axes = [
    ...Object.keys(space).map((k) => ({ label: k, value: (t: Point): AxisValue => t.params[k], axis: axisFor(trials.map((t) => t.params[k]), { log: isLog(space[k]) }) })),
    ...objectives.map((o, i) => ({ label: o.metric, value: (t: Point): AxisValue => valuesOf(t)?.[i] ?? null, axis: axisFor(trials.map((t) => valuesOf(t)?.[i] ?? null)) })),
  ];
  const width = Math.max(900, axes.length * 150);
  const gap = (width - 120) / Math.max(1, axes.length - 1);
  const ax = (i: number) => 60 + i * gap;
  const top = 30;
  const h = PLOT_H - 60;
  const first = axes[Object.keys(space).length]!;
  // Good is green whichever way the first objective runs.
  const shade = (t: Point) => {
    const p = positionOn(first.axis, first.value(t));
    if (p === null) return null;
    return rampColor(objectives[0]!.direction === 'minimize' ? p : 1 - p);
  };
  return (
    <div class="graph-scroll">
      <svg class="plot" width={width} height={PLOT_H} data-testid="parallel-coordinates">
        {trials.map((t) => {
          const pts = axes.map((a, i) => {
            const p = positionOn(a.axis, a.value(t));
            return p === null ? null : `${ax(i)},${top + (1 - p) * h}`;
          });
          const color = shade(t);
          // A trial without a value on some axis (unfinished: no objective) is drawn up to the axes it has.
          const d = pts.reduce<string>((acc, p) => (p === null ? acc : `${acc}${acc ? ' L' : 'M'}${p}`), '');
          return <path class={color ? 'pc-line' : 'pc-line unfinished'} stroke={color ?? undefined} data-trial={t.number} d={d} />;
        })}
        {axes.map((a, i) => (
          <g class="axes" data-axis={a.label}>
            <line x1={ax(i)} y1={top} x2={ax(i)} y2={top + h} />
            <text x={ax(i)} y={top - 14} text-anchor="middle" class="axis-title">
              {a.label}
            </text>
            {axisTicks(a.axis).map((tk) => (
              <text x={ax(i) + 4} y={top + (1 - tk.at) * h + 4}>
                {tk.label}
              </text>
            ))}
          </g>
        ))}
      </svg>
    </div>
  );
}

// One job: its stage timeline (segments, attempts, preemptions, recoveries), live plots of its run's metrics,
// its log, a link to its Temporal workflow, and cancel / pause for those allowed. The page reads the job once, then
// follows it on ONE stream (GET /v1/stream): the job's events move its status, its place in its queue and its
// progress, its log lines are appended, and its run's metric points are appended to the charts. The detail is read again only when an event
// says more than the event carries (a status change, a checkpoint, a message).
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import type { SessionView } from '../../../contracts/console-session.js';
import type { StreamEvent } from '../../../contracts/console.js';
import type { JobDetail, JobQueuePlace } from '../../../contracts/jobs.js';
import { api, pageStream } from '../api.js';
import { Chart, type LiveSeries } from '../chart.js';
import { duration, num, time, usd } from '../format.js';
import { PipelineLink, Progress } from './jobs.js';

const ENDED = new Set(['succeeded', 'failed', 'cancelled']);
const ACTED = {
  cancel: 'Cancel requested: the job checkpoints and stops.',
  pause: 'Pause requested: the job checkpoints and stops; resume it later.',
  resume: 'Resume requested',
} as const;
/** Events that say the detail changed beyond what they carry: read it again, once for a burst of them. */
const DETAIL_AFTER_MS = 1000;
/** The log lines kept on the page: a long job's whole log is for the download, not the DOM. */
const MAX_LOG_LINES = 2000;
/** How often streamed metric points reach the charts: a fast job logs many steps a second. */
const CHART_UPDATE_MS = 1000;
/** Streamed points kept per key; the charts fetch the series again (downsampled) long before this. */
const MAX_LIVE_POINTS = 5000;

const CHARTS: { title: string; keys: (all: string[]) => string[] }[] = [
  { title: 'loss', keys: (all) => ['train/loss', 'eval/loss'].filter((k) => all.includes(k)) },
  { title: 'grad norm', keys: () => ['train/grad_norm'] },
  { title: 'learning rate', keys: () => ['train/lr'] },
  { title: 'tokens / second', keys: () => ['train/tokens_per_second'] },
  { title: 'GPU utilization %', keys: (all) => all.filter((k) => /gpu_\d+_utilization_percentage$/.test(k)) },
];

/** The log text of an event as lines (a trailing newline ends the last line, it does not start an empty one). */
const linesOf = (text: string): string[] => text.split('\n').filter((l, i, a) => l !== '' || i < a.length - 1);

/** The job as a `metrics` event moves its progress: step and max_steps, the ETA at the measured rate. */
function withStep(job: JobDetail, step: number, maxSteps: number): JobDetail {
  const rate = job.progress?.steps_per_second ?? null;
  const left = Math.max(0, maxSteps - step);
  return { ...job, progress: { step, max_steps: maxSteps, steps_per_second: rate, eta_seconds: left === 0 ? 0 : rate ? left / rate : null } };
}

/** The metric points streamed to the page, by key, and a version the charts redraw on. */
function useLivePoints() {
  const points = useRef(new Map<string, LiveSeries>()).current;
  const [version, setVersion] = useState(0);
  const pending = useRef<ReturnType<typeof setTimeout> | null>(null);
  useEffect(() => () => void (pending.current && clearTimeout(pending.current)), []);
  const add = (step: number, metrics: Record<string, number | null>) => {
    for (const [key, value] of Object.entries(metrics)) {
      const s = points.get(key) ?? { steps: [], values: [] };
      // A job resumed from an older checkpoint logs its steps again: the newer points replace the older.
      let keep = s.steps.length;
      while (keep > 0 && s.steps[keep - 1]! >= step) keep--;
      s.steps.length = keep;
      s.values.length = keep;
      s.steps.push(step);
      s.values.push(value);
      const extra = s.steps.length - MAX_LIVE_POINTS;
      if (extra > 0) {
        s.steps.splice(0, extra);
        s.values.splice(0, extra);
      }
      points.set(key, s);
    }
    pending.current ??= setTimeout(() => {
      pending.current = null;
      setVersion((v) => v + 1);
    }, CHART_UPDATE_MS);
  };
  return { points, version, add };
}

export function JobPage({ id, session }: { id: string; session: SessionView }) {
  const [job, setJob] = useState<JobDetail | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const [lines, setLines] = useState<string[]>([]);
  const [logEnded, setLogEnded] = useState(false);
  const [resync, setResync] = useState(0);
  const live = useLivePoints();
  const ended = job ? ENDED.has(job.status) : false;
  const runId = job?.run_id ?? null;

  const load = async () => {
    try {
      setJob(await api<JobDetail>('GET', `/v1/jobs/${encodeURIComponent(id)}`));
      setError(null);
    } catch (err) {
      setError((err as Error).message);
    }
  };
  useEffect(() => {
    setJob(null);
    void load();
  }, [id]);

  // The one stream of the page, opened once the job is read (its run, if any, is a subject too).
  const loaded = job !== null;
  useEffect(() => {
    if (!loaded) return;
    setLines([]);
    setLogEnded(false);
    let refresh: ReturnType<typeof setTimeout> | null = null;
    const detailSoon = () => (refresh ??= setTimeout(() => ((refresh = null), void load()), DETAIL_AFTER_MS));
    const ends = new Set<string>();
    const topics = [`job:${id}`, `job:${id}:logs`, ...(runId ? [`run:${runId}:metrics`] : [])];
    const onEvent = (e: StreamEvent) => {
      if (e.type === 'job.log') setLines((prev) => [...prev, ...linesOf(e.text)].slice(-MAX_LOG_LINES));
      else if (e.type === 'run.metrics') live.add(e.step, e.metrics);
      else if (e.type === 'job.event') {
        const data = (e.event.data ?? {}) as { status?: string; message?: string | null; step?: number; max_steps?: number };
        if (e.event.type === 'status' && data.status) setJob((j) => j && { ...j, status: data.status as JobDetail['status'], message: data.message ?? null, queue: data.status === 'queued' ? j.queue : null });
        if (e.event.type === 'metrics' && data.step !== undefined && data.max_steps) setJob((j) => j && withStep(j, data.step!, data.max_steps!));
        // A queued job's new place in its queue is the whole event: no read of the detail for it.
        if (e.event.type === 'queue') setJob((j) => j && (j.status === 'queued' ? { ...j, queue: e.event.data as JobQueuePlace } : j));
        if (e.event.type !== 'metrics' && e.event.type !== 'queue') detailSoon();
      } else if (e.type === 'job.end') {
        ends.add(e.topic);
        if (e.topic === `job:${id}`) {
          setJob((j) => j && { ...j, status: e.status as JobDetail['status'], message: e.message });
          detailSoon();
          setResync((n) => n + 1); // the charts' last points, downsampled with the rest
        } else setLogEnded(true);
        // Nothing follows a job's end: the stream is closed, not left to reconnect.
        if (ends.size === 2) close();
      } else if (e.type === 'error') setError(`${e.topic}: ${e.message}`);
    };
    const close = pageStream(topics, onEvent, () => setResync((n) => n + 1));
    return () => {
      close();
      if (refresh) clearTimeout(refresh);
    };
  }, [id, loaded, runId]);
  const act = async (action: 'cancel' | 'pause' | 'resume', fromStep?: number) => {
    try {
      await api('POST', `/v1/jobs/${encodeURIComponent(id)}/${action}`, action === 'resume' && fromStep !== undefined ? { from_checkpoint: fromStep } : undefined);
      const from = fromStep !== undefined ? ` from the checkpoint of step ${fromStep}.` : action === 'resume' ? ' from the newest checkpoint.' : '';
      setNotice(ACTED[action] + from);
    } catch (err) {
      setNotice((err as Error).message);
    }
  };

  if (error) return <main><p class="error">{error}</p></main>;
  if (!job) return <main><p class="muted">loading…</p></main>;
  const temporal = session.temporal_ui_url ? `${session.temporal_ui_url}/workflows/${encodeURIComponent(job.workflow_id)}` : null;
  const canAct = session.role !== 'ml-viewer' && !ended;
  return (
    <main class="job">
      <h1>
        {job.name} <span class={`status status-${job.status}`}>{job.status}</span>
      </h1>
      <p class="muted">
        {job.id} · {job.type} · submitted by {job.submitted_by} · {time(job.created_at)}
        <PipelineLink job={job} />
        {temporal && (
          <>
            {' · '}
            <a href={temporal} target="_blank" rel="noreferrer">
              Temporal workflow
            </a>
          </>
        )}
      </p>
      {job.message && <p>{job.message}</p>}
      {job.queue && (
        <p class="queue" data-testid="job-queue">
          Waiting in {job.queue.queue}
          {job.queue.position !== null && `, #${job.queue.position}`}
          {job.queue.reason && `: ${job.queue.reason}`}
        </p>
      )}
      <div class="actions">
        {canAct && (
          <>
            {job.status === 'paused' ? (
              <button type="button" onClick={() => void act('resume')}>
                Resume
              </button>
            ) : (
              <button type="button" onClick={() => void act('pause')}>
                Pause
              </button>
            )}
            <button type="button" class="danger" onClick={() => void act('cancel')}>
              Cancel
            </button>
          </>
        )}
        {notice && <span role="status">{notice}</span>}
      </div>
      <Summary job={job} />
      <Timeline job={job} />
      <Checkpoints job={job} onResume={canAct && job.status === 'paused' ? (step) => void act('resume', step) : null} />
      {job.run_id ? <Charts runId={job.run_id} live={ended ? null : live} resync={resync} /> : <p class="muted">This job logs to no run: nothing to plot.</p>}
      <Log lines={lines} done={logEnded} />
    </main>
  );
}

/** The job's checkpoints with the metrics its run logged at their steps; a paused job resumes from any of them. */
function Checkpoints({ job, onResume }: { job: JobDetail; onResume: ((step: number) => void) | null }) {
  if (job.checkpoints.length === 0) return null;
  const keys = [...new Set(job.checkpoints.flatMap((c) => Object.keys(c.metrics)))].sort();
  return (
    <section class="checkpoints">
      <h2>Checkpoints</h2>
      <table>
        <thead>
          <tr>
            <th>step</th>
            <th>segment</th>
            <th>written</th>
            {keys.map((k) => (
              <th>{k}</th>
            ))}
            {onResume && <th />}
          </tr>
        </thead>
        <tbody>
          {job.checkpoints.map((c) => (
            <tr data-step={c.step}>
              <td>{c.step}</td>
              <td>{c.segment}</td>
              <td>{time(c.created_at)}</td>
              {keys.map((k) => (
                <td>{num(c.metrics[k])}</td>
              ))}
              {onResume && (
                <td>
                  <button type="button" onClick={() => onResume(c.step)}>
                    Resume from here
                  </button>
                </td>
              )}
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

function Summary({ job }: { job: JobDetail }) {
  return (
    <dl class="summary">
      <dt>Progress</dt>
      <dd>{job.progress ? <Progress step={job.progress.step} max={job.progress.max_steps} /> : '—'}</dd>
      <dt>ETA</dt>
      <dd>{duration(job.progress?.eta_seconds)}</dd>
      <dt>Speed</dt>
      <dd>{job.progress?.steps_per_second ? `${num(job.progress.steps_per_second, 3)} steps/s` : '—'}</dd>
      <dt>GPU hours</dt>
      <dd>{num(job.usage.gpu_hours, 3)}</dd>
      <dt>Cost so far</dt>
      <dd>{usd(job.usage.cost_usd)}</dd>
      <dt>Placement</dt>
      <dd>{job.placement ? `${job.placement.nodes.join(', ') || '—'}${job.placement.gpu_ids.length ? ` (GPU ${job.placement.gpu_ids.join(', ')})` : ''}` : '—'}</dd>
    </dl>
  );
}

/** What happened to the job, in time order: submitted, started, each segment, preemptions, restarts, checkpoints, its end. */
function Timeline({ job }: { job: JobDetail }) {
  const items: { at: string | null; what: string }[] = [
    { at: job.created_at, what: 'submitted' },
    ...(job.started_at ? [{ at: job.started_at, what: 'started' }] : []),
    ...job.segments.map((s) => ({ at: s.started_at, what: `segment ${s.segment}${s.resumed_from ? ` resumed from step ${s.resumed_from.step}` : ''}` })),
    ...job.preemptions.map((p) => ({ at: p.at, what: `preempted at step ${p.step ?? '?'}: ${p.reason}${p.resumed_at ? `; resumed after ${duration(p.lost_seconds)}` : ''}` })),
    ...job.recoveries.map((r) => ({ at: r.at, what: `restart ${r.restart} after ${r.kind.replace(/_/g, " ")} at step ${r.step ?? "?"}: ${r.change}` })),
    ...job.checkpoints.map((c) => ({ at: c.created_at, what: `checkpoint at step ${c.step}${Object.keys(c.metrics).length ? ` (${Object.entries(c.metrics).map(([k, v]) => `${k} ${num(v)}`).join(', ')})` : ''}` })),
    ...(job.ended_at ? [{ at: job.ended_at, what: job.status }] : []),
  ].sort((a, b) => (a.at ?? '').localeCompare(b.at ?? ''));
  return (
    <section>
      <h2>Timeline</h2>
      <ol class="timeline">
        {items.map((i) => (
          <li>
            <span class="muted small">{i.at ? time(i.at) : ''}</span> {i.what}
          </li>
        ))}
      </ol>
    </section>
  );
}

/** The run's charts; the GPU chart's keys (one per device) come from the run's metrics, then from streamed points. */
function Charts({ runId, live, resync }: { runId: string; live: { points: Map<string, LiveSeries>; version: number } | null; resync: number }) {
  const [known, setKnown] = useState<string[]>([]);
  useEffect(() => {
    let on = true;
    api<{ metrics: Record<string, unknown> }>('GET', `/v1/runs/${encodeURIComponent(runId)}`)
      .then((r) => on && setKnown(Object.keys(r.metrics)))
      .catch(() => undefined);
    return () => {
      on = false;
    };
  }, [runId]);
  const streamed = live ? [...live.points.keys()] : [];
  const keys = [...new Set([...known, ...streamed])].sort();
  const charts = useMemo(() => CHARTS.map((c) => ({ title: c.title, keys: c.keys(keys) })), [keys.join('\n')]);
  const points = live ? { points: live.points, version: live.version } : null;
  return (
    <section>
      <h2>Metrics</h2>
      <div class="charts">
        {charts.map((c) => (
          <Chart title={c.title} runId={runId} keys={c.keys} live={points} resync={resync} />
        ))}
      </div>
    </section>
  );
}

/** The job's output as the page's stream delivers it (a dropped connection resumes from its last line). */
function Log({ lines, done }: { lines: string[]; done: boolean }) {
  const box = useRef<HTMLPreElement>(null);
  useEffect(() => {
    if (box.current) box.current.scrollTop = box.current.scrollHeight;
  }, [lines.length]);
  return (
    <section>
      <h2>Log {done && <span class="muted small">(ended)</span>}</h2>
      <pre ref={box} class="log" data-testid="job-log">
        {lines.length ? lines.join('\n') : 'no output yet'}
      </pre>
    </section>
  );
}

// One job: its stage timeline (segments, attempts, preemptions, recoveries), live plots of its run's metrics,
// its log as the API streams it (SSE), a link to its Temporal workflow, and cancel / pause for those allowed.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import type { SessionView } from '../../../contracts/console-session.js';
import type { JobDetail } from '../../../contracts/jobs.js';
import { api, stream } from '../api.js';
import { Chart } from '../chart.js';
import { duration, num, time, usd } from '../format.js';
import { PipelineLink, Progress } from './jobs.js';

const ENDED = new Set(['succeeded', 'failed', 'cancelled']);
const REFRESH_MS = 3000;
/** The log lines kept on the page: a long job's whole log is for the download, not the DOM. */
const MAX_LOG_LINES = 2000;

const CHARTS: { title: string; keys: (all: string[]) => string[] }[] = [
  { title: 'loss', keys: (all) => ['train/loss', 'eval/loss'].filter((k) => all.includes(k)) },
  { title: 'grad norm', keys: () => ['train/grad_norm'] },
  { title: 'learning rate', keys: () => ['train/lr'] },
  { title: 'tokens / second', keys: () => ['train/tokens_per_second'] },
  { title: 'GPU utilization %', keys: (all) => all.filter((k) => /gpu_\d+_utilization_percentage$/.test(k)) },
];

export function JobPage({ id, session }: { id: string; session: SessionView }) {
  const [job, setJob] = useState<JobDetail | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const ended = job ? ENDED.has(job.status) : false;

  useEffect(() => {
    let live = true;
    let timer: ReturnType<typeof setTimeout> | null = null;
    const load = async () => {
      try {
        const j = await api<JobDetail>('GET', `/v1/jobs/${encodeURIComponent(id)}`);
        if (!live) return;
        setJob(j);
        setError(null);
        if (!ENDED.has(j.status)) timer = setTimeout(() => void load(), REFRESH_MS);
      } catch (err) {
        if (live) setError((err as Error).message);
      }
    };
    void load();
    return () => {
      live = false;
      if (timer) clearTimeout(timer);
    };
  }, [id]);

  const act = async (action: 'cancel' | 'pause') => {
    try {
      await api('POST', `/v1/jobs/${encodeURIComponent(id)}/${action}`);
      setNotice(action === 'cancel' ? 'Cancel requested: the job checkpoints and stops.' : 'Pause requested: the job checkpoints and stops; resume it later.');
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
        <p class="queue">
          Waiting in {job.queue.queue}
          {job.queue.position !== null && `, #${job.queue.position}`}
          {job.queue.reason && `: ${job.queue.reason}`}
        </p>
      )}
      <div class="actions">
        {canAct && (
          <>
            <button type="button" onClick={() => void act('pause')}>
              Pause
            </button>
            <button type="button" class="danger" onClick={() => void act('cancel')}>
              Cancel
            </button>
          </>
        )}
        {notice && <span role="status">{notice}</span>}
      </div>
      <Summary job={job} />
      <Timeline job={job} />
      {job.run_id ? <Charts runId={job.run_id} live={!ended} /> : <p class="muted">This job logs to no run: nothing to plot.</p>}
      <Log id={job.id} />
    </main>
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

/** The run's charts; the GPU chart's keys (one per device) come from the run's latest metrics. */
function Charts({ runId, live }: { runId: string; live: boolean }) {
  const [keys, setKeys] = useState<string[]>([]);
  useEffect(() => {
    let on = true;
    const load = () =>
      api<{ metrics: Record<string, unknown> }>('GET', `/v1/runs/${encodeURIComponent(runId)}`)
        .then((r) => on && setKeys(Object.keys(r.metrics).sort()))
        .catch(() => undefined);
    void load();
    const timer = live ? setInterval(() => void load(), 10_000) : null;
    return () => {
      on = false;
      if (timer) clearInterval(timer);
    };
  }, [runId, live]);
  const charts = useMemo(() => CHARTS.map((c) => ({ title: c.title, keys: c.keys(keys) })), [keys.join('\n')]);
  return (
    <section>
      <h2>Metrics</h2>
      <div class="charts">
        {charts.map((c) => (
          <Chart title={c.title} runId={runId} keys={c.keys} refreshMs={live ? 10_000 : null} />
        ))}
      </div>
    </section>
  );
}

/** The job's output, streamed as it is written (SSE; a dropped connection resumes from its last line). */
function Log({ id }: { id: string }) {
  const [lines, setLines] = useState<string[]>([]);
  const [done, setDone] = useState(false);
  const box = useRef<HTMLPreElement>(null);
  useEffect(() => {
    setLines([]);
    setDone(false);
    return stream(
      `/v1/jobs/${encodeURIComponent(id)}/logs`,
      { message: (d) => setLines((prev) => [...prev, ...(d as { text: string }).text.split('\n').filter((l, i, a) => l !== '' || i < a.length - 1)].slice(-MAX_LOG_LINES)) },
      () => setDone(true),
    );
  }, [id]);
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

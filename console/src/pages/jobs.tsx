// The jobs of the organization, newest first, a page at a time from the server (cursor paging): status, where it
// waits and why, progress, ETA and cost so far. A running job's progress and cost come with its list item, so a
// refresh of the page is one request however many of its jobs run.
import { useEffect, useState } from 'preact/hooks';
import type { JobListItem, JobView } from '../../../contracts/jobs.js';
import { api } from '../api.js';
import { duration, percent, usd } from '../format.js';
import { linkHandler } from '../router.js';

const PAGE = 50;
const REFRESH_MS = 5000;

interface JobsPage {
  jobs: JobListItem[];
  next_cursor: string | null;
}

export function JobsPage() {
  const [cursors, setCursors] = useState<(string | null)[]>([null]);
  const [page, setPage] = useState<JobsPage | null>(null);
  const [error, setError] = useState<string | null>(null);
  const cursor = cursors.at(-1) ?? null;

  useEffect(() => {
    let live = true;
    const load = async () => {
      try {
        const q = new URLSearchParams({ limit: String(PAGE) });
        if (cursor) q.set('cursor', cursor);
        const p = await api<JobsPage>('GET', `/v1/jobs?${q}`);
        if (!live) return;
        setPage(p);
        setError(null);
      } catch (err) {
        if (live) setError((err as Error).message);
      }
    };
    void load();
    const timer = setInterval(() => void load(), REFRESH_MS);
    return () => {
      live = false;
      clearInterval(timer);
    };
  }, [cursor]);

  return (
    <main>
      <h1>Jobs</h1>
      {error && <p class="error">{error}</p>}
      {page && page.jobs.length === 0 && <p class="muted">No jobs yet.</p>}
      {page && page.jobs.length > 0 && (
        <table class="jobs">
          <thead>
            <tr>
              <th>Job</th>
              <th>Type</th>
              <th>Status</th>
              <th>Queue</th>
              <th>Progress</th>
              <th>ETA</th>
              <th>Cost so far</th>
              <th>Submitted</th>
            </tr>
          </thead>
          <tbody>
            {page.jobs.map((j) => (
              <JobRow job={j} />
            ))}
          </tbody>
        </table>
      )}
      <nav class="pager">
        <button type="button" disabled={cursors.length === 1} onClick={() => setCursors(cursors.slice(0, -1))}>
          Newer
        </button>
        <button type="button" disabled={!page?.next_cursor} onClick={() => page?.next_cursor && setCursors([...cursors, page.next_cursor])}>
          Older
        </button>
      </nav>
    </main>
  );
}

function JobRow({ job }: { job: JobListItem }) {
  const href = `/jobs/${encodeURIComponent(job.id)}`;
  const progress = job.progress;
  return (
    <tr data-job={job.id}>
      <td>
        <a href={href} onClick={linkHandler(href)}>
          {job.name}
        </a>
        <div class="muted small">
          {job.id}
          <PipelineLink job={job} />
        </div>
      </td>
      <td>{job.type}</td>
      <td>
        <span class={`status status-${job.status}`}>{job.status}</span>
        {job.message && job.status !== 'queued' && <div class="muted small">{job.message}</div>}
      </td>
      <td>{job.queue ? `${job.queue.position !== null ? `#${job.queue.position} in ` : ''}${job.queue.queue}${job.queue.reason ? `: ${job.queue.reason}` : ''}` : job.status === 'queued' ? (job.message ?? 'waiting') : '—'}</td>
      <td>{progress ? <Progress step={progress.step} max={progress.max_steps} /> : '—'}</td>
      <td>{duration(progress?.eta_seconds)}</td>
      <td>{usd(job.usage?.cost_usd)}</td>
      <td class="small">{new Date(job.created_at).toLocaleString()}</td>
    </tr>
  );
}

/** The pipeline a stage job belongs to (its parent `pipeline:<id>`), URL-encoded, or null. */
export const pipelineOf = (job: Pick<JobView, 'parent'>): string | null => (job.parent?.startsWith('pipeline:') ? encodeURIComponent(job.parent.slice('pipeline:'.length)) : null);

/** " · its pipeline", linking a pipeline's stage job to the pipeline's approval page; nothing for other jobs. */
export function PipelineLink({ job }: { job: Pick<JobView, 'parent'> }) {
  const pipeline = pipelineOf(job);
  if (!pipeline) return null;
  const path = `/pipelines/${pipeline}/approval`;
  return (
    <>
      {' · '}
      <a href={path} onClick={linkHandler(path)}>
        its pipeline
      </a>
    </>
  );
}

export function Progress({ step, max }: { step: number; max: number }) {
  const p = percent(step, max);
  return (
    <span class="progress" title={`${step} / ${max} steps`}>
      <progress max={100} value={p} /> {step}/{max}
    </span>
  );
}

// Queues and usage, for admins: the organization's GPUs per type against its quota, its running jobs and the ones
// waiting with their place and why, its GPU-hours and cost per month, and the other organizations' queues as totals
// (an admin of the operator organization sees every organization in full). The API decides who sees what: the
// months of usage are refused to a non-admin, and the page then shows that refusal and reads nothing else.
import { useEffect, useState } from 'preact/hooks';
import type { QueueCatalogue } from '../../../contracts/console.js';
import type { UsageReport } from '../../../contracts/cost.js';
import { ApiFailure, api } from '../api.js';
import { num, time, usd } from '../format.js';
import { linkHandler } from '../router.js';

/** Months of usage shown, the current one last. */
const MONTHS = 6;
const REFRESH_MS = 10_000;

/** An organization of GET /v1/queues (jobs/queue/queue-status.ts OrganizationQueue, with the catalogue's side). */
interface OrganizationQueue extends QueueCatalogue {
  organization: string;
  admitted: number;
  pending: number;
  gpus_in_use: number;
  borrowed_gpus: number | null;
  totals_only: boolean;
  quota: { max_gpus: number | Record<string, number>; max_concurrent_jobs: number } | null;
}

interface View {
  queues: OrganizationQueue[];
  usage: UsageReport;
}

export function QueuesPage({ organization }: { organization: string }) {
  const [view, setView] = useState<View | null>(null);
  const [refused, setRefused] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    let live = true;
    let timer: ReturnType<typeof setTimeout> | null = null;
    const load = async () => {
      try {
        // Usage first: its refusal is the page's, and a refused caller asks for nothing more.
        const usage = await api<UsageReport>('GET', `/v1/usage?months=${MONTHS}`);
        const { organizations } = await api<{ organizations: OrganizationQueue[] }>('GET', '/v1/queues');
        if (!live) return;
        setView({ queues: organizations, usage });
        setError(null);
        timer = setTimeout(() => void load(), REFRESH_MS);
      } catch (err) {
        if (!live) return;
        if (err instanceof ApiFailure && err.status === 403) setRefused(err.message);
        else setError((err as Error).message);
      }
    };
    void load();
    return () => {
      live = false;
      if (timer) clearTimeout(timer);
    };
  }, []);

  if (refused)
    return (
      <main>
        <h1>Queues and usage</h1>
        <p class="error" role="alert">
          Queues and usage are for admins of the organization. The API refused: {refused}
        </p>
      </main>
    );
  if (error) return <main><p class="error">{error}</p></main>;
  if (!view) return <main><p class="muted">loading…</p></main>;
  const own = view.queues.find((q) => q.organization === organization) ?? null;
  const full = view.queues.filter((q) => !q.totals_only);
  const others = view.queues.filter((q) => q.organization !== organization);
  return (
    <main class="queues">
      <h1>Queues and usage</h1>
      {own && <Gpus queue={own} />}
      <ActiveJobs queues={full} showOrganization={full.length > 1} />
      <Usage usage={view.usage} />
      {others.length > 0 && <OtherOrganizations queues={others} />}
    </main>
  );
}

function Gpus({ queue }: { queue: OrganizationQueue }) {
  return (
    <section>
      <h2>GPUs of {queue.organization}</h2>
      <p class="muted">
        {queue.admitted} admitted, {queue.pending} waiting · {queue.gpus_in_use} GPUs in use
        {queue.borrowed_gpus ? `, ${queue.borrowed_gpus} borrowed from the cohort` : ''}
        {queue.quota ? ` · at most ${queue.quota.max_concurrent_jobs} jobs at once` : ' · no quota configured'}
      </p>
      {queue.gpu_types.length > 0 && (
        <table class="gpu-types">
          <thead>
            <tr>
              <th>GPU type</th>
              <th>Quota (nominal)</th>
              <th>In use</th>
            </tr>
          </thead>
          <tbody>
            {queue.gpu_types.map((t) => (
              <tr data-gpu-type={t.gpu_type}>
                <td>{t.gpu_type}</td>
                <td>{t.quota ?? '—'}</td>
                <td>{t.in_use}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

function ActiveJobs({ queues, showOrganization }: { queues: OrganizationQueue[]; showOrganization: boolean }) {
  const jobs = queues.flatMap((q) => q.active_jobs.map((j) => ({ ...j, organization: q.organization })));
  return (
    <section>
      <h2>Running and waiting</h2>
      {jobs.length === 0 ? (
        <p class="muted">No job runs or waits.</p>
      ) : (
        <table class="active-jobs">
          <thead>
            <tr>
              {showOrganization && <th>Organization</th>}
              <th>Job</th>
              <th>Status</th>
              <th>Place</th>
              <th>Why it waits</th>
              <th>GPUs</th>
              <th>Since</th>
            </tr>
          </thead>
          <tbody>
            {jobs.map((j) => {
              const href = `/jobs/${encodeURIComponent(j.id)}`;
              return (
                <tr data-job={j.id}>
                  {showOrganization && <td>{j.organization}</td>}
                  <td>
                    <a href={href} onClick={linkHandler(href)}>
                      {j.name}
                    </a>
                    <div class="muted small">{j.type}</div>
                  </td>
                  <td>
                    <span class={`status status-${j.status}`}>{j.status}</span>
                  </td>
                  <td>{j.position !== null ? `#${j.position}` : '—'}</td>
                  <td>{j.reason ?? '—'}</td>
                  <td>{j.gpus ? `${j.gpus} × ${j.gpu_type ?? 'any'}` : 'none'}</td>
                  <td class="small">{time(j.started_at ?? j.created_at)}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </section>
  );
}

function Usage({ usage }: { usage: UsageReport }) {
  const months = (usage.history ?? [{ month: usage.month, organizations: usage.organizations }]).slice().reverse();
  return (
    <section>
      <h2>GPU-hours and cost per month</h2>
      <table class="usage">
        <thead>
          <tr>
            <th>Month</th>
            <th>Organization</th>
            <th>GPU-hours</th>
            <th>Cost</th>
            <th>Jobs</th>
            <th>Budget</th>
          </tr>
        </thead>
        <tbody>
          {months.flatMap((m) =>
            m.organizations.length === 0
              ? [
                  <tr data-month={m.month}>
                    <td>{m.month}</td>
                    <td colSpan={5} class="muted">
                      no finished training
                    </td>
                  </tr>,
                ]
              : m.organizations.map((r) => (
                  <tr data-month={m.month} data-organization={r.organization_id}>
                    <td>{m.month}</td>
                    <td>{r.organization_id}</td>
                    <td>{num(r.gpu_hours, 3)}</td>
                    <td>{usd(r.cost_usd)}</td>
                    <td>{r.jobs}</td>
                    <td>{r.monthly_budget_usd === null ? '—' : usd(r.monthly_budget_usd)}</td>
                  </tr>
                )),
          )}
        </tbody>
      </table>
    </section>
  );
}

function OtherOrganizations({ queues }: { queues: OrganizationQueue[] }) {
  return (
    <section>
      <h2>Other organizations</h2>
      <table class="other-queues">
        <thead>
          <tr>
            <th>Organization</th>
            <th>Admitted</th>
            <th>Waiting</th>
            <th>GPUs in use</th>
            <th>Borrowed</th>
          </tr>
        </thead>
        <tbody>
          {queues.map((q) => (
            <tr data-organization={q.organization}>
              <td>
                {q.organization} {q.totals_only && <span class="muted small">(totals only)</span>}
              </td>
              <td>{q.admitted}</td>
              <td>{q.pending}</td>
              <td>{q.gpus_in_use}</td>
              <td>{q.borrowed_gpus ?? '—'}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

// The organization's hyperparameter sweeps, newest first: strategy, status and best trial, each linking to its page.
import { useEffect, useState } from 'preact/hooks';
import { api } from '../api.js';
import { time } from '../format.js';
import { linkHandler } from '../router.js';

interface SweepSummary {
  id: string;
  experiment: string;
  strategy: string;
  status: string;
  best_trial: number | null;
  created_at: string;
}

export function SweepsPage() {
  const [sweeps, setSweeps] = useState<SweepSummary[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    api<{ sweeps: SweepSummary[] }>('GET', '/v1/hpo')
      .then((r) => setSweeps(r.sweeps))
      .catch((e: Error) => setError(e.message));
  }, []);
  return (
    <main>
      <h1>Sweeps</h1>
      {error && <p class="error">{error}</p>}
      {sweeps && sweeps.length === 0 && <p class="muted">No sweeps yet: start one with hanzo-ml hpo or POST /v1/hpo.</p>}
      {sweeps && sweeps.length > 0 && (
        <table class="sweeps">
          <thead>
            <tr>
              <th>Sweep</th>
              <th>Strategy</th>
              <th>Status</th>
              <th>Best trial</th>
              <th>Started</th>
            </tr>
          </thead>
          <tbody>
            {sweeps.map((s) => {
              const href = `/sweeps/${encodeURIComponent(s.id)}`;
              return (
                <tr data-sweep={s.id}>
                  <td>
                    <a href={href} onClick={linkHandler(href)}>
                      {s.experiment}
                    </a>
                    <div class="muted small">{s.id}</div>
                  </td>
                  <td>{s.strategy}</td>
                  <td>
                    <span class={`status status-${s.status === 'completed' ? 'succeeded' : s.status}`}>{s.status}</span>
                  </td>
                  <td>{s.best_trial ?? '—'}</td>
                  <td class="small">{time(s.created_at)}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </main>
  );
}

// The experiments of the organization (GET /v1/experiments), and one experiment's page: its name and its runs table
// (runs.tsx), from which runs are chosen for the compare page.
import { useEffect, useState } from 'preact/hooks';
import { api } from '../api.js';
import { time } from '../format.js';
import { linkHandler } from '../router.js';
import { RunsTable } from './runs.js';

interface Experiment {
  id: string;
  name: string;
  created_at: string;
}

export function ExperimentsPage() {
  const [list, setList] = useState<Experiment[] | null>(null);
  const [offset, setOffset] = useState(0);
  const [next, setNext] = useState<number | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    api<{ experiments: Experiment[]; next_offset: number | null }>('GET', `/v1/experiments?limit=100&offset=${offset}`)
      .then((p) => {
        setList(p.experiments);
        setNext(p.next_offset);
      })
      .catch((e: Error) => setError(e.message));
  }, [offset]);
  return (
    <main>
      <h1>Experiments</h1>
      {error && <p class="error">{error}</p>}
      {list && list.length === 0 && <p class="muted">No experiments yet.</p>}
      {list && list.length > 0 && (
        <table class="experiments">
          <thead>
            <tr>
              <th>name</th>
              <th>id</th>
              <th>created</th>
            </tr>
          </thead>
          <tbody>
            {list.map((e) => (
              <tr key={e.id} data-experiment={e.id}>
                <td>
                  <a href={`/experiments/${encodeURIComponent(e.id)}`} onClick={linkHandler(`/experiments/${encodeURIComponent(e.id)}`)}>
                    {e.name}
                  </a>
                </td>
                <td class="small muted">{e.id}</td>
                <td>{time(e.created_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <div class="pager">
        <button type="button" disabled={offset === 0} onClick={() => setOffset(Math.max(0, offset - 100))}>
          Previous
        </button>
        <button type="button" disabled={next === null} onClick={() => next !== null && setOffset(next)}>
          Next
        </button>
      </div>
    </main>
  );
}

export function ExperimentPage({ id }: { id: string }) {
  const [name, setName] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    api<Experiment>('GET', `/v1/experiments/${encodeURIComponent(id)}`)
      .then((e) => setName(e.name))
      .catch((e: Error) => setError(e.message));
  }, [id]);
  return (
    <main>
      <h1>Experiment {name ?? id}</h1>
      {error ? <p class="error">{error}</p> : <RunsTable experimentId={id} />}
    </main>
  );
}

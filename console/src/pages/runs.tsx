// An experiment's runs as one long table that stays fast at 10,000 runs: the scroll area is sized for every run
// (the server's total) and the rows in view are fetched by position, a page of 100 at the offset they sit at in the
// current order and filter, once the scroll has settled (virtual.ts: PagedRows); so a drag of the scroll bar to row
// 9,000 asks for the page there alone. Only the rows in view are in the DOM; a click on a column header sorts on the
// server (order_by), the filter box filters there (MLflow's grammar). The metric and param columns are chosen by the
// user (by default a few of the newest run's). Selected runs open the compare page.
import { useEffect, useRef, useState } from 'preact/hooks';
import type { RunsPage, RunsTableRow, WireDouble } from '../../../contracts/console.js';
import { api } from '../api.js';
import { num, time } from '../format.js';
import { linkHandler, navigate } from '../router.js';
import { usePagedRows, type PageAnswer } from '../virtual.js';

const PAGE = 100;
const ROW_HEIGHT = 33;
/** runs a compare page draws at most (the batch series call's limit) */
export const MAX_COMPARE = 100;
/** columns proposed from the newest run when the URL names none */
const DEFAULT_COLUMNS = 3;

/** A column of the table: an attribute, or metrics.<key> / params.<key>. */
interface Column {
  id: string;
  label: string;
  /** the server's ORDER BY name */
  sort: string;
  cell: (r: RunsTableRow) => string;
}

const quoted = (key: string) => (/^[\w.]+$/.test(key) ? key : `\`${key}\``);
const wireNum = (v: WireDouble | undefined) => (v === undefined ? '—' : typeof v === 'number' ? num(v) : v);

const ATTRIBUTES: Column[] = [
  { id: 'name', label: 'run', sort: 'attributes.run_name', cell: (r) => r.name },
  { id: 'status', label: 'status', sort: 'attributes.status', cell: (r) => r.status },
  { id: 'start_time', label: 'started', sort: 'attributes.start_time', cell: (r) => time(r.start_time) },
];

function columnOf(id: string): Column {
  const [kind, ...rest] = id.split('.');
  const key = rest.join('.');
  if (kind === 'metrics') return { id, label: key, sort: `metrics.${quoted(key)}`, cell: (r) => wireNum(r.metrics[key]) };
  return { id, label: key, sort: `params.${quoted(key)}`, cell: (r) => r.params[key] ?? '—' };
}

/** The query of the table's list (its order, filter and columns), without the page's place. */
function listQuery(columns: string[], orderBy: string | null, filter: string): URLSearchParams {
  const q = new URLSearchParams({ columns: columns.join(',') });
  if (orderBy) q.set('order_by', orderBy);
  if (filter) q.set('filter', filter);
  return q;
}

/** The page of `limit` runs at `offset` of the list `query` names. */
async function runsAt(experimentId: string, query: URLSearchParams, offset: number, limit: number, signal: AbortSignal): Promise<PageAnswer<RunsTableRow>> {
  const q = new URLSearchParams(query);
  q.set('offset', String(offset));
  q.set('limit', String(limit));
  const page = await api<RunsPage>('GET', `/v1/experiments/${encodeURIComponent(experimentId)}/runs?${q}`, undefined, signal);
  return { rows: page.runs, total: page.total };
}

/** The metric and param columns of the newest run, a few of each: the table's columns when the URL names none. */
async function proposedColumns(experimentId: string): Promise<string[]> {
  const first = await api<RunsPage>('GET', `/v1/experiments/${encodeURIComponent(experimentId)}/runs?limit=1`);
  const run = first.runs[0];
  if (!run) return [];
  return [...Object.keys(run.metrics).sort().slice(0, DEFAULT_COLUMNS).map((k) => `metrics.${k}`), ...Object.keys(run.params).sort().slice(0, DEFAULT_COLUMNS).map((k) => `params.${k}`)];
}

export function RunsTable({ experimentId }: { experimentId: string }) {
  const search = new URLSearchParams(location.search);
  const [columns, setColumns] = useState<string[] | null>(search.has('columns') ? search.get('columns')!.split(',').filter(Boolean) : null);
  const [orderBy, setOrderBy] = useState<string | null>(search.get('order_by'));
  const [filter, setFilter] = useState(search.get('filter') ?? '');
  const [error, setError] = useState<string | null>(null);
  const [selected, setSelected] = useState<string[]>([]);
  const marked = useRef(false);
  const complete = useRef(true);
  const box = useRef<HTMLDivElement>(null);
  const query = columns === null ? null : listQuery(columns, orderBy, filter);
  const { pager, view } = usePagedRows<RunsTableRow>(box, ROW_HEIGHT, PAGE, query && `${experimentId}?${query}`, (offset, limit, signal) => runsAt(experimentId, query!, offset, limit, signal));
  const total = pager?.total ?? null;

  useEffect(() => {
    if (columns === null) proposedColumns(experimentId).then(setColumns, (e: Error) => setError(e.message));
  }, [experimentId, columns === null]);

  // A new order or filter starts at the top; the URL keeps it (a reload or a shared link shows the same table).
  useEffect(() => {
    if (box.current) box.current.scrollTop = 0;
    history.replaceState(null, '', `${location.pathname}?${new URLSearchParams({ ...(columns ? { columns: columns.join(',') } : {}), ...(orderBy ? { order_by: orderBy } : {}), ...(filter ? { filter } : {}) })}`);
  }, [experimentId, columns?.join(','), orderBy, filter]);

  // The marks the console's bench times the table by: its first rows on screen, and every row in view drawn
  // once they were missing (after a jump).
  const inView = pager !== null && pager.holds(view.start, view.end);
  useEffect(() => {
    if (total !== null && total > 0 && inView && !marked.current) {
      marked.current = true;
      performance.mark('runs-table:first-row');
    }
    if (inView && !complete.current) performance.mark('runs-table:in-view');
    complete.current = inView;
  }, [inView, total]);

  const shown = [...ATTRIBUTES, ...(columns ?? []).map(columnOf)];
  const sortBy = (c: Column) => setOrderBy(orderBy === `${c.sort} ASC` ? `${c.sort} DESC` : `${c.sort} ASC`);
  const arrow = (c: Column) => (orderBy === `${c.sort} ASC` ? ' ▲' : orderBy === `${c.sort} DESC` ? ' ▼' : '');
  const toggle = (id: string) => setSelected((s) => (s.includes(id) ? s.filter((x) => x !== id) : s.length < MAX_COMPARE ? [...s, id] : s));
  const metricKeys = (columns ?? []).filter((c) => c.startsWith('metrics.')).map((c) => c.slice('metrics.'.length));
  const compare = () => navigate(`/compare?${new URLSearchParams({ runs: selected.join(','), keys: metricKeys.join(',') })}`);

  return (
    <>
      <form
        class="runs-controls"
        onSubmit={(e) => {
          e.preventDefault();
          const form = e.currentTarget as HTMLFormElement;
          setFilter((form.elements.namedItem('filter') as HTMLInputElement).value.trim());
          setColumns((form.elements.namedItem('columns') as HTMLInputElement).value.split(',').map((s) => s.trim()).filter(Boolean));
        }}
      >
        <label>
          filter <input name="filter" class="wide" defaultValue={filter} placeholder="metrics.loss < 0.5 and params.method = 'lora'" />
        </label>
        <label>
          columns <input name="columns" class="wide" defaultValue={(columns ?? []).join(',')} key={(columns ?? []).join(',')} placeholder="metrics.loss,params.lr" />
        </label>
        <button type="submit">Apply</button>
        <button type="button" disabled={selected.length === 0 || metricKeys.length === 0} onClick={compare} title={metricKeys.length === 0 ? 'add a metrics.<key> column to compare' : ''}>
          Compare {selected.length > 0 ? `(${selected.length})` : ''}
        </button>
        <span class="muted" data-testid="runs-total">
          {total === null ? '' : `${total.toLocaleString()} runs`}
          {pager?.loading ? ' · loading…' : ''}
        </span>
      </form>
      {(error ?? pager?.error) && <p class="error">{error ?? pager?.error}</p>}
      <div ref={box} class="runs-scroll" data-loaded={pager?.held ?? 0}>
        <table class="runs">
          <thead>
            <tr>
              <th />
              {shown.map((c) => (
                <th key={c.id} data-column={c.id}>
                  <button type="button" class="link" onClick={() => sortBy(c)}>
                    {c.label}
                    {arrow(c)}
                  </button>
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {view.before > 0 && <tr style={{ height: `${view.before}px` }} />}
            {Array.from({ length: view.end - view.start }, (_, k) => {
              const i = view.start + k;
              const r = pager?.rowAt(i);
              if (!r)
                return (
                  <tr key={i} data-index={i} class="pending" style={{ height: `${ROW_HEIGHT}px` }}>
                    <td colSpan={shown.length + 1} class="muted">
                      …
                    </td>
                  </tr>
                );
              return (
                <tr key={i} data-index={i} data-run={r.id} style={{ height: `${ROW_HEIGHT}px` }}>
                  <td>
                    <input type="checkbox" aria-label={`select ${r.name}`} checked={selected.includes(r.id)} onChange={() => toggle(r.id)} />
                  </td>
                  {shown.map((c) => (
                    <td key={c.id}>{c.cell(r)}</td>
                  ))}
                </tr>
              );
            })}
            {view.after > 0 && <tr style={{ height: `${view.after}px` }} />}
          </tbody>
        </table>
      </div>
      {total === 0 && <p class="muted">No runs{filter ? ' match the filter' : ''}.</p>}
      <p class="small muted">
        <a href="/experiments" onClick={linkHandler('/experiments')}>
          all experiments
        </a>
      </p>
    </>
  );
}

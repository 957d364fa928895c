// A run's metric series for the charts. The downsampled series endpoint (GET /v1/runs/{id}/metrics/{key}/series,
// contracts/console.ts: at most `points` buckets with min/max/last, spikes kept) answers one call per chart and
// zoom; on a server without it, the metric history is paged (GET /v1/runs/{id}/metrics) and thinned here.
import { api, ApiFailure } from './api.js';

/** A series as the charts draw it: steps and values, and per point the bucket's min and max when downsampled. */
export interface Points {
  steps: number[];
  values: (number | null)[];
  min: (number | null)[];
  max: (number | null)[];
}

/** The columns of contracts/console.ts SeriesSchema that the charts read. */
interface SeriesBuckets {
  step_last: number[];
  min: (number | string | null)[];
  max: (number | string | null)[];
  last: (number | string)[];
}

const wire = (v: number | string | null): number | null => (typeof v === 'number' ? v : v === 'Infinity' ? Infinity : v === '-Infinity' ? -Infinity : null);

let seriesEndpoint: boolean | null = null;

export async function fetchSeries(runId: string, key: string, range: { from?: number; to?: number } = {}, points = 2000): Promise<Points> {
  if (seriesEndpoint !== false) {
    const q = new URLSearchParams({ points: String(points) });
    if (range.from !== undefined) q.set('from_step', String(Math.floor(range.from)));
    if (range.to !== undefined) q.set('to_step', String(Math.ceil(range.to)));
    try {
      const s = await api<SeriesBuckets>('GET', `/v1/runs/${encodeURIComponent(runId)}/metrics/${encodeURIComponent(key)}/series?${q}`);
      seriesEndpoint = true;
      return { steps: s.step_last, values: s.last.map(wire), min: s.min.map(wire), max: s.max.map(wire) };
    } catch (err) {
      // A 404 naming no route (not a missing run) means this server has no series endpoint yet.
      if (!(err instanceof ApiFailure && err.status === 404 && /no route/.test(err.message))) throw err;
      seriesEndpoint = false;
    }
  }
  return thin(await history(runId, key), range, points);
}

interface HistoryPage {
  metrics: { step: number; value: number | string }[];
  next_page_token: string | null;
}

/** The whole history of one key, page by page (the fallback: fine for the thousands of steps of a fine-tune). */
async function history(runId: string, key: string): Promise<{ step: number; value: number | null }[]> {
  const out: { step: number; value: number | null }[] = [];
  let token: string | null = null;
  do {
    const q = new URLSearchParams({ key, limit: '25000' });
    if (token) q.set('page_token', token);
    const page: HistoryPage = await api<HistoryPage>('GET', `/v1/runs/${encodeURIComponent(runId)}/metrics?${q}`);
    for (const m of page.metrics) out.push({ step: m.step, value: wire(m.value) });
    token = page.next_page_token;
  } while (token);
  return out;
}

/** At most `points` buckets of consecutive points: each keeps its last value and its min and max. */
export function thin(all: { step: number; value: number | null }[], range: { from?: number; to?: number }, points: number): Points {
  const inRange = all.filter((p) => (range.from === undefined || p.step >= range.from) && (range.to === undefined || p.step <= range.to));
  const size = Math.max(1, Math.ceil(inRange.length / points));
  const out: Points = { steps: [], values: [], min: [], max: [] };
  for (let i = 0; i < inRange.length; i += size) {
    const bucket = inRange.slice(i, i + size);
    const finite = bucket.map((p) => p.value).filter((v): v is number => v !== null && Number.isFinite(v));
    out.steps.push(bucket.at(-1)!.step);
    out.values.push(bucket.at(-1)!.value);
    out.min.push(finite.length ? Math.min(...finite) : null);
    out.max.push(finite.length ? Math.max(...finite) : null);
  }
  return out;
}

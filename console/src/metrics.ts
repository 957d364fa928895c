// A run's metric series for the charts: the API downsamples on the server (GET /v1/runs/{id}/metrics/{key}/series,
// contracts/console.ts: at most `points` buckets with min/max/last, spikes kept), one call per chart and per zoom.
import type { Series, WireDouble } from '../../contracts/console.js';
import { api } from './api.js';

/** A series as the charts draw it: steps and values, and per point the bucket's min and max. */
export interface Points {
  steps: number[];
  values: (number | null)[];
  min: (number | null)[];
  max: (number | null)[];
}

const wire = (v: WireDouble | null): number | null => (typeof v === 'number' ? v : v === 'Infinity' ? Infinity : v === '-Infinity' ? -Infinity : null);

export async function fetchSeries(runId: string, key: string, range: { from?: number; to?: number } = {}, points = 2000): Promise<Points> {
  const q = new URLSearchParams({ points: String(points) });
  if (range.from !== undefined) q.set('from_step', String(Math.floor(range.from)));
  if (range.to !== undefined) q.set('to_step', String(Math.ceil(range.to)));
  const s = await api<Series>('GET', `/v1/runs/${encodeURIComponent(runId)}/metrics/${encodeURIComponent(key)}/series?${q}`);
  return { steps: s.step_last, values: s.last.map(wire), min: s.min.map(wire), max: s.max.map(wire) };
}

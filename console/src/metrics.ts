// Metric series for the charts: the API downsamples on the server (contracts/console.ts: at most `points` buckets
// with min/max/last, spikes kept), one call per chart and per zoom: a run's keys one by one (the job page), or many
// runs' key in one batch call (the compare page). Values come as float32 text: half the bytes, more digits than a
// chart draws.
import type { Series, SeriesBatch, WireDouble } from '../../contracts/console.js';
import { api } from './api.js';

/** A series as the charts draw it: steps and values, and per point the bucket's min and max. */
export interface Points {
  steps: number[];
  values: (number | null)[];
  min: (number | null)[];
  max: (number | null)[];
}

/** A step range to draw; absent ends are the series' own. */
export interface StepRange {
  from?: number;
  to?: number;
}

const wire = (v: WireDouble | null): number | null => (typeof v === 'number' ? v : v === 'Infinity' ? Infinity : v === '-Infinity' ? -Infinity : null);
const points = (s: Series): Points => ({ steps: s.step_last, values: s.last.map(wire), min: s.min.map(wire), max: s.max.map(wire) });

export async function fetchSeries(runId: string, key: string, range: StepRange = {}, count = 2000): Promise<Points> {
  const q = new URLSearchParams({ points: String(count), precision: 'float32' });
  if (range.from !== undefined) q.set('from_step', String(Math.floor(range.from)));
  if (range.to !== undefined) q.set('to_step', String(Math.ceil(range.to)));
  return points(await api<Series>('GET', `/v1/runs/${encodeURIComponent(runId)}/metrics/${encodeURIComponent(key)}/series?${q}`));
}

/** One key of many runs in one call (POST /v1/runs/series), in the order of `runIds`. */
export async function fetchSeriesBatch(runIds: string[], key: string, range: StepRange = {}, count = 500): Promise<Points[]> {
  const body = {
    run_ids: runIds,
    keys: [key],
    points: count,
    precision: 'float32',
    ...(range.from !== undefined ? { from_step: Math.max(0, Math.floor(range.from)) } : {}),
    ...(range.to !== undefined ? { to_step: Math.max(0, Math.ceil(range.to)) } : {}),
  };
  return (await api<SeriesBatch>('POST', '/v1/runs/series', body)).series.map(points);
}

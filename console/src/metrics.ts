// Metric series for the charts: the API downsamples on the server (contracts/console.ts: at most `points` buckets
// with min/max/last, spikes kept), one call per chart and per zoom: a run's keys one by one (the job page), or many
// runs' keys in one batch call (the compare page, whose charts on screen share one call). Values come as float32
// text: half the bytes, more digits than a chart draws.
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
/** Most float32 answers are numbers throughout: those arrays are taken as they are, not copied. */
const numbers = (xs: (WireDouble | null)[]): (number | null)[] => (xs.every((v) => typeof v === 'number') ? (xs as number[]) : xs.map(wire));
const points = (s: Series): Points => ({ steps: s.step_last, values: numbers(s.last), min: numbers(s.min), max: numbers(s.max) });

export async function fetchSeries(runId: string, key: string, range: StepRange = {}, count = 2000): Promise<Points> {
  const q = new URLSearchParams({ points: String(count), precision: 'float32' });
  if (range.from !== undefined) q.set('from_step', String(Math.floor(range.from)));
  if (range.to !== undefined) q.set('to_step', String(Math.ceil(range.to)));
  return points(await api<Series>('GET', `/v1/runs/${encodeURIComponent(runId)}/metrics/${encodeURIComponent(key)}/series?${q}`));
}

/**
 * The most keys one batch call carries. The charts on a screen (6-8) fit one call: the browser opens at most 6
 * connections per origin over HTTP/1.1, so a call per chart queued behind the page's others, and each call pays
 * its authentication and run check again. contracts/console.ts bounds the call (runs x keys x points) as well.
 */
const KEYS_PER_CALL = 10;

interface Pending {
  keys: Map<string, { resolve: (p: Points[]) => void; reject: (e: Error) => void }[]>;
}

/** Calls asked within one task, by everything but the key: the charts made visible together share one call. */
const pending = new Map<string, Pending>();

/**
 * One key of many runs (POST /v1/runs/series), in the order of `runIds`. Charts that ask in the same task for the
 * same runs, range and points are answered by one call of all their keys (at most KEYS_PER_CALL a call).
 */
export function fetchSeriesBatch(runIds: string[], key: string, range: StepRange = {}, count = 500): Promise<Points[]> {
  const body = batchBody(runIds, range, count);
  const id = JSON.stringify(body);
  let batch = pending.get(id);
  if (!batch) {
    const created: Pending = { keys: new Map() };
    pending.set(id, created);
    setTimeout(() => {
      pending.delete(id);
      void sendBatch(body, created);
    }, 0);
    batch = created;
  }
  return new Promise((resolve, reject) => {
    const waiting = batch.keys.get(key) ?? [];
    waiting.push({ resolve, reject });
    batch.keys.set(key, waiting);
  });
}

/**
 * Keys of many runs asked now, in calls of their own (not joined with what else the task asks): for a call that
 * must leave before the page's next rendering, which may hold the main thread long after this task. One promise
 * per key, in the order of `keys`.
 */
export function fetchSeriesKeys(runIds: string[], keys: string[], range: StepRange = {}, count = 500): Promise<Points[]>[] {
  const batch: Pending = { keys: new Map() };
  const answers = keys.map((key) => new Promise<Points[]>((resolve, reject) => batch.keys.set(key, [{ resolve, reject }])));
  void sendBatch(batchBody(runIds, range, count), batch);
  return answers;
}

const batchBody = (runIds: string[], range: StepRange, count: number) => ({
  run_ids: runIds,
  points: count,
  precision: 'float32' as const,
  ...(range.from !== undefined ? { from_step: Math.max(0, Math.floor(range.from)) } : {}),
  ...(range.to !== undefined ? { to_step: Math.max(0, Math.ceil(range.to)) } : {}),
});

async function sendBatch(body: { run_ids: string[] } & Record<string, unknown>, batch: Pending): Promise<void> {
  const keys = [...batch.keys.keys()];
  for (let i = 0; i < keys.length; i += KEYS_PER_CALL) {
    const part = keys.slice(i, i + KEYS_PER_CALL);
    performance.mark('series:sent');
    api<SeriesBatch>('POST', '/v1/runs/series', { ...body, keys: part })
      .then((answer) => {
        performance.mark('series:parsed');
        const byId = new Map(answer.series.map((s) => [`${s.run_id}\n${s.key}`, s]));
        for (const key of part) {
          const series = body.run_ids.map((runId) => {
            const s = byId.get(`${runId}\n${key}`);
            if (!s) throw new Error(`the series answer lacks run ${runId}'s ${key}`);
            return points(s);
          });
          for (const w of batch.keys.get(key)!) w.resolve(series);
        }
      })
      .catch((e: Error) => part.forEach((key) => batch.keys.get(key)!.forEach((w) => w.reject(e))));
  }
}

// `hanzo-ml run compare <a> <b> --metrics k1,k2`: params side by side, then final and best value of each metric
// and the difference. "Best" is the minimum for loss-like keys (loss, perplexity, error) and the maximum otherwise.
import type { ApiClient } from './api-client.js';

interface RunView {
  id: string;
  name: string;
  params: Record<string, string>;
  metrics: Record<string, { value: number; step: number }>;
}

const lowerIsBetter = (key: string): boolean => /loss|perplexity|error|wer|cer/i.test(key);

/** The best value of one metric over the run's whole history, read page by page (never all at once). */
async function bestOf(api: ApiClient, runId: string, key: string): Promise<number | null> {
  let best: number | null = null;
  let token: string | null = null;
  do {
    const q = new URLSearchParams({ key, limit: '5000', ...(token ? { page_token: token } : {}) });
    const page: { metrics: { value: number }[]; next_page_token: string | null } = await api.get(`/v1/runs/${runId}/metrics?${q}`);
    for (const m of page.metrics) {
      if (Number.isNaN(m.value)) continue;
      if (best === null || (lowerIsBetter(key) ? m.value < best : m.value > best)) best = m.value;
    }
    token = page.next_page_token;
  } while (token);
  return best;
}

const fmt = (v: number | null | undefined): string => (v === null || v === undefined ? '-' : Number.isInteger(v) ? String(v) : v.toPrecision(6));

export async function compareRuns(api: ApiClient, a: string, b: string, metricKeys: string[]): Promise<Record<string, string>[]> {
  const [ra, rb] = await Promise.all([api.get<RunView>(`/v1/runs/${a}`), api.get<RunView>(`/v1/runs/${b}`)]);
  const keys = metricKeys.length ? metricKeys : [...new Set([...Object.keys(ra.metrics), ...Object.keys(rb.metrics)])].sort();
  const rows: Record<string, string>[] = [];
  for (const p of [...new Set([...Object.keys(ra.params), ...Object.keys(rb.params)])].sort()) {
    const va = ra.params[p] ?? '-';
    const vb = rb.params[p] ?? '-';
    rows.push({ name: `param ${p}`, a: va, b: vb, diff: va === vb ? '' : 'differs', best_a: '', best_b: '' });
  }
  for (const k of keys) {
    const fa = ra.metrics[k]?.value;
    const fb = rb.metrics[k]?.value;
    const [ba, bb] = await Promise.all([bestOf(api, a, k), bestOf(api, b, k)]);
    const diff = fa !== undefined && fb !== undefined ? fmt(fb - fa) : '-';
    rows.push({ name: `metric ${k}`, a: fmt(fa), b: fmt(fb), diff, best_a: fmt(ba), best_b: fmt(bb) });
  }
  return rows;
}

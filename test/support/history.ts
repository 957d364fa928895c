// A page of metric history read through the store's one history reader, its wire JSON parsed back into numbers
// (MLflow's "NaN"/"Infinity"/"-Infinity" strings included), for tests that compare points.
import type { Db } from '../../db/client.js';
import { metricHistory, type HistoryCursor } from '../../db/repo/metrics.js';

export interface Point {
  step: number;
  timestamp: number;
  value: number;
}

const fromWire = (v: number | string): number => (typeof v === 'number' ? v : Number(v));

export async function historyPoints(db: Db, runId: string, key: string, after: HistoryCursor | null, limit: number): Promise<{ points: Point[]; next: HistoryCursor | null }> {
  const page = await metricHistory(db, runId, key, { after, limit });
  const wire = JSON.parse(`[${page.json}]`) as { key: string; value: number | string; timestamp: number; step: number }[];
  if (wire.length !== page.count) throw new Error(`page of ${page.count} points parsed to ${wire.length}`);
  return { points: wire.map((p) => ({ step: p.step, timestamp: p.timestamp, value: fromWire(p.value) })), next: page.next };
}

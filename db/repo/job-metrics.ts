// What a job's detail reads of its run's metrics: the values logged at its checkpoints' steps, and the latest
// points of one series (for the measured step rate).
import { and, desc, eq, gte, inArray } from 'drizzle-orm';
import type { Db } from '../client.js';
import { metrics } from '../schema/index.js';

/** step -> {key: value} for the given steps; of several values logged at one step, the last logged wins. */
export async function metricsAtSteps(db: Db, runId: string, steps: number[]): Promise<Map<number, Record<string, number>>> {
  const out = new Map<number, Record<string, number>>();
  if (steps.length === 0) return out;
  const rows = await db
    .select({ key: metrics.key, step: metrics.step, value: metrics.value, isNan: metrics.isNan })
    .from(metrics)
    .where(and(eq(metrics.runId, runId), inArray(metrics.step, steps)))
    .orderBy(metrics.timestamp);
  for (const r of rows) if (!r.isNan) out.set(r.step, { ...out.get(r.step), [r.key]: r.value });
  return out;
}

/** The newest `limit` points of one series logged at or after `sinceMs`, newest first. */
export async function recentPoints(db: Db, runId: string, key: string, sinceMs: number, limit: number): Promise<{ step: number; timestamp: number }[]> {
  return db
    .select({ step: metrics.step, timestamp: metrics.timestamp })
    .from(metrics)
    .where(and(eq(metrics.runId, runId), eq(metrics.key, key), gte(metrics.timestamp, sinceMs)))
    .orderBy(desc(metrics.timestamp))
    .limit(limit);
}

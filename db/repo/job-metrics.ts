// What a job's detail reads of its run's metrics: the values logged at its checkpoints' steps, and the latest
// points of one series (for the measured step rate).
import { and, desc, eq, gte, inArray } from 'drizzle-orm';
import type { Db } from '../client.js';
import { latestMetrics, metrics } from '../schema/index.js';

/** step -> {key: value} for the given steps; of several values logged at one step, the last logged wins. */
export async function metricsAtSteps(db: Db, runId: string, steps: number[]): Promise<Map<number, Record<string, number>>> {
  const out = new Map<number, Record<string, number>>();
  if (steps.length === 0) return out;
  // The run's keys first, so the lookup walks the primary key (run_id, key, step, ...) instead of every point.
  const keys = (await db.select({ key: latestMetrics.key }).from(latestMetrics).where(eq(latestMetrics.runId, runId))).map((k) => k.key);
  if (keys.length === 0) return out;
  const rows = await db
    .select({ key: metrics.key, step: metrics.step, value: metrics.value, isNan: metrics.isNan })
    .from(metrics)
    .where(and(eq(metrics.runId, runId), inArray(metrics.key, keys), inArray(metrics.step, steps)))
    .orderBy(metrics.timestamp);
  for (const r of rows) if (!r.isNan) out.set(r.step, { ...out.get(r.step), [r.key]: r.value });
  return out;
}

/**
 * The newest `limit` points of one series logged at or after `sinceMs`, newest first. Ordered by step (the primary
 * key's order after run and key, read backwards), which for a training series is the order they were logged in.
 */
export async function recentPoints(db: Db, runId: string, key: string, sinceMs: number, limit: number): Promise<{ step: number; timestamp: number }[]> {
  return db
    .select({ step: metrics.step, timestamp: metrics.timestamp })
    .from(metrics)
    .where(and(eq(metrics.runId, runId), eq(metrics.key, key), gte(metrics.timestamp, sinceMs)))
    .orderBy(desc(metrics.step), desc(metrics.timestamp))
    .limit(limit);
}

// A run's params (immutable once written) and tags (last write wins), for every API and activity.
import { and, eq, inArray, sql } from 'drizzle-orm';
import type { Db } from '../client.js';
import { runParams, runTags, runs } from '../schema/index.js';
import { dedupe, type KeyValue } from './common.js';

/**
 * Stores parameters, which are immutable: the same value again is a no-op (so a replayed request succeeds),
 * a different value is refused. Returns the conflicting parameters (nothing is written when there are any).
 */
export async function logParams(db: Db, runId: string, params: KeyValue[]): Promise<{ key: string; old: string; new: string }[]> {
  if (params.length === 0) return [];
  return db.transaction(async (tx) => {
    const existing = await tx
      .select()
      .from(runParams)
      .where(and(eq(runParams.runId, runId), inArray(runParams.key, params.map((p) => p.key))));
    const old = new Map(existing.map((r) => [r.key, r.value]));
    const conflicts = params.filter((p) => old.has(p.key) && old.get(p.key) !== p.value).map((p) => ({ key: p.key, old: old.get(p.key)!, new: p.value }));
    if (conflicts.length) return conflicts;
    const fresh = params.filter((p) => !old.has(p.key)).map((p) => ({ runId, ...p }));
    if (fresh.length) await tx.insert(runParams).values(fresh).onConflictDoNothing();
    // A concurrent writer may have won the race with another value: read back and compare.
    const after = await tx
      .select()
      .from(runParams)
      .where(and(eq(runParams.runId, runId), inArray(runParams.key, params.map((p) => p.key))));
    const now = new Map(after.map((r) => [r.key, r.value]));
    return params.filter((p) => now.get(p.key) !== p.value).map((p) => ({ key: p.key, old: now.get(p.key) ?? '', new: p.value }));
  });
}

export async function paramsOf(db: Db, runId: string): Promise<Record<string, string>> {
  const rows = await db.select().from(runParams).where(eq(runParams.runId, runId));
  return Object.fromEntries(rows.map((r) => [r.key, r.value]));
}

/** Sets run tags (last write wins); `mlflow.runName` also renames the run. */
export async function setRunTags(db: Db, runId: string, tags: KeyValue[]): Promise<void> {
  if (tags.length === 0) return;
  const rows = dedupe(tags)
    .sort((a, b) => (a.key < b.key ? -1 : 1))
    .map((t) => ({ runId, ...t }));
  await db
    .insert(runTags)
    .values(rows)
    .onConflictDoUpdate({ target: [runTags.runId, runTags.key], set: { value: sql`excluded.value` } });
  const rename = rows.find((t) => t.key === 'mlflow.runName');
  if (rename) await db.update(runs).set({ name: rename.value }).where(eq(runs.id, runId));
}

/** Deletes a run tag; false when the run has no such tag. */
export async function deleteRunTag(db: Db, runId: string, key: string): Promise<boolean> {
  const gone = await db
    .delete(runTags)
    .where(and(eq(runTags.runId, runId), eq(runTags.key, key)))
    .returning({ key: runTags.key });
  return gone.length > 0;
}

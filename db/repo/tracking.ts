import { randomUUID } from 'node:crypto';
import { and, asc, eq, inArray } from 'drizzle-orm';
import type { Db } from '../client.js';
import { experiments, runArtifacts, runParams, runTags, runs } from '../schema/index.js';
import type { KeyValue } from './mlflow.js';

export type RunRow = typeof runs.$inferSelect;
export async function getOrCreateExperiment(db: Db, organizationId: string, name: string, artifactRoot: string): Promise<string> {
  const id = randomUUID();
  await db
    .insert(experiments)
    .values({ id, organizationId, name, artifactLocation: `${artifactRoot}/experiments/${id}` })
    .onConflictDoNothing();
  const [row] = await db
    .select({ id: experiments.id })
    .from(experiments)
    .where(and(eq(experiments.organizationId, organizationId), eq(experiments.name, name)));
  return row!.id;
}

/** Where a run keeps its artifacts: given, or `<artifact root>/runs/<id>/artifacts` for pipeline and trial runs. */
export type RunArtifactPlace = { artifactUri: string } | { artifactRoot: string };

/**
 * Creates a run, the one way every API and activity does: with a caller-chosen ID, so a retried request or activity
 * finds the run it already made, and with its first params and tags in the same transaction.
 */
export async function createRun(
  db: Db,
  p: {
    id: string;
    organizationId: string;
    experimentId: string;
    name: string;
    userId: string;
    startTime?: number;
    config?: unknown;
    params?: Record<string, string>;
    tags?: KeyValue[];
  } & RunArtifactPlace,
): Promise<void> {
  await db.transaction(async (tx) => {
    await tx
      .insert(runs)
      .values({
        id: p.id,
        organizationId: p.organizationId,
        experimentId: p.experimentId,
        name: p.name,
        status: 'running',
        userId: p.userId,
        artifactUri: 'artifactUri' in p ? p.artifactUri : `${p.artifactRoot}/runs/${p.id}/artifacts`,
        ...(p.startTime !== undefined ? { startTime: new Date(p.startTime) } : {}),
        ...(p.config !== undefined ? { config: p.config } : {}),
      })
      .onConflictDoNothing();
    const params = Object.entries(p.params ?? {}).map(([key, value]) => ({ runId: p.id, key, value }));
    if (params.length) await tx.insert(runParams).values(params).onConflictDoNothing();
    const tags = [...new Map((p.tags ?? []).map((t) => [t.key, t])).values()];
    if (tags.length) await tx.insert(runTags).values(tags.map((t) => ({ runId: p.id, ...t }))).onConflictDoNothing();
  });
}

export async function getRun(db: Db, organizationId: string, id: string): Promise<RunRow | null> {
  const [row] = await db.select().from(runs).where(and(eq(runs.organizationId, organizationId), eq(runs.id, id)));
  return row ?? null;
}

/** Which of these run IDs are the organization's runs (one query, for requests that name many runs). */
export async function runIdsOf(db: Db, organizationId: string, ids: string[]): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const rows = await db
    .select({ id: runs.id })
    .from(runs)
    .where(and(eq(runs.organizationId, organizationId), inArray(runs.id, ids)));
  return new Set(rows.map((r) => r.id));
}

/** Run by ID alone, for the trainer's MLflow calls (the caller's organization is checked by the route). */
export async function getRunById(db: Db, id: string): Promise<RunRow | null> {
  const [row] = await db.select().from(runs).where(eq(runs.id, id));
  return row ?? null;
}

export async function setRunStatus(db: Db, id: string, status: RunRow['status']): Promise<void> {
  const ended = status === 'completed' || status === 'failed' || status === 'cancelled';
  await db.update(runs).set({ status, endTime: ended ? new Date() : null }).where(eq(runs.id, id));
}

export async function logParams(db: Db, runId: string, params: Record<string, string>): Promise<void> {
  const rows = Object.entries(params).map(([key, value]) => ({ runId, key, value }));
  if (rows.length) await db.insert(runParams).values(rows).onConflictDoNothing();
}

export async function paramsOf(db: Db, runId: string): Promise<Record<string, string>> {
  const rows = await db.select().from(runParams).where(eq(runParams.runId, runId));
  return Object.fromEntries(rows.map((r) => [r.key, r.value]));
}

export async function recordArtifact(
  db: Db,
  a: { runId: string; path: string; uri: string; sizeBytes: number; sha256: string; metadata?: Record<string, unknown> },
): Promise<void> {
  await db
    .insert(runArtifacts)
    .values({ ...a, metadata: a.metadata ?? {} })
    .onConflictDoNothing();
}

export async function artifactsOf(db: Db, runId: string): Promise<(typeof runArtifacts.$inferSelect)[]> {
  return db.select().from(runArtifacts).where(eq(runArtifacts.runId, runId)).orderBy(asc(runArtifacts.path));
}

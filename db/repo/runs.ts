// Runs: the one way to create a run (every API and activity), reads by ID, status and lifecycle changes, and the
// params, tags and latest metrics of many runs at once. Searches are in run-search.ts; params and tags are written
// through params-tags.ts, metric points through metrics.ts.
import { and, eq, inArray, ne, sql } from 'drizzle-orm';
import type { Db } from '../client.js';
import { runParams, runTags, runs } from '../schema/index.js';
import type { KeyValue } from './common.js';
import { setRunTags } from './params-tags.js';
import { addRunIoRow, runIoMap, runIoRows, type RunDataRow, type RunIo } from './run-inputs.js';

export type RunRow = typeof runs.$inferSelect;

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

/**
 * Whether the ID names a run of another organization. Inputs that MLflow takes as lineage only (a model version's
 * or a logged model's run) may name a run that exists nowhere, but never one of another organization's.
 */
export async function isOtherOrganizationsRun(db: Db, organizationId: string, id: string): Promise<boolean> {
  const [row] = await db
    .select({ id: runs.id })
    .from(runs)
    .where(and(eq(runs.id, id), ne(runs.organizationId, organizationId)))
    .limit(1);
  return row !== undefined;
}

/** Run by ID alone, for the trainer's MLflow calls (the caller's organization is checked by the route). */
export async function getRunById(db: Db, id: string): Promise<RunRow | null> {
  const [row] = await db.select().from(runs).where(eq(runs.id, id));
  return row ?? null;
}

/** Sets a run's status, end time (null: running again) and name; a new name is also its `mlflow.runName` tag. */
export async function updateRun(db: Db, id: string, set: { status?: RunRow['status']; endTime?: number | null; name?: string }): Promise<void> {
  await db.transaction(async (tx) => {
    const values: Partial<RunRow> = {};
    if (set.status) values.status = set.status;
    if (set.endTime !== undefined) values.endTime = set.endTime === null ? null : new Date(set.endTime);
    if (set.name !== undefined) values.name = set.name;
    if (Object.keys(values).length) await tx.update(runs).set(values).where(eq(runs.id, id));
    if (set.name !== undefined) await setRunTags(tx as unknown as Db, id, [{ key: 'mlflow.runName', value: set.name }]);
  });
}

/** Sets a run's status, ending it now when the status is final (and clearing the end when it runs again). */
export async function setRunStatus(db: Db, id: string, status: RunRow['status']): Promise<void> {
  const ended = status === 'completed' || status === 'failed' || status === 'cancelled';
  await updateRun(db, id, { status, endTime: ended ? Date.now() : null });
}

export async function setRunLifecycle(db: Db, id: string, stage: 'active' | 'deleted'): Promise<void> {
  await db
    .update(runs)
    .set({ lifecycleStage: stage, deletedTime: stage === 'deleted' ? Date.now() : null })
    .where(eq(runs.id, id));
}

/** Our run statuses and MLflow's, one to one. */
export const MLFLOW_STATUS = { queued: 'SCHEDULED', running: 'RUNNING', completed: 'FINISHED', failed: 'FAILED', cancelled: 'KILLED' } as const;
export type MlflowStatus = (typeof MLFLOW_STATUS)[keyof typeof MLFLOW_STATUS];
export const fromMlflowStatus = (s: MlflowStatus): RunRow['status'] =>
  (Object.entries(MLFLOW_STATUS).find(([, v]) => v === s)![0] as RunRow['status']);
export const statusSql = sql`(case ${runs.status} when 'queued' then 'SCHEDULED' when 'running' then 'RUNNING' when 'completed' then 'FINISHED' when 'failed' then 'FAILED' else 'KILLED' end)`;

export interface RunData {
  params: Map<string, KeyValue[]>;
  tags: Map<string, KeyValue[]>;
  metrics: Map<string, { key: string; value: number; timestamp: number; step: number }[]>;
  /** Dataset inputs and model inputs/outputs (log-inputs, outputs). */
  io?: Map<string, RunIo>;
}

/**
 * Params, tags, latest metrics, dataset inputs and model inputs/outputs of several runs in one statement: a
 * search page's 100 runs would otherwise cost three queries on three pooled connections. Numbers come back as
 * text, as in metricHistory.
 */
export async function runDataOf(db: Db, runIds: string[]): Promise<RunData> {
  const empty = <T>() => new Map<string, T[]>(runIds.map((id) => [id, []]));
  const out: RunData = { params: empty(), tags: empty(), metrics: empty(), io: runIoMap(runIds) };
  if (runIds.length === 0) return out;
  const ids = sql`any(${sql.param(runIds)}::text[])`;
  const result = await db.execute(sql`
    select 'p' as kind, run_id, key, value, null as ts, null as step, false as is_nan, key as ord from run_params where run_id = ${ids}
    union all
    select 't', run_id, key, value, null, null, false, key from run_tags where run_id = ${ids}
    union all
    select 'm', run_id, key, value::text, timestamp::text, step::text, is_nan, key from latest_metrics where run_id = ${ids}
    union all
    ${runIoRows(ids)}
    order by kind, ord`);
  for (const r of (result as unknown as { rows: RunDataRow[] }).rows) {
    if (r.kind === 'm') out.metrics.get(r.run_id)!.push({ key: r.key, value: r.is_nan ? NaN : Number(r.value), timestamp: Number(r.ts), step: Number(r.step) });
    else if (r.kind === 'p' || r.kind === 't') (r.kind === 'p' ? out.params : out.tags).get(r.run_id)!.push({ key: r.key, value: r.value });
    else addRunIoRow(out.io!, r);
  }
  return out;
}

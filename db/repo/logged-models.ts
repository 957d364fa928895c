// Storage of MLflow 3 logged models, with their tags, params and metrics. Every lookup is scoped to the caller's
// organization.
import { and, asc, eq, inArray, ne, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../client.js';
import { loggedModelMetrics, loggedModelParams, loggedModelTags, loggedModels } from '../schema/index.js';
import type { Comparison } from '../../lib/search-filter.js';
import { dedupe, type KeyValue } from './common.js';

export type LoggedModelRow = typeof loggedModels.$inferSelect;
export type LoggedModelStatus = LoggedModelRow['status'];

export interface LoggedModelMetric {
  key: string;
  value: number;
  timestamp: number;
  step: number;
  run_id: string;
  dataset_name: string;
  dataset_digest: string;
}
export interface LoggedModelFull {
  row: LoggedModelRow;
  tags: KeyValue[];
  params: KeyValue[];
  metrics: LoggedModelMetric[];
}

export async function createLoggedModel(
  db: Db,
  p: Omit<LoggedModelRow, 'status' | 'statusMessage' | 'lifecycleStage' | 'lastUpdatedTime'> & { tags: KeyValue[]; params: KeyValue[] },
): Promise<void> {
  const { tags, params, ...row } = p;
  await db.transaction(async (tx) => {
    await tx.insert(loggedModels).values({ ...row, status: 'LOGGED_MODEL_PENDING', lastUpdatedTime: row.creationTime });
    if (tags.length) await tx.insert(loggedModelTags).values(dedupe(tags).map((t) => ({ modelId: row.id, ...t })));
    if (params.length) await tx.insert(loggedModelParams).values(dedupe(params).map((t) => ({ modelId: row.id, ...t })));
  });
}

export async function getLoggedModel(db: Db, organizationId: string, id: string, allowDeleted = false): Promise<LoggedModelRow | null> {
  const [row] = await db
    .select()
    .from(loggedModels)
    .where(and(eq(loggedModels.organizationId, organizationId), eq(loggedModels.id, id), allowDeleted ? undefined : eq(loggedModels.lifecycleStage, 'active')));
  return row ?? null;
}

/** Which of these IDs name logged models of another organization (a run's model inputs and outputs may name none). */
export async function loggedModelIdsOfOthers(db: Db, organizationId: string, ids: string[]): Promise<string[]> {
  if (ids.length === 0) return [];
  const rows = await db
    .select({ id: loggedModels.id })
    .from(loggedModels)
    .where(and(inArray(loggedModels.id, ids), ne(loggedModels.organizationId, organizationId)));
  return rows.map((r) => r.id);
}

/** Tags and params of several models in two queries. */
export async function withDetails(db: Db, rows: LoggedModelRow[]): Promise<LoggedModelFull[]> {
  if (rows.length === 0) return [];
  const ids = rows.map((r) => r.id);
  const [tags, params, metrics] = await Promise.all([
    db.select().from(loggedModelTags).where(inArray(loggedModelTags.modelId, ids)).orderBy(asc(loggedModelTags.key)),
    db.select().from(loggedModelParams).where(inArray(loggedModelParams.modelId, ids)).orderBy(asc(loggedModelParams.key)),
    db
      .select()
      .from(loggedModelMetrics)
      .where(inArray(loggedModelMetrics.modelId, ids))
      .orderBy(asc(loggedModelMetrics.key), asc(loggedModelMetrics.timestamp), asc(loggedModelMetrics.step), asc(loggedModelMetrics.runId)),
  ]);
  return rows.map((row) => ({
    row,
    tags: tags.filter((t) => t.modelId === row.id).map(({ key, value }) => ({ key, value })),
    params: params.filter((t) => t.modelId === row.id).map(({ key, value }) => ({ key, value })),
    metrics: metrics
      .filter((m) => m.modelId === row.id)
      .map((m) => ({ key: m.key, value: m.isNan ? NaN : m.value, timestamp: m.timestamp, step: m.step, run_id: m.runId, dataset_name: m.datasetName, dataset_digest: m.datasetDigest })),
  }));
}

export async function updateLoggedModel(db: Db, id: string, set: { status?: LoggedModelStatus; lifecycleStage?: 'active' | 'deleted' }): Promise<void> {
  await db
    .update(loggedModels)
    .set({ ...set, lastUpdatedTime: Date.now() })
    .where(eq(loggedModels.id, id));
}

export async function setLoggedModelTags(db: Db, id: string, tags: KeyValue[]): Promise<void> {
  if (tags.length === 0) return;
  await db
    .insert(loggedModelTags)
    .values(dedupe(tags).map((t) => ({ modelId: id, ...t })))
    .onConflictDoUpdate({ target: [loggedModelTags.modelId, loggedModelTags.key], set: { value: sql`excluded.value` } });
}

/** A string as Python's json.dumps writes it (non-ASCII escaped): MLflow compares the tag's text. */
const pythonString = (v: string): string => JSON.stringify(v).replace(/[\u0080-\uffff]/g, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`);

/**
 * Appends a registered version to the logged model's `mlflow.modelVersions` tag, as MLflow's tracking store does
 * when a version is created from a logged model. The model must be the organization's.
 */
export async function recordModelVersionOnLoggedModel(db: Db, organizationId: string, modelId: string, name: string, version: number): Promise<void> {
  const model = await getLoggedModel(db, organizationId, modelId, true);
  if (!model) return;
  const [existing] = await db
    .select({ value: loggedModelTags.value })
    .from(loggedModelTags)
    .where(and(eq(loggedModelTags.modelId, modelId), eq(loggedModelTags.key, MODEL_VERSIONS_TAG)));
  let list: { name: string; version: number }[] = [];
  try {
    list = existing ? (JSON.parse(existing.value) as typeof list) : [];
  } catch {
    list = [];
  }
  if (!list.some((v) => v.name === name && Number(v.version) === version)) list.push({ name, version });
  await setLoggedModelTags(db, modelId, [{ key: MODEL_VERSIONS_TAG, value: `[${list.map((v) => `{"name": ${pythonString(v.name)}, "version": ${Number(v.version)}}`).join(', ')}]` }]);
}
const MODEL_VERSIONS_TAG = 'mlflow.modelVersions';

export interface ModelMetricInput {
  key: string;
  value: number;
  timestamp: number;
  step: number;
  model_id?: string | undefined;
  dataset_name?: string | undefined;
  dataset_digest?: string | undefined;
}

/**
 * Records the metrics that name a logged model (model_id) for that model too, as MLflow's store does; the models
 * must be the organization's. Returns the model ids that are not (nothing is written then).
 */
export async function logModelMetrics(db: Db, organizationId: string, runId: string, points: ModelMetricInput[]): Promise<string[]> {
  const named = points.filter((m) => m.model_id);
  if (named.length === 0) return [];
  const ids = [...new Set(named.map((m) => m.model_id!))];
  const known = await db
    .select({ id: loggedModels.id })
    .from(loggedModels)
    .where(and(eq(loggedModels.organizationId, organizationId), inArray(loggedModels.id, ids)));
  const missing = ids.filter((id) => !known.some((k) => k.id === id));
  if (missing.length) return missing;
  await db
    .insert(loggedModelMetrics)
    .values(
      named.map((m) => ({
        modelId: m.model_id!,
        key: m.key,
        timestamp: m.timestamp,
        step: m.step,
        runId,
        value: Number.isNaN(m.value) ? 0 : m.value,
        isNan: Number.isNaN(m.value),
        datasetName: m.dataset_name ?? '',
        datasetDigest: m.dataset_digest ?? '',
      })),
    )
    .onConflictDoUpdate({
      target: [loggedModelMetrics.modelId, loggedModelMetrics.key, loggedModelMetrics.timestamp, loggedModelMetrics.step, loggedModelMetrics.runId],
      set: { value: sql`excluded.value`, isNan: sql`excluded.is_nan`, datasetName: sql`excluded.dataset_name`, datasetDigest: sql`excluded.dataset_digest` },
    });
  return [];
}

/** Models with a metric computed on one of these datasets (a digest, when given, must match too). */
function datasetCondition(datasets: { dataset_name?: string | undefined; dataset_digest?: string | undefined }[]): SQL {
  const any = datasets.map(
    (d) => sql`(m.dataset_name = ${d.dataset_name ?? ''}${d.dataset_digest !== undefined ? sql` and m.dataset_digest = ${d.dataset_digest}` : sql``})`,
  );
  return sql`exists (select 1 from logged_model_metrics m where m.model_id = ${loggedModels.id} and (${sql.join(any, sql` or `)}))`;
}

/** False when the model has no such tag. */
export async function deleteLoggedModelTag(db: Db, id: string, key: string): Promise<boolean> {
  const gone = await db
    .delete(loggedModelTags)
    .where(and(eq(loggedModelTags.modelId, id), eq(loggedModelTags.key, key)))
    .returning({ key: loggedModelTags.key });
  return gone.length > 0;
}

/** Params are written once; a replayed param keeps its first value. */
export async function logLoggedModelParams(db: Db, id: string, params: KeyValue[]): Promise<void> {
  if (params.length) await db.insert(loggedModelParams).values(dedupe(params).map((t) => ({ modelId: id, ...t }))).onConflictDoNothing();
}

const MODEL_ATTRIBUTES: Record<string, SQL> = {
  name: sql`${loggedModels.name}`,
  model_id: sql`${loggedModels.id}`,
  model_type: sql`${loggedModels.modelType}`,
  status: sql`${loggedModels.status}`,
  source_run_id: sql`${loggedModels.sourceRunId}`,
  creation_timestamp: sql`${loggedModels.creationTime}`,
  creation_time: sql`${loggedModels.creationTime}`,
  last_updated_timestamp: sql`${loggedModels.lastUpdatedTime}`,
};

function compare(left: SQL, c: Comparison): SQL {
  if (c.op === 'IN' || c.op === 'NOT IN') {
    const list = sql.join((c.value as string[]).map((v) => sql`${v}`), sql`, `);
    return sql`${left} ${sql.raw(c.op)} (${list})`;
  }
  return sql`${left} ${sql.raw(c.op)} ${c.value}`;
}

function modelCondition(c: Comparison): SQL {
  if (c.op === 'IS NULL' || c.op === 'IS NOT NULL')
    return sql`${sql.raw(c.op === 'IS NULL' ? 'not ' : '')}exists (select 1 from logged_model_tags t where t.model_id = ${loggedModels.id} and t.key = ${c.key})`;
  if (c.entity === 'tag') return sql`exists (select 1 from logged_model_tags t where t.model_id = ${loggedModels.id} and t.key = ${c.key} and ${compare(sql`t.value`, c)})`;
  if (c.entity === 'param') return sql`exists (select 1 from logged_model_params t where t.model_id = ${loggedModels.id} and t.key = ${c.key} and ${compare(sql`t.value`, c)})`;
  // Statuses are stored by their proto names; filters say READY, PENDING or FAILED.
  if (c.key === 'status') {
    const full = (v: string) => (v === 'FAILED' ? 'LOGGED_MODEL_UPLOAD_FAILED' : v.startsWith('LOGGED_MODEL_') ? v : `LOGGED_MODEL_${v}`);
    return compare(MODEL_ATTRIBUTES.status!, { ...c, value: Array.isArray(c.value) ? c.value.map(full) : full(String(c.value)) });
  }
  return compare(MODEL_ATTRIBUTES[c.key]!, c);
}

export async function searchLoggedModels(
  db: Db,
  organizationId: string,
  q: {
    experimentIds: string[];
    filter: Comparison[];
    datasets?: { dataset_name?: string | undefined; dataset_digest?: string | undefined }[];
    orderBy: { key: string; ascending: boolean }[];
    offset: number;
    limit: number;
  },
): Promise<{ rows: LoggedModelRow[]; more: boolean }> {
  const order = q.orderBy.map((o) => sql`${MODEL_ATTRIBUTES[o.key]!} ${sql.raw(o.ascending ? 'asc' : 'desc')} nulls last`);
  order.push(sql`${loggedModels.creationTime} desc`, sql`${loggedModels.id} asc`);
  const rows = await db
    .select()
    .from(loggedModels)
    .where(
      and(
        eq(loggedModels.organizationId, organizationId),
        inArray(loggedModels.experimentId, q.experimentIds),
        eq(loggedModels.lifecycleStage, 'active'),
        ...q.filter.map(modelCondition),
        ...(q.datasets?.length ? [datasetCondition(q.datasets)] : []),
      ),
    )
    .orderBy(...order)
    .limit(q.limit + 1)
    .offset(q.offset);
  return { rows: rows.slice(0, q.limit), more: rows.length > q.limit };
}

export const LOGGED_MODEL_ORDER_KEYS = Object.keys(MODEL_ATTRIBUTES);

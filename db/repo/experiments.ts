// Experiments and their tags: the MLflow-compatible API, the /v1 API, pipelines and sweeps all create, read and
// search them here. Every read takes the caller's organization and never returns another organization's rows.
import { randomUUID } from 'node:crypto';
import { and, asc, eq, inArray, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../client.js';
import { experimentTags, experiments } from '../schema/index.js';
import type { Comparison, OrderClause } from '../../lib/search-filter.js';
import { compare, dedupe, epochMs, isUniqueViolation, stageFilter, tagTest, type KeyValue, type ViewType } from './common.js';

export type ExperimentRow = typeof experiments.$inferSelect;

/** The organization's "Default" experiment, which MLflow clients address as experiment "0". */
export const defaultExperimentId = (organizationId: string): string => `default-${organizationId}`;

export async function ensureDefaultExperiment(db: Db, organizationId: string, artifactRoot: string): Promise<void> {
  const id = defaultExperimentId(organizationId);
  await db
    .insert(experiments)
    .values({ id, organizationId, name: 'Default', artifactLocation: `${artifactRoot}/experiments/0`, lastUpdateTime: Date.now() })
    .onConflictDoNothing();
}

/** Creates an experiment; null when the name is taken in this organization. */
export async function createExperiment(
  db: Db,
  p: { id: string; organizationId: string; name: string; artifactLocation: string; tags: KeyValue[] },
): Promise<string | null> {
  return db.transaction(async (tx) => {
    const now = Date.now();
    const inserted = await tx
      .insert(experiments)
      .values({ id: p.id, organizationId: p.organizationId, name: p.name, artifactLocation: p.artifactLocation, createdAt: new Date(now), lastUpdateTime: now })
      .onConflictDoNothing()
      .returning({ id: experiments.id });
    if (inserted.length === 0) return null;
    if (p.tags.length) await tx.insert(experimentTags).values(dedupe(p.tags).map((t) => ({ experimentId: p.id, ...t })));
    return p.id;
  });
}

/** The experiment of this name, created (without tags) when the organization has none: for pipelines and sweeps. */
export async function getOrCreateExperiment(db: Db, organizationId: string, name: string, artifactRoot: string): Promise<string> {
  const id = randomUUID();
  const created = await createExperiment(db, { id, organizationId, name, artifactLocation: `${artifactRoot}/experiments/${id}`, tags: [] });
  return created ?? (await getExperimentByName(db, organizationId, name))!.id;
}

export async function getExperiment(db: Db, organizationId: string, id: string): Promise<ExperimentRow | null> {
  const [row] = await db.select().from(experiments).where(and(eq(experiments.organizationId, organizationId), eq(experiments.id, id)));
  return row ?? null;
}

export async function getExperimentByName(db: Db, organizationId: string, name: string): Promise<ExperimentRow | null> {
  const [row] = await db.select().from(experiments).where(and(eq(experiments.organizationId, organizationId), eq(experiments.name, name)));
  return row ?? null;
}

export async function updateExperiment(db: Db, id: string, set: { name?: string; lifecycleStage?: 'active' | 'deleted' }): Promise<boolean> {
  try {
    await db
      .update(experiments)
      .set({ ...set, lastUpdateTime: Date.now() })
      .where(eq(experiments.id, id));
    return true;
  } catch (err) {
    if (isUniqueViolation(err)) return false;
    throw err;
  }
}

export async function setExperimentTag(db: Db, experimentId: string, tag: KeyValue): Promise<void> {
  await db
    .insert(experimentTags)
    .values({ experimentId, ...tag })
    .onConflictDoUpdate({ target: [experimentTags.experimentId, experimentTags.key], set: { value: tag.value } });
}

/** Removes one experiment tag; false when the experiment has no tag with that key. */
export async function deleteExperimentTag(db: Db, experimentId: string, key: string): Promise<boolean> {
  const gone = await db
    .delete(experimentTags)
    .where(and(eq(experimentTags.experimentId, experimentId), eq(experimentTags.key, key)))
    .returning({ key: experimentTags.key });
  return gone.length > 0;
}

export async function experimentTagsOf(db: Db, ids: string[]): Promise<Map<string, KeyValue[]>> {
  const out = new Map<string, KeyValue[]>(ids.map((id) => [id, []]));
  if (ids.length === 0) return out;
  const rows = await db.select().from(experimentTags).where(inArray(experimentTags.experimentId, ids)).orderBy(asc(experimentTags.key));
  for (const r of rows) out.get(r.experimentId)!.push({ key: r.key, value: r.value });
  return out;
}

const EXPERIMENT_ATTRIBUTES: Record<string, SQL> = {
  name: sql`${experiments.name}`,
  experiment_id: sql`${experiments.id}`,
  creation_time: epochMs(sql`${experiments.createdAt}`),
  last_update_time: sql`${experiments.lastUpdateTime}`,
};

function experimentCondition(c: Comparison): SQL {
  if (c.entity === 'tag') return tagTest((test) => sql`select 1 from experiment_tags et where et.experiment_id = ${experiments.id} and et.key = ${c.key} and ${test}`, sql`et.value`, c);
  return compare(EXPERIMENT_ATTRIBUTES[c.key]!, c);
}

export async function searchExperiments(
  db: Db,
  organizationId: string,
  q: { filter: Comparison[]; orderBy: OrderClause[]; view: ViewType; offset: number; limit: number },
): Promise<{ rows: ExperimentRow[]; more: boolean }> {
  const order: SQL[] = q.orderBy.map((o) => {
    const col = o.entity === 'tag' ? sql`(select et.value from experiment_tags et where et.experiment_id = ${experiments.id} and et.key = ${o.key})` : EXPERIMENT_ATTRIBUTES[o.key]!;
    return sql`${col} ${sql.raw(o.ascending ? 'asc' : 'desc')} nulls last`;
  });
  if (q.orderBy.length === 0) order.push(sql`${experiments.createdAt} desc`);
  order.push(sql`${experiments.id} asc`);
  const rows = await db
    .select()
    .from(experiments)
    .where(and(eq(experiments.organizationId, organizationId), stageFilter(experiments.lifecycleStage, q.view), ...q.filter.map(experimentCondition)))
    .orderBy(...order)
    .limit(q.limit + 1)
    .offset(q.offset);
  return { rows: rows.slice(0, q.limit), more: rows.length > q.limit };
}

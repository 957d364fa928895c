import { and, arrayOverlaps, asc, desc, eq, sql } from 'drizzle-orm';
import type { Db } from '../client.js';
import { datasets } from '../schema/index.js';
import type { Dataset, DatasetIssue } from '../../contracts/datasets.js';
import { emitEvent } from './outbox.js';

export type DatasetRow = typeof datasets.$inferSelect;
export type NewDataset = Omit<typeof datasets.$inferInsert, 'version' | 'createdAt'>;

/** Only ready versions have splits: every reader that trains, evaluates or derives from a version sees those alone. */
const ready = eq(datasets.status, 'ready');

/**
 * Inserts the next version of a dataset name. The version number is taken inside the transaction and the
 * unique index (org, name, version) turns a concurrent race into a retry, never into two equal versions.
 * A version inserted preparing says `dataset.created` only once it is ready (completeDatasetVersion).
 */
export async function insertDatasetVersion(db: Db, row: NewDataset, audited?: (tx: Db, row: DatasetRow) => Promise<void>): Promise<DatasetRow> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await db.transaction(async (tx) => {
        const [{ next }] = (await tx
          .select({ next: sql<number>`coalesce(max(${datasets.version}), 0) + 1` })
          .from(datasets)
          .where(and(eq(datasets.organizationId, row.organizationId), eq(datasets.name, row.name)))) as [{ next: number }];
        const [inserted] = await tx.insert(datasets).values({ ...row, version: Number(next) }).returning();
        if (inserted!.status === 'ready') await emitCreated(tx, inserted!);
        await audited?.(tx as unknown as Db, inserted!);
        return inserted!;
      });
    } catch (err) {
      if (attempt < 3 && /datasets_org_name_version_idx|duplicate key/.test(String((err as Error).message) + String((err as { cause?: Error }).cause?.message))) continue;
      throw err;
    }
  }
}

const emitCreated = (tx: Db, row: DatasetRow) =>
  emitEvent(tx, row.organizationId, 'datasets', row.id, { event: 'dataset.created', dataset_id: row.id, name: row.name, version: row.version });

/** A ready version by id (what training, evaluation and derive read). */
export async function getDataset(db: Db, organizationId: string, id: string): Promise<DatasetRow | null> {
  const [row] = await db.select().from(datasets).where(and(eq(datasets.organizationId, organizationId), eq(datasets.id, id), ready));
  return row ?? null;
}

/** A version by id whatever its status: GET /v1/datasets/{id} and the preparation job that fills it in. */
export async function getDatasetAnyStatus(db: Db, organizationId: string, id: string): Promise<DatasetRow | null> {
  const [row] = await db.select().from(datasets).where(and(eq(datasets.organizationId, organizationId), eq(datasets.id, id)));
  return row ?? null;
}

/**
 * A preparing version becomes ready with its files' fields in one update, which also says `dataset.created`:
 * readers never see it half filled in. A second call (a retried job) finds it ready and returns it as it is.
 */
export async function completeDatasetVersion(db: Db, organizationId: string, id: string, fields: Omit<NewDataset, 'id' | 'organizationId' | 'name' | 'createdBy'>): Promise<DatasetRow> {
  return db.transaction(async (tx) => {
    const [row] = await tx
      .update(datasets)
      .set({ ...fields, status: 'ready', issues: null })
      .where(and(eq(datasets.organizationId, organizationId), eq(datasets.id, id), eq(datasets.status, 'preparing')))
      .returning();
    if (row) {
      await emitCreated(tx as unknown as Db, row);
      return row;
    }
    const existing = await getDatasetAnyStatus(tx as unknown as Db, organizationId, id);
    if (existing?.status === 'ready') return existing;
    throw new Error(`dataset version ${id} is ${existing ? existing.status : 'gone'}: it cannot become ready`);
  });
}

/** A preparing version ends failed with why; one already ready or failed keeps what it has. */
export async function failDatasetVersion(db: Db, organizationId: string, id: string, issues: DatasetIssue[]): Promise<void> {
  await db
    .update(datasets)
    .set({ status: 'failed', issues })
    .where(and(eq(datasets.organizationId, organizationId), eq(datasets.id, id), eq(datasets.status, 'preparing')));
}

/** A ready version by number, or the newest ready one ('latest': a version still preparing or failed is skipped). */
export async function findDatasetVersion(db: Db, organizationId: string, name: string, version: number | 'latest'): Promise<DatasetRow | null> {
  const where = [eq(datasets.organizationId, organizationId), eq(datasets.name, name), ready];
  if (version !== 'latest') where.push(eq(datasets.version, version));
  const [row] = await db.select().from(datasets).where(and(...where)).orderBy(desc(datasets.version)).limit(1);
  return row ?? null;
}

export async function listDatasets(db: Db, organizationId: string, opts: { name?: string; tags?: string[]; limit: number; offset: number }): Promise<DatasetRow[]> {
  const where = [eq(datasets.organizationId, organizationId)];
  if (opts.name) where.push(eq(datasets.name, opts.name));
  // Any of the tags: the array overlap operator.
  if (opts.tags?.length) where.push(arrayOverlaps(datasets.tags, opts.tags));
  return db.select().from(datasets).where(and(...where)).orderBy(desc(datasets.createdAt), desc(datasets.version)).limit(opts.limit).offset(opts.offset);
}

export function datasetView(row: DatasetRow): Dataset {
  return {
    id: row.id,
    name: row.name,
    version: row.version,
    organization: row.organizationId,
    created_at: row.createdAt.toISOString(),
    created_by: row.createdBy,
    storage_path: row.storagePath,
    format: row.format,
    size_bytes: row.sizeBytes,
    num_records: row.numRecords,
    sha256: row.sha256,
    schema: row.schema as Dataset['schema'],
    splits: (row.splits ?? null) as Dataset['splits'],
    metadata: row.metadata as Dataset['metadata'],
    tags: row.tags,
    lineage: row.lineage as Dataset['lineage'],
    status: row.status,
    issues: (row.issues ?? null) as Dataset['issues'],
    job_id: row.jobId,
  };
}

/** Dataset versions of the organization, whatever their status, in creation order, after the version `afterId` (the Files API's cursor). */
export async function listDatasetVersionsAfter(db: Db, organizationId: string, o: { afterId?: string; order: 'asc' | 'desc'; limit: number }): Promise<DatasetRow[]> {
  const where = [eq(datasets.organizationId, organizationId)];
  if (o.afterId !== undefined) {
    const after = await getDatasetAnyStatus(db, organizationId, o.afterId);
    if (!after) return [];
    const at = after.createdAt.toISOString();
    where.push(
      o.order === 'desc'
        ? sql`(${datasets.createdAt}, ${datasets.id}) < (${at}::timestamptz, ${after.id})`
        : sql`(${datasets.createdAt}, ${datasets.id}) > (${at}::timestamptz, ${after.id})`,
    );
  }
  const order = o.order === 'desc' ? [desc(datasets.createdAt), desc(datasets.id)] : [asc(datasets.createdAt), asc(datasets.id)];
  return db.select().from(datasets).where(and(...where)).orderBy(...order).limit(o.limit);
}

/** The newest `limit` ready versions of a dataset name, newest first. */
export async function olderVersions(db: Db, organizationId: string, name: string, limit: number): Promise<DatasetRow[]> {
  return db.select().from(datasets).where(and(eq(datasets.organizationId, organizationId), eq(datasets.name, name), ready)).orderBy(desc(datasets.version)).limit(limit);
}

/** A version by id whatever its organization: only for a request that proves access otherwise (a signed URL). */
export async function getDatasetAnyOrganization(db: Db, id: string): Promise<DatasetRow | null> {
  const [row] = await db.select().from(datasets).where(and(eq(datasets.id, id), ready));
  return row ?? null;
}

import { and, arrayOverlaps, asc, desc, eq, sql } from 'drizzle-orm';
import type { Db } from '../client.js';
import { datasets } from '../schema/index.js';
import type { Dataset } from '../../contracts/datasets.js';
import { emitEvent } from './outbox.js';

export type DatasetRow = typeof datasets.$inferSelect;
export type NewDataset = Omit<typeof datasets.$inferInsert, 'version' | 'createdAt'>;

/**
 * Inserts the next version of a dataset name. The version number is taken inside the transaction and the
 * unique index (org, name, version) turns a concurrent race into a retry, never into two equal versions.
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
        await emitEvent(tx, row.organizationId, 'datasets', inserted!.id, {
          event: 'dataset.created',
          dataset_id: inserted!.id,
          name: row.name,
          version: inserted!.version,
        });
        await audited?.(tx as unknown as Db, inserted!);
        return inserted!;
      });
    } catch (err) {
      if (attempt < 3 && /datasets_org_name_version_idx|duplicate key/.test(String((err as Error).message) + String((err as { cause?: Error }).cause?.message))) continue;
      throw err;
    }
  }
}

export async function getDataset(db: Db, organizationId: string, id: string): Promise<DatasetRow | null> {
  const [row] = await db.select().from(datasets).where(and(eq(datasets.organizationId, organizationId), eq(datasets.id, id)));
  return row ?? null;
}

export async function findDatasetVersion(db: Db, organizationId: string, name: string, version: number | 'latest'): Promise<DatasetRow | null> {
  const where = [eq(datasets.organizationId, organizationId), eq(datasets.name, name)];
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
    splits: row.splits as Dataset['splits'],
    metadata: row.metadata as Dataset['metadata'],
    tags: row.tags,
    lineage: row.lineage as Dataset['lineage'],
  };
}

/** Dataset versions of the organization in creation order, after the version `afterId` (the Files API's cursor). */
export async function listDatasetVersionsAfter(db: Db, organizationId: string, o: { afterId?: string; order: 'asc' | 'desc'; limit: number }): Promise<DatasetRow[]> {
  const where = [eq(datasets.organizationId, organizationId)];
  if (o.afterId !== undefined) {
    const after = await getDataset(db, organizationId, o.afterId);
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

/** The newest `limit` versions of a dataset name, newest first. */
export async function olderVersions(db: Db, organizationId: string, name: string, limit: number): Promise<DatasetRow[]> {
  return db.select().from(datasets).where(and(eq(datasets.organizationId, organizationId), eq(datasets.name, name))).orderBy(desc(datasets.version)).limit(limit);
}

/** A version by id whatever its organization: only for a request that proves access otherwise (a signed URL). */
export async function getDatasetAnyOrganization(db: Db, id: string): Promise<DatasetRow | null> {
  const [row] = await db.select().from(datasets).where(eq(datasets.id, id));
  return row ?? null;
}

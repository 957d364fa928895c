// The catalogue of artifact objects (see artifact_objects): who owns a key, and directory listings computed in
// SQL from key prefixes, since an object store has no directories.
import { and, eq, inArray, ne, sql } from 'drizzle-orm';
import type { Db } from '../client.js';
import { artifactObjects } from '../schema/index.js';

export type ArtifactObjectRow = typeof artifactObjects.$inferSelect;

export async function artifactObjectOf(db: Db, key: string): Promise<ArtifactObjectRow | null> {
  const [row] = await db.select().from(artifactObjects).where(eq(artifactObjects.key, key));
  return row ?? null;
}

/** Records (or re-records) an object; false when the key belongs to another organization. */
export async function recordArtifactObject(db: Db, o: { key: string; organizationId: string; sizeBytes: number; sha256: string }): Promise<boolean> {
  const rows = await db
    .insert(artifactObjects)
    .values({ ...o, createdAt: new Date() })
    .onConflictDoUpdate({
      target: artifactObjects.key,
      set: { sizeBytes: sql`excluded.size_bytes`, sha256: sql`excluded.sha256`, createdAt: sql`excluded.created_at` },
      setWhere: eq(artifactObjects.organizationId, o.organizationId),
    })
    .returning({ key: artifactObjects.key });
  return rows.length > 0;
}

const likePrefix = (dirKey: string): string => `${dirKey.replace(/[\\%_]/g, (ch) => `\\${ch}`)}/%`;
const under = (dirKey: string) => sql`${artifactObjects.key} like ${likePrefix(dirKey)} escape '\\'`;

export interface ArtifactChild {
  name: string;
  isDir: boolean;
  sizeBytes: number | null;
}

/** The immediate children of a directory key ('' is the bucket root), in name order. */
export async function listArtifactChildren(db: Db, organizationId: string, dirKey: string): Promise<ArtifactChild[]> {
  const start = dirKey === '' ? 1 : dirKey.length + 2;
  const rest = sql`substr(${artifactObjects.key}, ${start}::int)`;
  const rows = await db
    .select({
      name: sql<string>`split_part(${rest}, '/', 1)`,
      isDir: sql<boolean>`bool_or(strpos(${rest}, '/') > 0)`,
      sizeBytes: sql<string | null>`max(case when strpos(${rest}, '/') = 0 then ${artifactObjects.sizeBytes} end)`,
    })
    .from(artifactObjects)
    .where(and(eq(artifactObjects.organizationId, organizationId), dirKey === '' ? undefined : under(dirKey)))
    .groupBy(sql`1`)
    .orderBy(sql`1`);
  return rows.map((r) => ({ name: r.name, isDir: Boolean(r.isDir), sizeBytes: r.sizeBytes === null ? null : Number(r.sizeBytes) }));
}

/** True when another organization has objects at or under `key`. */
export async function foreignArtifactsUnder(db: Db, organizationId: string, key: string): Promise<boolean> {
  const [row] = await db
    .select({ key: artifactObjects.key })
    .from(artifactObjects)
    .where(and(ne(artifactObjects.organizationId, organizationId), sql`(${artifactObjects.key} = ${key} or ${under(key)})`))
    .limit(1);
  return Boolean(row);
}

/** Forgets a file or every object under a directory; returns how many objects went. */
export async function deleteArtifactObjects(db: Db, organizationId: string, key: string): Promise<number> {
  const rows = await db
    .delete(artifactObjects)
    .where(and(eq(artifactObjects.organizationId, organizationId), sql`(${artifactObjects.key} = ${key} or ${under(key)})`))
    .returning({ key: artifactObjects.key });
  return rows.length;
}

/** Which of `keys` are catalogued files (any organization). */
export async function existingArtifactKeys(db: Db, keys: string[]): Promise<string[]> {
  if (keys.length === 0) return [];
  const rows = await db.select({ key: artifactObjects.key }).from(artifactObjects).where(inArray(artifactObjects.key, keys));
  return rows.map((r) => r.key);
}

/** True when any object lies under `key` treated as a directory. */
export async function artifactDirectoryExists(db: Db, key: string): Promise<boolean> {
  const [row] = await db.select({ key: artifactObjects.key }).from(artifactObjects).where(under(key)).limit(1);
  return Boolean(row);
}

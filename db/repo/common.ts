// Small pieces the tracking repositories share: key/value pairs (tags, params), the lifecycle view of a search,
// and the SQL that compiles a parsed search filter's comparisons (lib/search-filter.ts).
import { eq, sql, type SQL } from 'drizzle-orm';
import type { PgColumn } from 'drizzle-orm/pg-core';
import type { Comparison } from '../../lib/search-filter.js';

export interface KeyValue {
  key: string;
  value: string;
}
export type ViewType = 'ACTIVE_ONLY' | 'DELETED_ONLY' | 'ALL';

/** The last value per key wins, as MLflow's stores keep it. */
export function dedupe(kv: KeyValue[]): KeyValue[] {
  return [...new Map(kv.map((t) => [t.key, t])).values()];
}

export function isUniqueViolation(err: unknown): boolean {
  const e = err as { code?: string; cause?: { code?: string } };
  return e.code === '23505' || e.cause?.code === '23505';
}

export const epochMs = (col: SQL | PgColumn): SQL => sql`(extract(epoch from ${col}) * 1000)::bigint`;

export function stageFilter(col: PgColumn, view: ViewType): SQL | undefined {
  return view === 'ALL' ? undefined : eq(col, view === 'ACTIVE_ONLY' ? 'active' : 'deleted');
}

/** A tag test over the entity's rows of one tag key: a value comparison, or (IS [NOT] NULL) the tag's absence or presence. */
export function tagTest(rowsWhere: (test: SQL) => SQL, value: SQL, c: Comparison): SQL {
  if (c.op === 'IS NULL') return sql`not exists (${rowsWhere(sql`true`)})`;
  if (c.op === 'IS NOT NULL') return sql`exists (${rowsWhere(sql`true`)})`;
  return sql`exists (${rowsWhere(compare(value, c))})`;
}

export function compare(left: SQL, c: Comparison): SQL {
  if (c.op === 'IN' || c.op === 'NOT IN') {
    const list = sql.join((c.value as string[]).map((v) => sql`${v}`), sql`, `);
    return sql`${left} ${sql.raw(c.op)} (${list})`;
  }
  return sql`${left} ${sql.raw(c.op)} ${c.value}`;
}

// What a Temporal cluster needs before our workflows run on it: the custom search attributes they set (the
// embedded dev server gets them as start flags). Idempotent: only the missing ones are added.
import type { Connection } from '@temporalio/client';
import { SEARCH_ATTRIBUTES } from '../contracts/pipeline.js';

export async function registerSearchAttributes(connection: Connection, namespace: string): Promise<string[]> {
  const existing = await connection.operatorService.listSearchAttributes({ namespace });
  const known = new Set([...Object.keys(existing.customAttributes ?? {}), ...Object.keys(existing.systemAttributes ?? {})]);
  const missing = Object.values(SEARCH_ATTRIBUTES).filter((n) => !known.has(n));
  if (missing.length === 0) return [];
  const keyword = 2; // temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
  try {
    await connection.operatorService.addSearchAttributes({ namespace, searchAttributes: Object.fromEntries(missing.map((n) => [n, keyword])) });
  } catch (err) {
    // Another worker added them first.
    if (!/already exists/i.test(String((err as Error).message))) throw err;
  }
  return missing;
}

// The first records of a version's split, read from the object store line by line: a preview of a split of many
// GB reads only as far as it shows.
import { createInterface } from 'node:readline';
import type { ObjectStore } from '../lib/object-store.js';

/** The first `n` JSON records of a JSONL object (the stream is closed as soon as they are read). */
export async function firstRecords(store: ObjectStore, uri: string, n: number): Promise<unknown[]> {
  const body = await store.read(uri);
  const lines = createInterface({ input: body, crlfDelay: Infinity });
  const out: unknown[] = [];
  try {
    for await (const line of lines) {
      if (line.trim() === '') continue;
      out.push(JSON.parse(line));
      if (out.length >= n) break;
    }
  } finally {
    lines.close();
    body.destroy();
  }
  return out;
}

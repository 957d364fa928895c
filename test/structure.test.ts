// The layering the code relies on: the store (db/) and the shared libraries it uses (lib/search-filter.ts) import
// nothing from the API (api/), so the API can change its routes without touching how data is kept.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
}
const importsOf = (file: string): string[] => [...readFileSync(file, 'utf8').matchAll(/^(?:import|export)[^;]*?from '([^']+)'/gms)].map((m) => m[1]!);

describe('layering', () => {
  it('keeps db/ and the search grammar free of api/ imports', () => {
    const offenders = [...sources('db'), 'lib/search-filter.ts'].flatMap((f) => importsOf(f).filter((i) => /(^|\/)api\//.test(i)).map((i) => `${f} -> ${i}`));
    expect(offenders).toEqual([]);
    // The check reads real imports: the store does import its schema.
    expect(importsOf('db/repo/metrics.ts')).toContain('../schema/index.js');
  });
});

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { generatedSchemas } from '../contracts/json-schema.js';

describe('generated JSON Schemas', () => {
  it('match the zod contracts they are generated from (run `npm run gen` after changing contracts/)', () => {
    for (const [file, text] of Object.entries(generatedSchemas())) {
      const onDisk = readFileSync(fileURLToPath(new URL(`../contracts/generated/${file}`, import.meta.url)), 'utf8');
      expect(onDisk, `contracts/generated/${file} is stale`).toBe(text);
    }
  });
});

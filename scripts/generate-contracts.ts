// Writes the JSON Schemas that the Python trainer and the Rust Candle tool read.
// `npm run gen` rewrites them; test/contracts.test.ts fails when the checked-in files drift.
import { writeFileSync, mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { generatedSchemas } from '../contracts/json-schema.js';

const dir = fileURLToPath(new URL('../contracts/generated/', import.meta.url));
mkdirSync(dir, { recursive: true });
for (const [file, text] of Object.entries(generatedSchemas())) writeFileSync(dir + file, text);

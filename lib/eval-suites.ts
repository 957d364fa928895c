// Evaluation suites are files under recipes/eval/, named <name>-v<version>.yaml, read and checked once per use.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parse } from 'yaml';
import { EvalSuiteSchema, type EvalSuite } from '../contracts/eval-suite.js';
import { repoRoot } from './config.js';

export class EvalSuiteError extends Error {}

/** `name@version` -> the suite, or an error naming the file and the field that is wrong. */
export async function loadEvalSuite(ref: string): Promise<EvalSuite> {
  const m = /^([a-z0-9][a-z0-9-]*)@(\d+)$/.exec(ref);
  if (!m) throw new EvalSuiteError(`eval suite "${ref}": expected name@version, e.g. support-desk@2`);
  const file = join(repoRoot, 'recipes', 'eval', `${m[1]}-v${m[2]}.yaml`);
  const text = await readFile(file, 'utf8').catch(() => null);
  if (text === null) throw new EvalSuiteError(`eval suite "${ref}": ${file} does not exist`);
  const parsed = EvalSuiteSchema.safeParse(parse(text));
  if (!parsed.success) throw new EvalSuiteError(`${file}: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  if (parsed.data.name !== m[1] || parsed.data.version !== Number(m[2])) throw new EvalSuiteError(`${file}: name/version ${parsed.data.name}@${parsed.data.version} do not match the file name`);
  return parsed.data;
}

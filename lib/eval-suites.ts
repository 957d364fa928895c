// Bundled evaluation suites are files under recipes/eval/, named <name>-v<version>.yaml, read and checked once per
// use; an organization's own suites live in the catalogue (datasets/eval-suites.ts) and are checked the same way.
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parse } from 'yaml';
import { EvalSuiteSchema, type EvalSuite } from '../contracts/eval-suite.js';
import { repoRoot } from './config.js';

export class EvalSuiteError extends Error {}

const BUNDLED_DIR = join(repoRoot, 'recipes', 'eval');

/** `name@version` -> its parts, or an error saying what a reference looks like. */
export function parseSuiteRef(ref: string): { name: string; version: number } {
  const m = /^([a-z0-9][a-z0-9-]*)@(\d+)$/.exec(ref);
  if (!m) throw new EvalSuiteError(`eval suite "${ref}": expected name@version, e.g. support-desk@2`);
  return { name: m[1]!, version: Number(m[2]) };
}

/** A suite's definition checked against the contract; `where` names the file or request it came from. */
export function checkSuiteDefinition(definition: unknown, where: string): EvalSuite {
  const parsed = EvalSuiteSchema.safeParse(definition);
  if (!parsed.success) throw new EvalSuiteError(`${where}: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ')}`);
  return parsed.data;
}

/** `name@version` of a bundled suite -> the suite, or an error naming the file and the field that is wrong. */
export async function loadEvalSuite(ref: string): Promise<EvalSuite> {
  const { name, version } = parseSuiteRef(ref);
  const file = join(BUNDLED_DIR, `${name}-v${version}.yaml`);
  const text = await readFile(file, 'utf8').catch(() => null);
  if (text === null) throw new EvalSuiteError(`eval suite "${ref}": ${file} does not exist`);
  const suite = checkSuiteDefinition(parse(text), file);
  if (suite.name !== name || suite.version !== version) throw new EvalSuiteError(`${file}: name/version ${suite.name}@${suite.version} do not match the file name`);
  return suite;
}

/** Whether the product ships a suite of this name and version. */
export async function bundledSuiteExists(name: string, version: number): Promise<boolean> {
  return (await bundledSuiteRefs()).includes(`${name}@${version}`);
}

/** Every bundled suite as name@version, by name then version. */
export async function bundledSuiteRefs(): Promise<string[]> {
  const files = await readdir(BUNDLED_DIR);
  return files
    .map((f) => /^([a-z0-9][a-z0-9-]*)-v(\d+)\.yaml$/.exec(f))
    .filter((m): m is RegExpExecArray => m !== null)
    .sort((a, b) => a[1]!.localeCompare(b[1]!) || Number(a[2]) - Number(b[2]))
    .map((m) => `${m[1]}@${m[2]}`);
}

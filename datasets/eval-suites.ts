// Which suite a name@version means for an organization, and where its held-out sets are. An organization's own
// suite (registered through /v1/eval-suites) is found first, then the bundled ones (recipes/eval/), which every
// organization can read. A held-out set is a bundled file under examples/heldout/ or a split of one of the
// organization's dataset versions; another organization's dataset version does not exist for it.
import { access } from 'node:fs/promises';
import { join, posix } from 'node:path';
import type { DatasetSplitRef, EvalSuite, Heldout } from '../contracts/eval-suite.js';
import { repoRoot } from '../lib/config.js';
import { EvalSuiteError, checkSuiteDefinition, loadEvalSuite, parseSuiteRef } from '../lib/eval-suites.js';
import { findDatasetVersion, getDataset, type DatasetRow } from '../db/repo/datasets.js';
import { findEvalSuite } from '../db/repo/eval-suites.js';
import type { Db } from '../db/client.js';

/** Where the bundled held-out files are; a suite may name no other file of the product. */
export const BUNDLED_HELDOUT_DIR = 'examples/heldout/';

/** A held-out set as the eval job gets it: a bundled file, or a dataset version's split in the object store. */
export type HeldoutInput = { kind: 'bundled'; path: string } | { kind: 'dataset'; uri: string; dataset: { id: string; name: string; version: number; split: string } };

export interface SuiteData {
  /** null: the test split of the dataset the pipeline or job evaluates. */
  test: HeldoutInput | null;
  general: HeldoutInput | null;
  instructions: HeldoutInput | null;
  safety: HeldoutInput | null;
}

export interface ResolvedSuite {
  suite: EvalSuite;
  source: 'organization' | 'bundled';
  data: SuiteData;
}

/** The organization's own suite of that name and version, else the bundled one; an error when neither exists. */
export async function findSuite(db: Db, organizationId: string, ref: string): Promise<{ suite: EvalSuite; source: ResolvedSuite['source'] }> {
  const { name, version } = parseSuiteRef(ref);
  const own = await findEvalSuite(db, organizationId, name, version);
  if (own) return { suite: checkSuiteDefinition(own.definition, `eval suite ${ref}`), source: 'organization' };
  return { suite: await loadEvalSuite(ref), source: 'bundled' };
}

/** The suite a pipeline or eval job names, with its held-out sets resolved for the organization. */
export async function resolveSuite(db: Db, organizationId: string, ref: string): Promise<ResolvedSuite> {
  const found = await findSuite(db, organizationId, ref);
  return { ...found, data: await suiteData(db, organizationId, found.suite) };
}

/** Each held-out set of the suite, or an EvalSuiteError naming the field whose set the organization cannot use. */
export async function suiteData(db: Db, organizationId: string, suite: EvalSuite): Promise<SuiteData> {
  const at = (field: string, h: Heldout | null) => (h === null ? Promise.resolve(null) : heldoutInput(db, organizationId, field, h));
  return {
    test: await at('test', suite.test),
    general: await at('general_text', suite.general_text),
    instructions: await at('instructions', suite.instructions),
    safety: await at('safety', suite.safety),
  };
}

async function heldoutInput(db: Db, organizationId: string, field: string, h: Heldout): Promise<HeldoutInput> {
  if (typeof h === 'string') return { kind: 'bundled', path: await bundledHeldout(field, h) };
  const row = await datasetVersion(db, organizationId, field, h);
  const splits = row.splits as Partial<Record<string, { path: string; num_records?: number }>>;
  const split = splits[h.split];
  if (!split || split.num_records === 0) throw new EvalSuiteError(`${field}.split: dataset version ${row.name}@${row.version} has no records in its ${h.split} split`);
  return { kind: 'dataset', uri: split.path, dataset: { id: row.id, name: row.name, version: row.version, split: h.split } };
}

async function datasetVersion(db: Db, organizationId: string, field: string, ref: DatasetSplitRef): Promise<DatasetRow> {
  const at = ref.dataset.lastIndexOf('@');
  const row = at > 0 ? await findDatasetVersion(db, organizationId, ref.dataset.slice(0, at), Number(ref.dataset.slice(at + 1))) : await getDataset(db, organizationId, ref.dataset);
  if (!row) throw new EvalSuiteError(`${field}.dataset: dataset version "${ref.dataset}" does not exist in this organization`);
  return row;
}

/** A bundled held-out file: under examples/heldout/ (a suite reads no other file of the product) and present. */
async function bundledHeldout(field: string, path: string): Promise<string> {
  const normal = posix.normalize(path);
  if (!normal.startsWith(BUNDLED_HELDOUT_DIR) || normal.includes('..')) throw new EvalSuiteError(`${field}: "${path}" is not a bundled held-out file (${BUNDLED_HELDOUT_DIR}...); name a dataset version instead: {dataset: NAME@VERSION, split: test}`);
  if (!(await access(join(repoRoot, normal)).then(() => true, () => false))) throw new EvalSuiteError(`${field}: bundled file ${normal} does not exist`);
  return normal;
}

// Evaluation data that ships with the product (examples/heldout/): nothing can be downloaded, so the general
// text that capability retention is measured on is bundled and generated (trainer/hanzo_ml/demo_data.py).
import { readFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { ActivityDeps } from './deps.js';
import { repoRoot } from '../lib/config.js';
import { sha256Text } from '../lib/hash.js';
import { objectUri } from '../lib/object-store.js';
import { fileInput } from '../jobs/inputs.js';
import type { HeldoutInput } from '../datasets/eval-suites.js';

/** General text none of the training touched: held out from pre-training and unrelated to the task. */
export const GENERAL_TEXT = 'examples/heldout/general-text.txt';

/**
 * A bundled file as a job input. A local job reads it in place; for pods it is published once per content to
 * the models bucket, since a pod only sees the object store.
 */
export async function bundledFileInput(deps: ActivityDeps, relativePath: string): Promise<ReturnType<typeof fileInput>> {
  const path = join(repoRoot, relativePath);
  if (deps.executor.kind === 'local') return fileInput(pathToFileURL(path).href);
  const sha = sha256Text(await readFile(path, 'utf8'));
  const bucket = deps.config.storage.buckets.models;
  const key = `eval-data/${sha.slice(0, 16)}/${basename(path)}`;
  const uri = objectUri(deps.store, bucket, key);
  if (!(await deps.store.exists(uri))) await deps.store.putFile(bucket, key, path);
  return fileInput(uri);
}

/** A suite's held-out set as a job input: a bundled file, or a dataset version's split read from the object store. */
export async function heldoutJobInput(deps: ActivityDeps, h: HeldoutInput): Promise<ReturnType<typeof fileInput>> {
  return h.kind === 'bundled' ? bundledFileInput(deps, h.path) : fileInput(h.uri);
}

// What a job reads, as object-store inputs of its envelope (contracts/job-io.ts). A local job reads a file://
// input in place; a pod downloads an s3:// one, so everything a pod needs must be in the object store first.
import { createHash } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { JobDeps } from './deps.js';
import type { JobEnvelopeInput } from '../contracts/job-io.js';
import { resolveBaseModel } from '../lib/base-models.js';
import { listFiles, objectUri } from '../lib/object-store.js';

export type JobInput = NonNullable<JobEnvelopeInput['inputs']>[string];

/** The marker uploaded last: a base-model prefix without it is incomplete and is uploaded again. */
const BASE_MODEL_MARKER = 'base-model.json';

/**
 * A base model as a job input. Local jobs read the directory in place; for pods it is published to the models
 * bucket once per content (keyed by a hash of its files' names and sizes and its build record), so a thousand
 * jobs of one base share one copy.
 */
export async function baseModelInput(deps: JobDeps, name: string): Promise<JobInput> {
  const dir = resolveBaseModel(name, deps.config, deps.bootstrap);
  if (deps.executor.kind === 'local') return { uri: pathToFileURL(dir).href, kind: 'dir' };
  const files = await listFiles(dir);
  const key = await contentKey(dir, files);
  const prefix = `base-models/${name.replace(/[^A-Za-z0-9._-]/g, '_')}/${key}`;
  const bucket = deps.config.storage.buckets.models;
  const uri = objectUri(deps.store, bucket, prefix);
  if (await deps.store.exists(`${uri}/${BASE_MODEL_MARKER}`)) return { uri, kind: 'dir' };
  const marker = files.find((f) => relative(dir, f) === BASE_MODEL_MARKER);
  for (const f of files) if (f !== marker) await deps.store.putFile(bucket, `${prefix}/${relative(dir, f)}`, f);
  if (marker) await deps.store.putFile(bucket, `${prefix}/${BASE_MODEL_MARKER}`, marker);
  else await deps.store.putText(`${uri}/${BASE_MODEL_MARKER}`, JSON.stringify({ name, published_from: dir }));
  deps.log.info('base model published for jobs', { name, uri });
  return { uri, kind: 'dir' };
}

async function contentKey(dir: string, files: string[]): Promise<string> {
  const h = createHash('sha256');
  const record = await readFile(join(dir, BASE_MODEL_MARKER), 'utf8').catch(() => '');
  h.update(record);
  for (const f of files) {
    const st = await stat(f);
    h.update(`${relative(dir, f)}\0${st.size}\0${st.mtimeMs}\0`);
  }
  return h.digest('hex').slice(0, 16);
}

/** A dataset split (already an object URI). */
export function fileInput(uri: string): JobInput {
  return { uri, kind: 'file' };
}

export function dirInput(uri: string): JobInput {
  return { uri, kind: 'dir' };
}

// A job's files in the object store (contracts/job-io.ts): the worker writes the envelope and reads progress,
// failure and result from here, whichever executor runs the job and wherever it runs.
import { createHash } from 'node:crypto';
import type { z } from 'zod';
import { JOB_FILES, JobEnvelopeSchema, type JobEnvelope, type JobEnvelopeInput } from '../contracts/job-io.js';
import type { Config } from '../contracts/config.js';
import { objectUri, type ObjectStore } from './object-store.js';

/**
 * A Kubernetes-safe job name (a DNS label of at most `max` characters) for a logical job name: lower case, with a
 * hash of the whole name appended when it had to be shortened or changed, so two names never collide.
 */
export function jobNameOf(name: string, max = 52): string {
  const clean = name.toLowerCase().replace(/[^a-z0-9-]/g, '-').replace(/^-+|-+$/g, '');
  if (clean === name && clean.length <= max) return clean;
  const hash = createHash('sha256').update(name).digest('hex').slice(0, 8);
  return `${clean.slice(0, max - 9).replace(/-+$/, '')}-${hash}`;
}

/**
 * Every object a job touches sits under its organization's prefix, so that a job's object-store access can be
 * limited to its organization (jobs/storage-access.ts): jobs/{org}/{job}/ and checkpoints/{org}/{run}/.
 * (Before, jobs/{job}/ and checkpoints/{run}/: objects recorded there keep their URIs; a job running across the
 * change restarts without its earlier checkpoints.)
 */
export function jobsRoot(store: ObjectStore, config: Pick<Config, 'storage'>, organizationId: string): string {
  return objectUri(store, config.storage.buckets.checkpoints, `jobs/${organizationId}`);
}

/** Where a run's checkpoints live: {uri}/{step}/ and {uri}/best/ (spec 000: checkpoints/{run_id}/{step}/, under its organization). */
export function checkpointsUri(store: ObjectStore, config: Pick<Config, 'storage'>, organizationId: string, runId: string): string {
  return objectUri(store, config.storage.buckets.checkpoints, checkpointsKey(organizationId, runId));
}

/** The key prefix of a run's checkpoints in the checkpoints bucket. */
export function checkpointsKey(organizationId: string, runId: string): string {
  return `checkpoints/${organizationId}/${runId}`;
}

export class JobFiles {
  readonly uri: string;
  constructor(
    private readonly store: ObjectStore,
    root: string,
    readonly name: string,
  ) {
    this.uri = `${root}/${name}`;
  }

  static of(store: ObjectStore, config: Pick<Config, 'storage'>, organizationId: string, name: string): JobFiles {
    return new JobFiles(store, jobsRoot(store, config, organizationId), name);
  }

  file(name: string): string {
    return `${this.uri}/${name}`;
  }

  get envelopeUri(): string {
    return this.file(JOB_FILES.envelope);
  }

  outputUri(field: string): string {
    return `${this.uri}/outputs/${field}`;
  }

  async writeEnvelope(envelope: JobEnvelopeInput): Promise<JobEnvelope> {
    const parsed = JobEnvelopeSchema.parse(envelope);
    await this.store.putText(this.envelopeUri, JSON.stringify(parsed, null, 2));
    return parsed;
  }

  async readEnvelope(): Promise<JobEnvelope | null> {
    const text = await this.store.readText(this.envelopeUri);
    return text === null ? null : JobEnvelopeSchema.parse(JSON.parse(text));
  }

  /** A JSON file of the job parsed with a schema; null when absent or not (yet) valid. */
  async readJson<T>(name: string, schema: z.ZodType<T>): Promise<T | null> {
    const text = await this.store.readText(this.file(name)).catch(() => null);
    if (text === null) return null;
    try {
      return schema.parse(JSON.parse(text));
    } catch {
      return null;
    }
  }

  async writeJson(name: string, value: unknown): Promise<void> {
    await this.store.putText(this.file(name), JSON.stringify(value, null, 2));
  }

  async logTail(lines = 15): Promise<string> {
    const text = (await this.store.readText(this.file(JOB_FILES.log)).catch(() => null)) ?? '';
    return text.trimEnd().split('\n').slice(-lines).join('\n');
  }
}

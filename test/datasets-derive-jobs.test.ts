// Derive jobs on a real stack (worker, local executor, file store): near-duplicate removal against the earlier
// versions of a dataset, and a derive cancelled while its job runs, through the CLI and POST /v1/jobs/{id}/cancel.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TERMINAL_JOB_STATUSES, type JobStatus } from '../contracts/jobs.js';
import { repoRoot } from '../lib/config.js';
import { startTestStack, type TestStack } from './support/stack.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const DEV = { authorization: 'Bearer hanzo-ml-dev-token' };
const SPLITS = ['train', 'validation', 'test'] as const;

/** Deterministic text of `n` words from a 2,000-word vocabulary: two texts of different seeds share few shingles. */
function words(seed: number, n: number): string[] {
  let x = seed * 2654435761 + 1;
  return Array.from({ length: n }, () => {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    return `w${x % 2000}`;
  });
}

const chat = (q: string, a: string) => JSON.stringify({ messages: [{ role: 'user', content: q }, { role: 'assistant', content: a }] });
const record = (seed: number) => chat(words(seed, 40).join(' '), words(seed + 100_000, 40).join(' '));
/** One word of 80 changed: 5-word shingles keep a Jaccard similarity of about 0.88 with the original. */
const nearCopy = (seed: number) => chat(words(seed, 40).join(' '), [...words(seed + 100_000, 39), 'changed'].join(' '));

/** A record of 80 words from a 32-bit generator seeded by `i`: no two of 120,000 are duplicates, exact or near. */
function distinctRecord(i: number): string {
  let x = (i + 1) >>> 0;
  const w = Array.from({ length: 80 }, () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return `w${x % 2000}`;
  });
  return chat(w.slice(0, 40).join(' '), w.slice(40).join(' '));
}

let stack: TestStack;

async function upload(name: string, lines: string[]): Promise<Json> {
  const res = await fetch(`${stack.runtime.apiUrl}/v1/datasets?name=${name}&format=jsonl&wait=true`, { method: 'POST', headers: DEV, body: lines.join('\n') });
  const body = (await res.json()) as Json;
  expect(res.status, JSON.stringify(body)).toBe(201);
  return body;
}

async function untilEnded(jobId: string): Promise<Json> {
  for (let i = 0; i < 1200; i++) {
    const job = (await stack.api<Json>('GET', `/v1/jobs/${jobId}`)).body;
    if (TERMINAL_JOB_STATUSES.includes(job.status as JobStatus)) return job;
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(`job ${jobId} did not end`);
}

/** The question of every record of a version, from the previews of its three splits. */
async function allQuestions(datasetId: string): Promise<string[]> {
  const out: string[] = [];
  for (const split of SPLITS) {
    const preview = (await stack.api<Json>('GET', `/v1/datasets/${datasetId}/preview?split=${split}&n=100`)).body;
    out.push(...(preview.records as Json[]).map((r) => r.messages[0].content as string));
  }
  return out;
}

describe('derive jobs', () => {
  beforeAll(async () => {
    // A cancel reaches a job's activity with its next heartbeat, sent at most every 80% of this.
    stack = await startTestStack({ HANZO_ML_TEMPORAL_HEARTBEAT_TIMEOUT: '4s' });
  }, 180_000);

  afterAll(async () => {
    await stack?.stop();
  });

  it('removes the records of version 2 that are near-duplicates of version 1 with dedup_near against_parents, counts adding up', { timeout: 10 * 60_000 }, async () => {
    await upload('near-history', Array.from({ length: 10 }, (_, i) => record(i)));
    // Version 2: near copies of four of version 1's records, and six records of its own.
    const v2 = await upload('near-history', [...[0, 1, 2, 3].map(nearCopy), ...Array.from({ length: 6 }, (_, i) => record(50 + i))]);
    expect(v2.version).toBe(2);

    const accepted = await stack.api<Json>('POST', `/v1/datasets/${v2.id}/derive`, { operations: [{ op: 'dedup_near', against_parents: true }] });
    expect(accepted.status, JSON.stringify(accepted.body)).toBe(202);
    const job = await untilEnded(accepted.body.job_id);
    expect(job.status, JSON.stringify(job)).toBe('succeeded');

    const v3 = (await stack.api<Json>('GET', `/v1/datasets/${accepted.body.dataset_id}`)).body;
    expect(v3).toMatchObject({ name: 'near-history', version: 3, num_records: 6, lineage: { parent_datasets: [v2.id] } });
    const [op] = v3.lineage.operations as Json[];
    expect(op).toMatchObject({ op: 'dedup_near', records_in: 10, removed: 4, added: 0, records_out: 6 });
    expect(op!.params).toMatchObject({ against_parents: true, shingle_words: 5, bands: 14, rows: 8, threshold: 0.72 });
    expect(v3.splits.train.num_records + v3.splits.validation.num_records + v3.splits.test.num_records).toBe(6);
    const kept = await allQuestions(v3.id);
    expect(kept.sort()).toEqual(Array.from({ length: 6 }, (_, i) => words(50 + i, 40).join(' ')).sort());

    // The same operation without against_parents keeps version 2 whole: the removals were version 1's near copies.
    const alone = await stack.api<Json>('POST', `/v1/datasets/${v2.id}/derive`, { name: 'near-alone', operations: [{ op: 'dedup_near' }] });
    expect((await untilEnded(alone.body.job_id)).status).toBe('succeeded');
    expect((await stack.api<Json>('GET', `/v1/datasets/${alone.body.dataset_id}`)).body.num_records).toBe(10);
  });

  it('`hanzo-ml dataset derive` prints the job id; cancelling that job mid-run leaves no version and no files', { timeout: 10 * 60_000 }, async () => {
    // Enough distinct records for near-duplicate removal and tokenizing to run well past the cancel's arrival (a
    // heartbeat, at most 3.2 s here): 60,000 ran 14 s uncancelled on an idle 2-core machine, so twice that.
    const big = await upload('cancel-me', Array.from({ length: 120_000 }, (_, i) => distinctRecord(i)));
    const env = { ...process.env, HANZO_ML_API_URL: stack.runtime.apiUrl, HANZO_ML_TOKEN: stack.loaded.config.auth.dev_token };
    const cli = (...args: string[]) => promisify(execFile)(join(repoRoot, 'bin/hanzo-ml'), args, { env });

    const printed = JSON.parse((await cli('dataset', 'derive', big.id, '--op', 'dedup_near', '--op', 'tokenize')).stdout) as Json;
    expect(printed).toMatchObject({ job_id: expect.any(String), dataset_id: expect.any(String) });
    for (let i = 0; (await stack.api<Json>('GET', `/v1/jobs/${printed.job_id}`)).body.status !== 'running'; i++) {
      if (i > 240) throw new Error('the derive job never ran');
      await new Promise((r) => setTimeout(r, 250));
    }
    // It has no checkpoint to pause at: a pause is refused, naming why.
    const pause = await stack.api<Json>('POST', `/v1/jobs/${printed.job_id}/pause`);
    expect(pause.status).toBe(409);
    expect(pause.body.message).toMatch(/can be cancelled, not paused or resumed/);
    const cancel = await stack.api<Json>('POST', `/v1/jobs/${printed.job_id}/cancel`);
    expect(cancel.status, JSON.stringify(cancel.body)).toBe(202);

    const job = await untilEnded(printed.job_id);
    expect(job.status, JSON.stringify(job)).toBe('cancelled');
    expect(job.type).toBe('data_preparation');
    expect((await stack.api('GET', `/v1/datasets/${printed.dataset_id}`)).status).toBe(404);
    const versions = (await stack.api<Json>('GET', '/v1/datasets?name=cancel-me')).body.datasets as Json[];
    expect(versions.map((v) => v.id)).toEqual([big.id]);
    // Nothing under the prefix the version's files would have had (its parent's, with its own id).
    expect(big.storage_path).toContain(`/cancel-me/${big.id}/`);
    expect(await stack.runtime.store.list(big.storage_path.replace(big.id, printed.dataset_id))).toEqual([]);
  });
});

// Uploads as a raw version plus a preparation job (POST /v1/datasets, wait=false by default) on a real stack
// (worker, local executor, file store, the trainer's prepare-dataset): 201 at once with the version preparing,
// then ready with its counts; wait=true waiting for that same job (ready, 400 with its issues, or 202 when the
// wait runs out); a malformed JSONL line refused in the request with structured issues; a Parquet file with a bad
// row ending the version failed with issues naming the row and the field; and the newest *ready* version being
// what a pipeline's `latest` resolves to. Without prepare-dataset in this checkout they are skipped (by name).
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { repoRoot, trainerPython } from '../lib/config.js';
import { MockActivityEnvironment } from '@temporalio/testing';
import { findDatasetVersion, insertDatasetVersion } from '../db/repo/datasets.js';
import { createDatasetActivities } from '../activities/datasets.js';
import type { PipelineWorkflowInput } from '../contracts/pipeline.js';
import { DEFAULT_BASE_MODEL } from '../lib/base-models.js';
import { offlineActivityDeps } from './support/deps.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const HAS_PREPARE_DATASET = readFileSync(join(repoRoot, 'trainer/hanzo_ml/cli.py'), 'utf8').includes('prepare-dataset');
const DEV = { authorization: 'Bearer hanzo-ml-dev-token' };
const chat = (q: string, a: string) => JSON.stringify({ messages: [{ role: 'user', content: q }, { role: 'assistant', content: a }] });

/** 12 distinct records and 3 exact duplicates of them. */
const RECORDS = [...Array.from({ length: 12 }, (_, i) => chat(`question ${i}`, `answer ${i}`)), ...Array.from({ length: 3 }, (_, i) => chat(`question ${i}`, `answer ${i}`))];

let stack: TestStack;

async function upload(query: string, body: string | Uint8Array, filename?: string): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${stack.runtime.apiUrl}/v1/datasets?${query}`, { method: 'POST', headers: { ...DEV, ...(filename ? { 'x-filename': filename } : {}) }, body: typeof body === 'string' ? body : new Uint8Array(body) });
  return { status: res.status, body: (await res.json()) as Json };
}

/** Polls the version until it leaves `preparing`. */
async function settled(id: string): Promise<Json> {
  for (let i = 0; i < 600; i++) {
    const v = (await stack.api<Json>('GET', `/v1/datasets/${id}`)).body;
    if (v.status !== 'preparing') return v;
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(`dataset version ${id} stayed preparing`);
}

/** Polls the job until it ends (a failed version is marked before its workflow records the job's failure). */
async function jobEnded(id: string): Promise<Json> {
  for (let i = 0; i < 600; i++) {
    const job = (await stack.api<Json>('GET', `/v1/jobs/${id}`)).body;
    if (['succeeded', 'failed', 'cancelled'].includes(job.status as string)) return job;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`job ${id} did not end`);
}

describe.skipIf(!HAS_PREPARE_DATASET)("uploads prepared by a job (needs the trainer's prepare-dataset command)", () => {
  beforeAll(async () => {
    stack = await startTestStack();
  }, 180_000);
  afterAll(async () => stack?.stop(), 60_000);

  it('answers 201 with the version preparing and its job, and the job makes it ready with counts, splits and tokens', async () => {
    const res = await upload('name=async-chat&format=jsonl&wait=false', RECORDS.join('\n'), 'chat.jsonl');
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ name: 'async-chat', version: 1, status: 'preparing', splits: null, num_records: RECORDS.length });
    expect(res.body.job_id).toEqual(expect.any(String));
    const rawSha = res.body.sha256 as string;
    // Its records cannot be read before it is ready.
    const early = await stack.api<Json>('GET', `/v1/datasets/${res.body.id}/preview`);
    expect([200, 409]).toContain(early.status);

    const ready = await settled(res.body.id as string);
    expect(ready).toMatchObject({ id: res.body.id, version: 1, status: 'ready', issues: null, num_records: 12 });
    expect(ready.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(ready.sha256).not.toBe(rawSha);
    expect(ready.splits.train.num_records + ready.splits.validation.num_records + ready.splits.test.num_records).toBe(12);
    expect(ready.metadata.report.token_counts.train).toBeGreaterThan(0);
    expect(ready.lineage.operations).toEqual([expect.objectContaining({ op: 'dedup_exact', records_in: 15, records_out: 12, removed: 3 })]);
    expect(await jobEnded(res.body.job_id as string)).toMatchObject({ status: 'succeeded', type: 'data_preparation' });
    const preview = await stack.api<Json>('GET', `/v1/datasets/${res.body.id}/preview?n=2`);
    expect(preview.status).toBe(200);
    expect(preview.body.records).toHaveLength(2);
  }, 180_000);

  it('is asynchronous by default, and wait=true waits for the same job: ready, with the sha256 of the same bytes uploaded without waiting', async () => {
    const waited = await upload('name=async-chat-inline&format=jsonl&wait=true', RECORDS.join('\n'), 'chat.jsonl');
    expect(waited.status).toBe(201);
    expect(waited.body).toMatchObject({ status: 'ready', num_records: 12, job_id: expect.any(String) });
    expect(await jobEnded(waited.body.job_id as string)).toMatchObject({ status: 'succeeded', type: 'data_preparation' });
    const queued = await upload('name=async-chat-queued&format=jsonl', RECORDS.join('\n'), 'chat.jsonl');
    expect(queued).toMatchObject({ status: 201, body: { status: 'preparing' } });
    const ready = await settled(queued.body.id as string);
    expect(ready.sha256).toBe(waited.body.sha256);
  }, 180_000);

  it('wait=true answers 202 with the version still preparing when wait_seconds runs out, and its job goes on', async () => {
    const res = await upload('name=async-short-wait&format=jsonl&wait=true&wait_seconds=1', RECORDS.join('\n'), 'chat.jsonl');
    expect(res.status).toBe(202);
    expect(res.body).toMatchObject({ status: 'preparing', job_id: expect.any(String) });
    expect(await settled(res.body.id as string)).toMatchObject({ status: 'ready', num_records: 12 });
    const bad = await upload('name=async-short-wait&format=jsonl&wait=true&wait_seconds=0', RECORDS.join('\n'), 'chat.jsonl');
    expect(bad.status).toBe(400);
    expect(bad.body.message).toMatch(/wait_seconds/);
  }, 180_000);

  it("tells its reading progress in the job's message (records read, share of the input's bytes) before the job ends", async () => {
    // 200,000 records gzipped (~1.6 MB sent): reading them takes seconds, long enough for the worker's polls to see.
    const many = gzipSync(Array.from({ length: 200_000 }, (_, i) => chat(`question ${i} about item ${i % 113}`, `answer ${i}`)).join('\n'));
    const res = await upload('name=async-progress&format=jsonl', many, 'many.jsonl.gz');
    expect(res.body.status, JSON.stringify(res.body)).toBe('preparing');
    const seen: string[] = [];
    let job: Json;
    do {
      job = (await stack.api<Json>('GET', `/v1/jobs/${res.body.job_id}`)).body;
      if (job.status === 'running' && /^reading: /.test(job.message ?? '')) seen.push(job.message as string);
      await new Promise((r) => setTimeout(r, 100));
    } while (!['succeeded', 'failed', 'cancelled'].includes(job.status as string));
    expect(job.status).toBe('succeeded');
    // Before the first offset is known (the file not yet open) it tells the records only.
    for (const m of seen) expect(m).toMatch(/^reading: [\d,]+ records(, \d{1,3}% of \d+\.\d MB)?$/);
    // The share is of the bytes as stored: the compressed file.
    const size = (many.byteLength / 1e6).toFixed(1);
    expect(seen.filter((m) => m.endsWith(`% of ${size} MB`)), JSON.stringify(seen)).not.toHaveLength(0);
  }, 300_000);

  it('refuses a malformed JSONL line in the request with 400 and issues naming file, line, field and what was expected', async () => {
    const res = await upload('name=async-bad&format=jsonl&wait=false', [chat('q', 'a'), JSON.stringify({ messages: [{ role: 'bot', content: 'x' }] })].join('\n'), 'bad.jsonl');
    expect(res.status).toBe(400);
    expect(res.body.error_code).toBe('INVALID_PARAMETER_VALUE');
    expect(res.body.issues).toEqual([expect.objectContaining({ file: 'bad.jsonl', line: 2, field: 'messages[0].role', expected: 'one of system, user, assistant' })]);
    expect((await stack.api<Json>('GET', '/v1/datasets?name=async-bad')).body.datasets).toEqual([]);
  });

  it('refuses a file whose bytes are not the format it claims before storing it', async () => {
    const res = await upload('name=async-notparquet&format=parquet&wait=false', 'this is text, not parquet', 'x.parquet');
    expect(res.status).toBe(400);
    expect(res.body.issues[0]).toMatchObject({ file: 'x.parquet', field: null, expected: 'a Parquet file (starting PAR1)' });
  });

  it('ends a Parquet upload with a bad row failed, with issues naming the row and the field, and its job failed', async () => {
    const file = join(stack.home, 'bad-role.parquet');
    // The test's input made by pyarrow, the library the trainer reads Parquet with: row 3's answer has role "bot".
    const rows = 'm=[[{"role":"user","content":f"q{i}"},{"role":"assistant","content":f"a{i}"}] for i in range(5)]; m[2][1]["role"]="bot"';
    await promisify(execFile)(trainerPython(stack.loaded), ['-c', `import pyarrow as pa, pyarrow.parquet as pq; ${rows}; pq.write_table(pa.table({"messages": m}), ${JSON.stringify(file)})`]);
    const res = await upload('name=async-chat&format=parquet&wait=false', readFileSync(file), 'bad-role.parquet');
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ version: 2, status: 'preparing' });
    const failed = await settled(res.body.id as string);
    expect(failed.status).toBe('failed');
    expect(failed.issues).toEqual([expect.objectContaining({ file: 'bad-role.parquet', record: 3, field: 'messages[1].role', expected: 'one of system, user, assistant' })]);
    expect((await stack.api<Json>('GET', `/v1/datasets/${res.body.id}/download`)).status).toBe(409);
    const job = await jobEnded(res.body.job_id as string);
    expect(job.status).toBe('failed');
    expect(job.message).toMatch(/bad-role\.parquet record 3 field messages\[1\]\.role/);
  }, 180_000);

  it('wait=true answers a Parquet upload with a bad row 400, with the issues its job found, and leaves the version failed', async () => {
    const res = await upload('name=async-refused&format=parquet&wait=true', readFileSync(join(stack.home, 'bad-role.parquet')), 'bad-role.parquet');
    expect(res.status).toBe(400);
    expect(res.body.error_code).toBe('INVALID_PARAMETER_VALUE');
    expect(res.body.message).toMatch(/bad-role\.parquet record 3 field messages\[1\]\.role/);
    expect(res.body.issues).toEqual([expect.objectContaining({ file: 'bad-role.parquet', record: 3, field: 'messages[1].role', expected: 'one of system, user, assistant' })]);
    const listed = (await stack.api<Json>('GET', '/v1/datasets?name=async-refused')).body.datasets as Json[];
    expect(listed.map((d) => d.status)).toEqual(['failed']);
  }, 180_000);

  it('`hanzo-ml dataset upload` follows the job to the ready version, --no-wait returns it preparing, and a refused one exits 1 with its issues one per line', async () => {
    const bin = fileURLToPath(new URL('../bin/hanzo-ml', import.meta.url));
    const env = { ...process.env, HANZO_ML_API_URL: stack.runtime.apiUrl, HANZO_ML_TOKEN: stack.loaded.config.auth.dev_token };
    const cli = (...args: string[]) => promisify(execFile)(bin, args, { env }).then((r) => ({ code: 0, ...r }), (e: { code: number; stdout: string; stderr: string }) => e);
    const good = join(stack.home, 'cli-chat.jsonl');
    writeFileSync(good, RECORDS.join('\n'));
    const waited = await cli('dataset', 'upload', '--name', 'cli-upload', '--path', good);
    expect(waited.code).toBe(0);
    expect(waited.stderr).toMatch(/cli-upload v1: preparing/);
    expect(waited.stderr).toMatch(/cli-upload v1: ready — job succeeded/);
    expect(JSON.parse(waited.stdout)).toMatchObject({ status: 'ready', num_records: 12 });

    const quick = await cli('dataset', 'upload', '--name', 'cli-upload', '--path', good, '--no-wait');
    expect(quick.code).toBe(0);
    expect(JSON.parse(quick.stdout)).toMatchObject({ version: 2, status: 'preparing' });

    const refused = await cli('dataset', 'upload', '--name', 'cli-upload', '--path', join(stack.home, 'bad-role.parquet'));
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('bad-role.parquet:3: field "messages[1].role": expected one of system, user, assistant, got "bot"');
  }, 180_000);

  it("prepares a pipeline's source_uri through the same preparation job, to the same sha256 as an upload, once however often retried", async () => {
    const source = join(stack.home, 'pipeline-source.jsonl');
    writeFileSync(source, RECORDS.join('\n'));
    const organization = ((await stack.api<Json>('GET', '/v1/datasets?name=async-chat-inline')).body.datasets as Json[])[0]!;
    // The preprocess activity with the worker's kind of dependencies (its own file store under this stack's home).
    const activities = createDatasetActivities(offlineActivityDeps(stack.runtime.catalogue.db, stack.loaded, stack.home));
    const input = { organization_id: organization.organization, requested_by: 'dev', base_model: DEFAULT_BASE_MODEL, dataset: { name: 'pipe-src', source_uri: `file://${source}`, seed: 42, splits: { train: 0.8, validation: 0.1, test: 0.1 } } } as unknown as PipelineWorkflowInput;
    const first = (await new MockActivityEnvironment().run(() => activities.prepareDataset({ pipelineId: 'p-1', input }))) as Json;
    expect(first).toMatchObject({ name: 'pipe-src', version: 1, sha256: organization.sha256 });
    const again = await new MockActivityEnvironment().run(() => activities.prepareDataset({ pipelineId: 'p-1', input }));
    expect(again).toEqual(first);
    const version = (await stack.api<Json>('GET', `/v1/datasets/${first.id}`)).body;
    expect(version).toMatchObject({ status: 'ready', num_records: 12 });
  }, 180_000);

  it("resolves a pipeline's latest to the newest ready version, past newer ones failed or still preparing", async () => {
    const db = stack.runtime.catalogue.db;
    const DEV_ORGANIZATION_ID = ((await stack.api<Json>('GET', '/v1/datasets?name=async-chat')).body.datasets as Json[])[0]!.organization as string;
    const ready = await findDatasetVersion(db, DEV_ORGANIZATION_ID, 'async-chat', 'latest');
    // Stand-in for an upload whose job has not run yet: a preparing row inserted directly.
    const preparing = await insertDatasetVersion(db, { ...readyRowFields(ready!), id: 'preparing-stand-in', status: 'preparing', splits: null });
    expect(preparing.version).toBe(3);
    expect((await findDatasetVersion(db, DEV_ORGANIZATION_ID, 'async-chat', 'latest'))?.version).toBe(1);
    expect(await findDatasetVersion(db, DEV_ORGANIZATION_ID, 'async-chat', 3)).toBeNull();
    expect(await findDatasetVersion(db, DEV_ORGANIZATION_ID, 'async-chat', 2)).toBeNull();
    const listed = (await stack.api<Json>('GET', '/v1/datasets?name=async-chat')).body.datasets as Json[];
    expect(listed.map((d) => [d.version, d.status]).sort()).toEqual([[1, 'ready'], [2, 'failed'], [3, 'preparing']]);
  });
});

function readyRowFields(row: NonNullable<Awaited<ReturnType<typeof findDatasetVersion>>>) {
  return Object.fromEntries(Object.entries(row).filter(([k]) => k !== 'version' && k !== 'createdAt')) as Omit<typeof row, 'version' | 'createdAt'>;
}

// Derived dataset versions end to end on a real stack (worker, local executor, file store): raw -> filtered ->
// tokenized through prepare-dataset jobs, with counts that add up from each operation to the next and to the
// version; and uploads in the formats only the trainer reads, with bad input answered 400 naming record and field.
// These need the trainer's `prepare-dataset` command; without it in this checkout they are skipped (by name).
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { repoRoot, trainerPython } from '../lib/config.js';
import { TERMINAL_JOB_STATUSES, type JobStatus } from '../contracts/jobs.js';
import { DeriveRequestSchema, datasetPreparationWorkflowId, type DatasetPreparationInput } from '../contracts/data-prep.js';
import { PIPELINE_TASK_QUEUE } from '../contracts/pipeline.js';
import { DEFAULT_BASE_MODEL } from '../lib/base-models.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const HAS_PREPARE_DATASET = readFileSync(join(repoRoot, 'trainer/hanzo_ml/cli.py'), 'utf8').includes('prepare-dataset');
const DEV = { authorization: 'Bearer hanzo-ml-dev-token' };
const chat = (q: string, a: string) => JSON.stringify({ messages: [{ role: 'user', content: q }, { role: 'assistant', content: a }] });

/** 60 distinct records, 10 exact duplicates, 5 with an e-mail address, 3 far longer than the rest. */
const RAW = [
  ...Array.from({ length: 60 }, (_, i) => chat(`How do I reset my password, case ${i}?`, `Open settings and choose reset, step ${i}.`)),
  ...Array.from({ length: 10 }, (_, i) => chat(`How do I reset my password, case ${i}?`, `Open settings and choose reset, step ${i}.`)),
  ...Array.from({ length: 5 }, (_, i) => chat(`Mail me at user${i}@example.com please`, `Sent to user${i}@example.com.`)),
  ...Array.from({ length: 3 }, (_, i) => chat(`long ${i} ` + 'word '.repeat(400), 'ok')),
];

let stack: TestStack;

async function postJson(path: string, body: unknown): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${stack.runtime.apiUrl}${path}`, { method: 'POST', headers: { ...DEV, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as Json };
}

async function uploadBytes(query: string, body: string | Uint8Array, filename?: string): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${stack.runtime.apiUrl}/v1/datasets?${query}`, { method: 'POST', headers: { ...DEV, ...(filename ? { 'x-filename': filename } : {}) }, body: typeof body === 'string' ? body : new Uint8Array(body) });
  return { status: res.status, body: (await res.json()) as Json };
}

/** Derives and waits for the job to end; returns the job and, when it succeeded, the new version. */
async function deriveAndWait(parentId: string, request: unknown): Promise<{ job: Json; version: Json | null; datasetId: string }> {
  const accepted = await postJson(`/v1/datasets/${parentId}/derive`, request);
  expect(accepted.status).toBe(202);
  for (let i = 0; i < 600; i++) {
    const job = (await stack.api<Json>('GET', `/v1/jobs/${accepted.body.job_id}`)).body;
    if (TERMINAL_JOB_STATUSES.includes(job.status as JobStatus)) {
      const version = job.status === 'succeeded' ? (await stack.api<Json>('GET', `/v1/datasets/${accepted.body.dataset_id}`)).body : null;
      return { job, version, datasetId: accepted.body.dataset_id as string };
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(`job ${accepted.body.job_id} did not end`);
}

/** Each operation's records_in is the one before's records_out, and the last's is the version's record count. */
function expectCountsAddUp(version: Json, recordsIn: number): void {
  const ops = version.lineage.operations as Json[];
  let n = recordsIn;
  for (const op of ops) {
    expect(op.records_in).toBe(n);
    expect(op.records_out).toBe(op.records_in - op.removed + op.added);
    n = op.records_out;
  }
  expect(version.num_records).toBe(n);
  expect(version.splits.train.num_records + version.splits.validation.num_records + version.splits.test.num_records).toBe(n);
}

describe.skipIf(!HAS_PREPARE_DATASET)('derived versions (needs the trainer\'s prepare-dataset command)', () => {
  let raw: Json;
  let filtered: Json;

  beforeAll(async () => {
    stack = await startTestStack();
    raw = (await uploadBytes('name=derive-raw&format=jsonl&wait=true', RAW.join('\n'))).body;
  }, 180_000);

  afterAll(async () => {
    await stack?.stop();
  });

  it('derives raw -> filtered: PII masked, duplicates dropped, long records filtered, counts adding up, lineage to its parent', async () => {
    const { job, version } = await deriveAndWait(raw.id, {
      name: 'derive-filtered',
      operations: [{ op: 'mask_pii', kinds: ['email'] }, { op: 'dedup_exact' }, { op: 'filter', max_tokens: 200 }],
      tags: ['clean'],
    });
    expect(job).toMatchObject({ type: 'data_preparation', parent: `dataset:${raw.id}`, status: 'succeeded' });
    filtered = version!;
    expect(filtered.lineage.parent_datasets).toEqual([raw.id]);
    expect(filtered.lineage.transform).toMatch(/^derive derive-raw v1: mask_pii\(.*\) -> dedup_exact\(.*\) -> filter\(.*max_tokens=200.*\)$/);
    expectCountsAddUp(filtered, raw.num_records);
    expect(filtered.metadata.report.pii_redactions.email).toBeGreaterThanOrEqual(5);
    expect(filtered.lineage.operations[2].removed).toBe(3);
    expect(filtered.tags).toEqual(['clean']);
    const preview = (await stack.api<Json>('GET', `/v1/datasets/${filtered.id}/preview?split=train&n=100`)).body.records as Json[];
    expect(JSON.stringify(preview)).not.toMatch(/@example\.com/);
  });

  it('derives filtered -> tokenized: Arrow files per split whose token counts are the version\'s', async () => {
    const { version } = await deriveAndWait(filtered.id, { operations: [{ op: 'tokenize', max_length: 128 }] });
    const tokenized = version!.metadata.report.tokenized as { max_length: number; splits: Record<string, { path: string; rows: number; tokens: number }> };
    expect(tokenized.max_length).toBe(128);
    for (const split of ['train', 'validation', 'test']) {
      expect(tokenized.splits[split]!.path).toMatch(new RegExp(`/tokenized/${split}\\.arrow$`));
      expect(await stack.runtime.store.exists(tokenized.splits[split]!.path)).toBe(true);
      expect(version!.metadata.report.token_counts[split]).toBe(version!.splits[split].tokens);
    }
    expect(version!.num_records).toBe(filtered.num_records);
    expect(version!.lineage.parent_datasets).toEqual([filtered.id]);
  });

  it('makes the same version again when its workflow runs again with the same input (a retry adds no row)', async () => {
    const job = (await stack.api<Json>('GET', `/v1/jobs?parent=dataset:${raw.id}`)).body.jobs[0] as Json;
    const input: DatasetPreparationInput = {
      organization_id: filtered.organization,
      requested_by: job.submitted_by,
      job_id: job.id,
      parent_id: raw.id,
      dataset_id: filtered.id,
      name: filtered.name,
      tokenizer: DEFAULT_BASE_MODEL,
      request: DeriveRequestSchema.parse({ name: filtered.name, operations: job.spec.operations, tags: job.spec.tags }),
    };
    const names = async () => ((await stack.api<Json>('GET', '/v1/datasets?name=derive-filtered')).body.datasets as Json[]).map((v) => `${v.id}@${v.version}`).sort();
    const before = await names();
    const again = await stack.runtime.client.workflow.execute('datasetPreparationWorkflow', { taskQueue: PIPELINE_TASK_QUEUE, workflowId: `${datasetPreparationWorkflowId(filtered.id)}-again`, args: [input] });
    expect(again).toEqual({ dataset_id: filtered.id, version: filtered.version, sha256: filtered.sha256 });
    expect(await names()).toEqual(before);
  });

  it('fails the job with the issues prepare-dataset wrote on bad input, and records no version', async () => {
    const { job, version, datasetId } = await deriveAndWait(raw.id, { name: 'derive-refused', operations: [{ op: 'filter', languages: ['zz'] }] });
    expect(job.status).toBe('failed');
    expect(job.message).toMatch(/the data was refused:\n {2}operations field filter\.languages: no language detector for 'zz'/);
    expect(version).toBeNull();
    expect((await stack.api('GET', `/v1/datasets/${datasetId}`)).status).toBe(404);
    expect((await stack.api<Json>('GET', '/v1/datasets?name=derive-refused')).body.datasets).toEqual([]);
  });

  it('`hanzo-ml dataset derive --wait` tells the job\'s progress and prints the new version; a refused one exits 1 with the issues', async () => {
    const bin = join(repoRoot, 'bin/hanzo-ml');
    const env = { ...process.env, HANZO_ML_API_URL: stack.runtime.apiUrl, HANZO_ML_TOKEN: stack.loaded.config.auth.dev_token };
    const run = (...args: string[]) => promisify(execFile)(bin, args, { env }).then((r) => ({ code: 0, ...r }), (e: { code: number; stdout: string; stderr: string }) => e);
    const ok = await run('dataset', 'derive', raw.id, '--name', 'derive-cli', '--op', 'dedup_exact', '--wait');
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stderr).toMatch(/: succeeded/);
    expect(JSON.parse(ok.stdout)).toMatchObject({ name: 'derive-cli', version: 1, lineage: { parent_datasets: [raw.id] } });
    const refused = await run('dataset', 'derive', raw.id, '--op', 'filter:languages=zz', '--wait');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/failed — the data was refused:\n {2}operations field filter\.languages/);
  });

  it('uploads plain text and gzip-compressed JSONL through prepare-dataset', async () => {
    const text = await uploadBytes('name=derive-text&format=text&wait=true', 'first line of text\nsecond line of text\nthird line\n');
    expect(text.status).toBe(201);
    expect(text.body).toMatchObject({ format: 'text', num_records: 3 });
    const gz = await uploadBytes('name=derive-gz&format=jsonl&wait=true', gzipSync(RAW.slice(0, 20).join('\n')), 'chats.jsonl.gz');
    expect(gz.status).toBe(201);
    expect(gz.body.num_records).toBe(20);
  });

  it('uploads a Parquet file of plain text through prepare-dataset, one record per row', async () => {
    const file = join(stack.home, 'rows.parquet');
    // The test's input made by pyarrow, the library the trainer reads Parquet with.
    await promisify(execFile)(trainerPython(stack.loaded), ['-c', `import pyarrow as pa, pyarrow.parquet as pq; pq.write_table(pa.table({"text": [f"row {i} of text" for i in range(12)]}), ${JSON.stringify(file)})`]);
    const res = await uploadBytes('name=derive-parquet&format=parquet&wait=true', readFileSync(file), 'rows.parquet');
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ format: 'parquet', num_records: 12 });
    expect(res.body.splits.train.num_records + res.body.splits.validation.num_records + res.body.splits.test.num_records).toBe(12);
  });

  it('answers a bad gzip-compressed upload with 400 naming the file, line and field, checked in the request as it is decompressed', async () => {
    const bad = gzipSync([chat('q', 'a'), '{"messages": "not a list"}'].join('\n'));
    const res = await uploadBytes('name=derive-bad&format=jsonl&compression=gzip', bad, 'bad.jsonl.gz');
    expect(res.status).toBe(400);
    expect(res.body.issues).toEqual([expect.objectContaining({ file: 'bad.jsonl.gz', line: 2, field: 'messages' })]);
    // Cut short: refused where the stream breaks, not stored.
    const cut = gzipSync(RAW.slice(0, 20).join('\n'));
    const truncated = await uploadBytes('name=derive-bad&format=jsonl', cut.subarray(0, cut.length - 12), 'cut.jsonl.gz');
    expect(truncated.status).toBe(400);
    expect(truncated.body.issues[0]).toMatchObject({ file: 'cut.jsonl.gz', field: null, message: expect.stringMatching(/cannot decompress/) });
    expect((await stack.api<Json>('GET', '/v1/datasets?name=derive-bad')).body.datasets).toEqual([]);
  });

  it('checks a zstd-compressed upload in the request as it is decompressed (400 naming line and field), and prepares a good one', async () => {
    const fixture = (name: string) => readFileSync(join(repoRoot, 'test/fixtures', name));
    const bad = await uploadBytes('name=derive-zst&format=jsonl', fixture('bad-line-2.jsonl.zst'), 'bad.jsonl.zst');
    expect(bad.status).toBe(400);
    expect(bad.body.issues).toEqual([expect.objectContaining({ file: 'bad.jsonl.zst', line: 2, field: 'messages' })]);
    const good = await uploadBytes('name=derive-zst&format=jsonl&wait=true', fixture('chats-300.jsonl.zst'), 'chats.jsonl.zst');
    expect(good.status, JSON.stringify(good.body)).toBe(201);
    expect(good.body).toMatchObject({ name: 'derive-zst', version: 1, num_records: 300 });
  });
});

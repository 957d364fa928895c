// `hanzo-ml dataset list|preview|download|derive` through the binary against a real embedded API (no worker: a
// derive's job stays queued), and the --op shorthand the derive command reads.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deriveRequest, formatOfFile, parseOp } from '../cli/dataset.js';
import { datasetLine } from '../cli/demo.js';
import { startTestStack, withWorker, type TestStack } from './support/stack.js';

const bin = fileURLToPath(new URL('../bin/hanzo-ml', import.meta.url));
const exec = promisify(execFile);
const chat = (i: number) => JSON.stringify({ messages: [{ role: 'user', content: `q${i}?` }, { role: 'assistant', content: `a${i}` }] });

let stack: TestStack;
let id: string;
const env = () => ({ ...process.env, HANZO_ML_API_URL: stack.runtime.apiUrl, HANZO_ML_TOKEN: stack.loaded.config.auth.dev_token });
const cli = (...args: string[]) => exec(bin, args, { env: env() }).then((r) => ({ code: 0, ...r }), (e: { code: number; stdout: string; stderr: string }) => e);

describe('the --op shorthand and --config', () => {
  it('reads name:key=value pairs as JSON values and a|b as lists', () => {
    expect(parseOp('dedup_exact')).toEqual({ op: 'dedup_exact' });
    expect(parseOp('mask_pii:kinds=email')).toEqual({ op: 'mask_pii', kinds: ['email'] });
    expect(parseOp('filter:min_tokens=5,languages=en|de')).toEqual({ op: 'filter', min_tokens: 5, languages: ['en', 'de'] });
    expect(parseOp('dedup_near:threshold=0.8,against_parents=true')).toEqual({ op: 'dedup_near', threshold: 0.8, against_parents: true });
    expect(parseOp('{"op":"tokenize","max_length":512}')).toEqual({ op: 'tokenize', max_length: 512 });
    expect(() => parseOp('filter:min_tokens')).toThrow(/expected key=value/);
  });

  it('takes the operations from a YAML file, then --op after them', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'ops-')), 'ops.yaml');
    writeFileSync(file, 'operations:\n  - op: mask_pii\n    kinds: [email]\nsplit: null\n');
    expect(await deriveRequest({ op: ['dedup_exact'], config: file, name: 'clean' })).toEqual({ operations: [{ op: 'mask_pii', kinds: ['email'] }, { op: 'dedup_exact' }], split: null, name: 'clean' });
    await expect(deriveRequest({ op: [] })).rejects.toThrow(/--op .* or --config/);
  });

  it('tells the format from the file name under .gz and .zst', () => {
    expect(formatOfFile('a.parquet')).toBe('parquet');
    expect(formatOfFile('a.jsonl.gz')).toBe('jsonl');
    expect(formatOfFile('a.txt.zst')).toBe('text');
    expect(formatOfFile('a.feather')).toBe('arrow');
  });
});

describe('hanzo-ml dataset', () => {
  beforeAll(async () => {
    stack = await startTestStack({}, { worker: false });
    // The version's preparation job runs on a worker that stops once it is ready.
    const res = await withWorker(stack, () =>
      fetch(`${stack.runtime.apiUrl}/v1/datasets?name=cli-ds&format=jsonl&tags=alpha&wait=true`, {
        method: 'POST',
        headers: { authorization: `Bearer ${stack.loaded.config.auth.dev_token}` },
        // Two records repeated: the preparation's exact dedup removes them.
        body: [...Array.from({ length: 30 }, (_, i) => chat(i)), chat(0), chat(1)].join('\n'),
      }),
    );
    expect(res.status).toBe(201);
    id = ((await res.json()) as { id: string }).id;
  }, 180_000);
  afterAll(async () => stack?.stop());

  it('previews a split as JSON lines and downloads it through its signed URL', async () => {
    const preview = await cli('dataset', 'preview', id, '--split', 'train', '-n', '2');
    expect(preview.code).toBe(0);
    const lines = preview.stdout.trim().split('\n').map((l) => JSON.parse(l) as { messages: unknown[] });
    expect(lines).toHaveLength(2);
    const out = join(mkdtempSync(join(tmpdir(), 'dl-')), 'train.jsonl');
    const dl = await cli('dataset', 'download', id, '--split', 'train', '--out', out);
    expect(dl.code, dl.stderr).toBe(0);
    expect(readFileSync(out, 'utf8').trim().split('\n').slice(0, 2).map((l) => JSON.parse(l))).toEqual(lines);
  });

  it("gives the demo's summary line of a prepared version: its splits, the duplicates removed and the train tokens", async () => {
    const view = await stack.api<Record<string, unknown>>('GET', `/v1/datasets/${id}`);
    expect(view.status).toBe(200);
    expect(datasetLine(view.body)).toMatch(/ 30 records \(train \d+ \/ validation \d+ \/ test \d+\), 2 duplicates removed, [1-9]\d* train tokens$/);
  });

  it('lists by tag', async () => {
    expect((await cli('dataset', 'list', '--tags', 'alpha')).stdout).toContain('cli-ds');
    expect((await cli('dataset', 'list', '--tags', 'beta')).stdout).not.toContain('cli-ds');
  });

  it('starts a derive and prints its job; a bad operation exits non-zero naming the field', async () => {
    const ok = await cli('dataset', 'derive', id, '--op', 'dedup_exact', '--op', 'filter:max_tokens=100');
    expect(ok.code, ok.stderr).toBe(0);
    expect(JSON.parse(ok.stdout)).toMatchObject({ job_id: expect.any(String), dataset_id: expect.any(String) });
    const bad = await cli('dataset', 'derive', id, '--op', 'filter:min_tokens=9,max_tokens=3');
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/operations\.0.*min_tokens must not exceed max_tokens/);
  });
});

import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { gzipSync } from 'node:zlib';
import { repoRoot } from '../../lib/config.js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  DatasetValidationError,
  DatasetVersionExistsError,
  preprocessDataset,
  validateDataset,
  type PreprocessOptions,
  type PreprocessResult,
} from '../../datasets/ingest/preprocess.js';

let root: string;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'hanzo-ml-datasets-'));
});

afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

const SPLITS = { train: 0.8, validation: 0.1, test: 0.1 };

function chat(user: string, assistant: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { messages: [{ role: 'user', content: user }, { role: 'assistant', content: assistant }], ...extra };
}

function jsonl(records: unknown[]): string {
  return records.map((r) => JSON.stringify(r)).join('\n') + '\n';
}

function manyChats(n: number, prefix = 'q'): Record<string, unknown>[] {
  return Array.from({ length: n }, (_, i) => chat(`${prefix} ${i}`, `a ${i}`));
}

async function writeSource(name: string, content: string | Buffer): Promise<string> {
  const path = join(root, 'src', name);
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, content);
  return path;
}

function outDir(name = 'v1'): string {
  return join(root, 'versions', name);
}

async function run(name: string, content: string | Buffer, opts: Partial<PreprocessOptions> = {}): Promise<PreprocessResult> {
  const sourcePath = await writeSource(name, content);
  const format = name.endsWith('.csv') ? 'csv' : 'jsonl';
  return preprocessDataset({ sourcePath, format, outDir: outDir(), seed: 7, splits: SPLITS, ...opts });
}

async function splitLines(dir: string, split: string): Promise<string[]> {
  const text = await readFile(join(dir, `${split}.jsonl`), 'utf8');
  return text.split('\n').filter((l) => l !== '');
}

async function allRecords(dir: string): Promise<unknown[]> {
  const lines = [
    ...(await splitLines(dir, 'train')),
    ...(await splitLines(dir, 'validation')),
    ...(await splitLines(dir, 'test')),
  ];
  return lines.map((l) => JSON.parse(l));
}

async function expectNothingLeftBehind(dir = outDir()): Promise<void> {
  expect(existsSync(dir)).toBe(false);
  const siblings = await readdir(dirname(dir)).catch(() => []);
  expect(siblings.filter((n) => n.includes('.tmp-'))).toEqual([]);
}

/** Runs a file that must be rejected; returns the error after checking nothing was left on disk. */
async function expectRejected(
  name: string,
  content: string | Buffer,
  fragments: string[],
  opts: Partial<PreprocessOptions> = {},
): Promise<DatasetValidationError> {
  const err = await run(name, content, opts).then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(DatasetValidationError);
  const error = err as DatasetValidationError;
  for (const fragment of fragments) expect(error.message).toContain(fragment);
  await expectNothingLeftBehind();
  return error;
}

describe('preprocessDataset: valid input', () => {
  it('normalizes a chat-form file into train, validation and test files', async () => {
    const records = manyChats(60).map((r, i) => (i === 0 ? { id: 'x', ...r } : r));
    records[1] = { messages: [{ role: 'system', content: 'Be brief.' }, ...(records[1]!.messages as unknown[])] };
    const result = await run('demo.jsonl', jsonl(records));

    expect(result.num_records).toBe(60);
    expect(result.schema).toEqual({ form: 'messages', fields: ['id', 'messages'] });
    const counts = Object.values(result.splits).map((s) => s.num_records);
    expect(counts.reduce((a, b) => a + b)).toBe(60);
    for (const split of ['train', 'validation', 'test'] as const) {
      expect(result.splits[split].path).toBe(`${split}.jsonl`);
      for (const line of await splitLines(outDir(), split)) expect(line).toMatch(/^\{"messages":\[\{"role":"\w+","content":/);
    }
    const normalized = await allRecords(outDir());
    expect(normalized).toContainEqual(chat('q 0', 'a 0')); // the unknown "id" key is dropped
    expect(normalized).toContainEqual({
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'q 1' },
        { role: 'assistant', content: 'a 1' },
      ],
    });
  });

  it('converts instruction-form records, accepting "output" as an alias of "response"', async () => {
    const records = [
      { instruction: 'Translate', input: 'bonjour', output: 'hello' },
      { instruction: 'Greet', response: 'Hi!', system: 'You are kind.' },
      { instruction: 'Count', input: '', response: '1 2 3', system: null },
    ];
    const result = await run('inst.jsonl', jsonl(records), { splits: { train: 1, validation: 0, test: 0 } });

    expect(result.schema.form).toBe('instruction');
    expect(result.splits.train.num_records).toBe(3);
    const normalized = await allRecords(outDir());
    expect(normalized).toEqual(
      expect.arrayContaining([
        { messages: [{ role: 'user', content: 'Translate\n\nbonjour' }, { role: 'assistant', content: 'hello' }] },
        {
          messages: [
            { role: 'system', content: 'You are kind.' },
            { role: 'user', content: 'Greet' },
            { role: 'assistant', content: 'Hi!' },
          ],
        },
        { messages: [{ role: 'user', content: 'Count' }, { role: 'assistant', content: '1 2 3' }] },
      ]),
    );
  });

  it('parses CSV with quoted fields, escaped quotes and line breaks inside quotes', async () => {
    const csv = [
      'instruction,input,output,notes',
      '"Say ""hi"", politely",,"Hi,\r\nthere",ignored',
      'Plain,some input,plain answer,',
      '',
    ].join('\r\n');
    const result = await run('data.csv', csv, { splits: { train: 1, validation: 0, test: 0 } });

    expect(result.schema).toEqual({ form: 'instruction', fields: ['instruction', 'input', 'output', 'notes'] });
    expect(result.source.lines).toBe(4);
    expect(await allRecords(outDir())).toEqual(
      expect.arrayContaining([
        { messages: [{ role: 'user', content: 'Say "hi", politely' }, { role: 'assistant', content: 'Hi,\nthere' }] },
        { messages: [{ role: 'user', content: 'Plain\n\nsome input' }, { role: 'assistant', content: 'plain answer' }] },
      ]),
    );
  });

  it('removes exact duplicates after normalization, keeping the first, and counts them', async () => {
    const lines = [
      JSON.stringify(chat('same', 'answer')),
      JSON.stringify(chat('other', 'answer')),
      '{ "messages": [ {"content": "same", "role": "user"}, {"role": "assistant", "content": "answer"} ] }',
      JSON.stringify(chat('same', 'answer', { source: 'copy' })),
      '',
    ];
    const result = await run('dups.jsonl', lines.join('\n'));

    expect(result.num_records).toBe(2);
    expect(result.duplicates_removed).toBe(2);
    expect(await allRecords(outDir())).toHaveLength(2);
  });

  it('writes the same files for the same seed', async () => {
    const content = jsonl(manyChats(200));
    const first = await run('a.jsonl', content);
    const second = await run('a.jsonl', content, { outDir: outDir('v2') });

    expect(second.splits).toEqual(first.splits);
    expect(second.sha256).toBe(first.sha256);
    for (const split of ['train', 'validation', 'test']) {
      expect(await readFile(join(outDir('v2'), `${split}.jsonl`))).toEqual(await readFile(join(outDir(), `${split}.jsonl`)));
    }
  });

  it('assigns records differently under a different seed', async () => {
    const content = jsonl(manyChats(200));
    await run('a.jsonl', content, { seed: 1 });
    await run('a.jsonl', content, { seed: 2, outDir: outDir('v2') });

    expect(await splitLines(outDir('v2'), 'test')).not.toEqual(await splitLines(outDir(), 'test'));
  });

  it('keeps split membership when the input lines are reordered', async () => {
    const records = manyChats(200);
    await run('a.jsonl', jsonl(records));
    await run('b.jsonl', jsonl([...records].reverse()), { outDir: outDir('v2') });

    for (const split of ['train', 'validation', 'test']) {
      const before = (await splitLines(outDir(), split)).sort();
      const after = (await splitLines(outDir('v2'), split)).sort();
      expect(after).toEqual(before);
    }
  });

  it('reports split sizes and sha256s that match the files on disk, and a version checksum over them', async () => {
    const content = jsonl(manyChats(100));
    const result = await run('a.jsonl', content);

    for (const split of ['train', 'validation', 'test'] as const) {
      const bytes = await readFile(join(outDir(), `${split}.jsonl`));
      expect(result.splits[split].size_bytes).toBe(bytes.length);
      expect(result.splits[split].sha256).toBe(createHash('sha256').update(bytes).digest('hex'));
    }
    const { train, validation, test } = result.splits;
    expect(result.sha256).toBe(createHash('sha256').update(train.sha256 + validation.sha256 + test.sha256).digest('hex'));
    expect(result.source).toEqual({
      sha256: createHash('sha256').update(content).digest('hex'),
      size_bytes: Buffer.byteLength(content),
      lines: 100,
    });
  });

  it('puts at least one record in train and in test when there are two or more records', async () => {
    // Under seed 7 all three hash into validation's range (0.944, 0.971, 0.031), so both train and test borrow:
    // test takes the highest hash ("q 1"), train the lowest ("q 2").
    const result = await run('three.jsonl', jsonl(manyChats(3)), { splits: { train: 0.01, validation: 0.98, test: 0.01 } });

    expect(result.splits.train.num_records).toBe(1);
    expect(result.splits.test.num_records).toBe(1);
    expect(result.splits.validation.num_records).toBe(1);
    for (const split of ['train', 'validation', 'test'] as const) {
      const bytes = await readFile(join(outDir(), `${split}.jsonl`));
      expect(result.splits[split].sha256).toBe(createHash('sha256').update(bytes).digest('hex'));
      expect(bytes.toString().split('\n').filter(Boolean)).toHaveLength(1);
    }
    expect(await allRecords(outDir())).toEqual([chat('q 2', 'a 2'), chat('q 0', 'a 0'), chat('q 1', 'a 1')]);
  });

  it('tolerates a UTF-8 byte order mark and CRLF line endings', async () => {
    const content = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(jsonl(manyChats(3)).replaceAll('\n', '\r\n'))]);
    const result = await run('bom.jsonl', content);

    expect(result.num_records).toBe(3);
    expect(await allRecords(outDir())).toContainEqual(chat('q 0', 'a 0'));
  });

  it('processes a 200k-record file by streaming it', async () => {
    const path = join(root, 'src', 'large.jsonl');
    await mkdir(dirname(path), { recursive: true });
    const lines: string[] = [];
    for (let i = 0; i < 200_000; i++) lines.push(`{"instruction":"question ${i}","response":"answer ${i % 1000}"}`);
    await writeFile(path, lines.join('\n'));

    const started = Date.now();
    const result = await preprocessDataset({ sourcePath: path, format: 'jsonl', outDir: outDir(), seed: 42, splits: SPLITS });

    expect(Date.now() - started).toBeLessThan(10_000);
    expect(result.num_records).toBe(200_000);
    expect(result.splits.train.num_records / 200_000).toBeCloseTo(0.8, 2);
    expect(result.splits.test.num_records / 200_000).toBeCloseTo(0.1, 2);
  }, 20_000);
});

describe('preprocessDataset: rejected input', () => {
  it('rejects malformed JSON, naming the line', async () => {
    const content = jsonl(manyChats(2)) + '{"messages": [}\n';
    const err = await expectRejected('bad.jsonl', content, ['bad.jsonl:3: invalid JSON: ']);
    expect(err.issues).toHaveLength(1);
    expect(err.issues[0]).toMatchObject({ file: 'bad.jsonl', line: 3, field: null });
  });

  it('rejects a record missing a required field, naming the field', async () => {
    const content = jsonl([{ instruction: 'a', response: 'b' }, { instruction: 'c' }]);
    await expectRejected('inst.jsonl', content, [
      'inst.jsonl:2: field "response": required field is missing (expected string; "output" is accepted as an alias)',
    ]);
  });

  it('rejects a field of the wrong type, saying what was expected and what was found', async () => {
    const content = jsonl([{ instruction: 'a', response: 5 }]);
    await expectRejected('inst.jsonl', content, ['inst.jsonl:1: field "response": expected string, got number']);
  });

  it('rejects an unknown role with the allowed roles', async () => {
    const bad = { messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: 'a' }, { role: 'bot', content: 'b' }] };
    const content = jsonl([...manyChats(16), bad]);
    const err = await expectRejected('demo.jsonl', content, [
      'demo.jsonl:17: field "messages[2].role": expected one of system, user, assistant, got "bot"',
    ]);
    expect(err.issues[0]).toEqual({
      file: 'demo.jsonl',
      line: 17,
      field: 'messages[2].role',
      message: 'expected one of system, user, assistant, got "bot"',
    });
  });

  it('rejects a conversation whose last message is not from the assistant', async () => {
    const content = jsonl([{ messages: [{ role: 'user', content: 'q' }, { role: 'user', content: 'again' }] }]);
    await expectRejected('demo.jsonl', content, [
      'demo.jsonl:1: field "messages[1].role": the last message must be from the assistant, got "user"',
    ]);
  });

  it('rejects an empty file', async () => {
    const err = await expectRejected('empty.jsonl', '', []);
    expect(err.message).toBe('empty.jsonl: file is empty (no records)');
  });

  it('rejects a file of only blank lines', async () => {
    const err = await expectRejected('blank.jsonl', '\n  \n\n', []);
    expect(err.message).toBe('blank.jsonl: file has no records (only blank lines)');
  });

  it('rejects binary garbage as not UTF-8 text', async () => {
    const garbage = randomBytes(4096);
    garbage[0] = 0; // line 1 is never blank, whatever the random bytes
    await expectRejected('blob.jsonl', garbage, ['blob.jsonl:1: not UTF-8 text']);
  });

  it('rejects invalid UTF-8, naming the line', async () => {
    const bad = Buffer.concat([Buffer.from('{"instruction":"caf'), Buffer.from([0xc3, 0x28]), Buffer.from('","response":"x"}\n')]);
    const content = Buffer.concat([Buffer.from(jsonl([{ instruction: 'a', response: 'b' }])), bad]);
    await expectRejected('blob.jsonl', content, ['blob.jsonl:2: not UTF-8 text (invalid byte sequence)']);
  });

  it('rejects a line over the size limit without holding it', async () => {
    const prefix = '{"messages":[{"role":"user","content":"';
    const suffix = '"},{"role":"assistant","content":"a"}]}';
    const huge = prefix + 'x'.repeat(5 * 1024 * 1024 - prefix.length - suffix.length) + suffix;
    const content = jsonl(manyChats(1)) + huge + '\n' + jsonl(manyChats(1, 'later'));
    const err = await expectRejected('big.jsonl', content, ['big.jsonl:2: line is 5242880 bytes, over the 1048576-byte limit']);
    expect(err.issues).toHaveLength(1);
  });

  it('rejects a file that mixes chat and instruction forms', async () => {
    const content = jsonl([chat('q', 'a'), { instruction: 'i', response: 'r' }]);
    await expectRejected('mixed.jsonl', content, [
      'mixed.jsonl:2: mixed forms: this record is in instruction form ("instruction", "response"), but line 1 is in chat form',
    ]);
  });

  it('rejects a CSV file missing a required column', async () => {
    await expectRejected('data.csv', 'instruction,input\nhello,world\n', ['data.csv:1: missing required column "response"']);
  });

  it('rejects a CSV file with an unterminated quote, naming the line the record starts on', async () => {
    const csv = 'instruction,response\nfine,ok\nbroken,"never closed\nmore text\n';
    await expectRejected('data.csv', csv, ['data.csv:3: field "response": unterminated quoted field']);
  });

  it('rejects a CSV file with a header row but no records', async () => {
    const err = await expectRejected('data.csv', 'instruction,response\n\n', []);
    expect(err.message).toBe('data.csv: file has a header row but no records');
  });

  it('names the first line of a multi-line CSV record and the column at fault', async () => {
    const csv = 'instruction,response\n"two\nlines",\nnext,ok\n';
    await expectRejected('data.csv', csv, ['data.csv:2: field "response": expected non-empty text']);
  });

  it('collects several issues and stops at maxErrors', async () => {
    const content = Array.from({ length: 30 }, (_, i) => `{"instruction":"q${i}","response":${i}}`).join('\n');
    const err = await expectRejected('many.jsonl', content, ['many.jsonl:1: ', 'many.jsonl:5: ', 'stopped after 5 issues'], {
      maxErrors: 5,
    });
    expect(err.issues.map((i) => i.line)).toEqual([1, 2, 3, 4, 5]);
  });

  it('refuses to overwrite an existing version directory', async () => {
    await mkdir(outDir(), { recursive: true });
    await writeFile(join(outDir(), 'train.jsonl'), 'original');
    const err = await run('a.jsonl', jsonl(manyChats(5))).then(
      () => null,
      (e: unknown) => e,
    );

    expect(err).toBeInstanceOf(DatasetVersionExistsError);
    expect(await readFile(join(outDir(), 'train.jsonl'), 'utf8')).toBe('original');
    expect((await readdir(dirname(outDir()))).filter((n) => n.includes('.tmp-'))).toEqual([]);
  });
});

describe('validateDataset: a gzip-compressed upload, checked as it is decompressed', () => {
  it('counts the records of a good file', async () => {
    const sourcePath = await writeSource('a.jsonl.gz', gzipSync(jsonl(manyChats(300))));
    expect((await validateDataset({ sourcePath, displayName: 'a.jsonl.gz', format: 'jsonl', compression: 'gzip' })).records).toBe(300);
  });

  it('names the line and field of a bad record inside it', async () => {
    const sourcePath = await writeSource('b.jsonl.gz', gzipSync(jsonl([chat('q', 'a'), { messages: 'not a list' }])));
    const err = await validateDataset({ sourcePath, displayName: 'b.jsonl.gz', format: 'jsonl', compression: 'gzip' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DatasetValidationError);
    expect((err as DatasetValidationError).issues).toEqual([expect.objectContaining({ file: 'b.jsonl.gz', line: 2, field: 'messages' })]);
  });

  it('refuses a truncated or non-gzip file saying where the stream broke', async () => {
    const whole = gzipSync(jsonl(manyChats(50)));
    for (const [name, bytes] of [['cut.jsonl.gz', whole.subarray(0, whole.length - 10)], ['plain.jsonl.gz', Buffer.from(jsonl(manyChats(2)))]] as const) {
      const sourcePath = await writeSource(name, bytes);
      const err = await validateDataset({ sourcePath, displayName: name, format: 'jsonl', compression: 'gzip' }).catch((e: unknown) => e);
      expect(err, name).toBeInstanceOf(DatasetValidationError);
      expect((err as DatasetValidationError).issues[0], name).toMatchObject({ file: name, line: 0, field: null, message: expect.stringMatching(/^cannot decompress after \d+ bytes .*expected gzip data/) });
    }
  });
});

describe('validateDataset: a stream source (an upload as it arrives)', () => {
  /** The bytes in small chunks, as a request body arrives. */
  const arriving = (bytes: Buffer): Readable => Readable.from(Array.from({ length: Math.ceil(bytes.length / 1000) }, (_, i) => bytes.subarray(i * 1000, (i + 1) * 1000)));

  it('checks a stream as it checks the same bytes in a file, compressed or not', async () => {
    const plain = Buffer.from(jsonl(manyChats(300)));
    const fromFile = await validateDataset({ sourcePath: await writeSource('s.jsonl', plain), format: 'jsonl' });
    const fromStream = await validateDataset({ source: arriving(plain), displayName: 's.jsonl', format: 'jsonl' });
    expect(fromStream).toEqual(fromFile);
    expect((await validateDataset({ source: arriving(gzipSync(plain)), displayName: 's.jsonl.gz', format: 'jsonl', compression: 'gzip' })).records).toBe(300);
    const err = await validateDataset({ source: arriving(Buffer.from(jsonl([chat('q', 'a'), { messages: 'not a list' }]))), displayName: 'up.jsonl', format: 'jsonl' }).catch((e: unknown) => e);
    expect((err as DatasetValidationError).issues).toEqual([expect.objectContaining({ file: 'up.jsonl', line: 2, field: 'messages' })]);
  });

  it('takes a file or a stream, never both or neither', async () => {
    await expect(validateDataset({ format: 'jsonl' })).rejects.toThrow(/either sourcePath or source/);
    await expect(validateDataset({ sourcePath: '/nonexistent', source: Readable.from([]), format: 'jsonl' })).rejects.toThrow(/either sourcePath or source/);
  });
});

describe('validateDataset: a zstd-compressed upload, checked as it is decompressed', () => {
  // Made by python-zstandard (level 19): 300 chats in two frames, and two records whose second is bad.
  const fixture = (name: string) => readFileSync(join(repoRoot, 'test/fixtures', name));

  it('counts the records of a good file of two frames', async () => {
    const sourcePath = await writeSource('a.jsonl.zst', fixture('chats-300.jsonl.zst'));
    expect((await validateDataset({ sourcePath, displayName: 'a.jsonl.zst', format: 'jsonl', compression: 'zstd' })).records).toBe(300);
  });

  it('names the line and field of a bad record inside it', async () => {
    const sourcePath = await writeSource('b.jsonl.zst', fixture('bad-line-2.jsonl.zst'));
    const err = await validateDataset({ sourcePath, displayName: 'b.jsonl.zst', format: 'jsonl', compression: 'zstd' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DatasetValidationError);
    expect((err as DatasetValidationError).issues).toEqual([expect.objectContaining({ file: 'b.jsonl.zst', line: 2, field: 'messages' })]);
  });

  it('refuses a truncated or non-zstd file saying where the stream broke', async () => {
    const whole = fixture('chats-300.jsonl.zst');
    for (const [name, bytes] of [['cut.jsonl.zst', whole.subarray(0, whole.length - 10)], ['plain.jsonl.zst', Buffer.from(jsonl(manyChats(2)))]] as const) {
      const sourcePath = await writeSource(name, bytes);
      const err = await validateDataset({ sourcePath, displayName: name, format: 'jsonl', compression: 'zstd' }).catch((e: unknown) => e);
      expect(err, name).toBeInstanceOf(DatasetValidationError);
      expect((err as DatasetValidationError).issues[0], name).toMatchObject({ file: name, line: 0, field: null, message: expect.stringMatching(/^cannot decompress after \d+ bytes .*expected zstd data/) });
    }
  });
});

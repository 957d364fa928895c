// Preference datasets (DPO / ORPO) go through the same preprocessing as chat data: validated record by record,
// normalized, deduplicated and split into the JSONL files the trainer reads.
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DatasetValidationError, preprocessDataset, type PreprocessResult } from '../../datasets/ingest/preprocess.js';

let root: string;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'hanzo-ml-preference-'));
});

afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

function pair(i: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { prompt: [{ role: 'user', content: `question ${i}` }], chosen: `good ${i}`, rejected: [{ role: 'assistant', content: `bad ${i}` }], ...extra };
}

async function run(records: unknown[]): Promise<PreprocessResult> {
  await mkdir(join(root, 'src'), { recursive: true });
  const sourcePath = join(root, 'src', 'pairs.jsonl');
  await writeFile(sourcePath, records.map((r) => JSON.stringify(r)).join('\n') + '\n');
  return preprocessDataset({ sourcePath, format: 'jsonl', outDir: join(root, 'v1'), seed: 7, splits: { train: 0.8, validation: 0.1, test: 0.1 } });
}

async function rejection(records: unknown[]): Promise<string> {
  const err = await run(records).then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(DatasetValidationError);
  return (err as Error).message;
}

describe('preprocessDataset: preference form', () => {
  it('normalizes prompt/chosen/rejected pairs, answers as assistant message lists, into the splits', async () => {
    const result = await run([...Array.from({ length: 20 }, (_, i) => pair(i)), pair(3)]);
    expect(result.schema.form).toBe('preference');
    expect(result.duplicates_removed).toBe(1);
    const lines = (await Promise.all(['train', 'validation', 'test'].map((s) => readFile(join(root, 'v1', `${s}.jsonl`), 'utf8'))))
      .join('')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toHaveLength(20);
    expect(lines).toContainEqual({
      prompt: [{ role: 'user', content: 'question 0' }],
      chosen: [{ role: 'assistant', content: 'good 0' }],
      rejected: [{ role: 'assistant', content: 'bad 0' }],
    });
  });

  it('rejects a pair missing its rejected answer, naming line and field', async () => {
    const message = await rejection([pair(0), { prompt: [{ role: 'user', content: 'q' }], chosen: 'a' }]);
    expect(message).toContain('pairs.jsonl:2: field "rejected": required field is missing');
  });

  it('rejects a prompt that already ends with the answer', async () => {
    const message = await rejection([pair(0, { prompt: [{ role: 'user', content: 'q' }, { role: 'assistant', content: 'a' }] })]);
    expect(message).toContain('pairs.jsonl:1: field "prompt[1].role": the prompt must end before the answer');
  });

  it('rejects an answer written by another role and identical answers', async () => {
    const message = await rejection([pair(0, { chosen: [{ role: 'user', content: 'x' }] }), pair(1, { rejected: 'good 1' })]);
    expect(message).toContain('pairs.jsonl:1: field "chosen[0].role": expected "assistant", got "user"');
    expect(message).toContain('pairs.jsonl:2: field "rejected": identical to chosen');
  });

  it('rejects a file that mixes chat and preference records', async () => {
    const message = await rejection([pair(0), { messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: 'a' }] }]);
    expect(message).toContain('pairs.jsonl:2: mixed forms: this record is in chat form ("messages"), but line 1 is in preference form');
  });
});

// The streaming multipart reader of /v1/files: the same form read whole or cut into chunks of any size (a delimiter
// split across chunks included) gives the same fields and file bytes; a truncated form and an oversized field are
// refused naming what is wrong.
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { PassThrough } from 'node:stream';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { boundaryOf, receiveMultipart } from '../api/multipart.js';

async function encoded(form: FormData): Promise<{ bytes: Buffer; type: string }> {
  const res = new Response(form);
  return { bytes: Buffer.from(await res.arrayBuffer()), type: res.headers.get('content-type')! };
}

function chunked(bytes: Buffer, size: number): ReadableStream<Uint8Array> {
  let at = 0;
  return new ReadableStream({
    pull(ctl) {
      if (at >= bytes.length) return ctl.close();
      ctl.enqueue(new Uint8Array(bytes.subarray(at, at + size)));
      at += size;
    },
  });
}

describe('receiveMultipart', () => {
  const dir = mkdtempSync(join(tmpdir(), 'hanzo-ml-multipart-'));
  // File content that contains CRLFs and a near-delimiter, so a naive split would cut it.
  const content = Array.from({ length: 300 }, (_, i) => `{"i": ${i}, "text": "line\\r\\n--not-the-boundary ${'x'.repeat(i % 50)}"}`).join('\r\n') + '\r\n';

  it('gives the same fields and file bytes whatever the chunk size', async () => {
    const form = new FormData();
    form.set('purpose', 'fine-tune');
    form.set('file', new Blob([content]), 'train.jsonl');
    form.set('other', new Blob(['dropped']), 'other.bin');
    const { bytes, type } = await encoded(form);
    expect(boundaryOf(type)).toBeTruthy();
    for (const size of [1, 7, 63, 64, 1000, bytes.length]) {
      const path = join(dir, `f-${size}.jsonl`);
      const got = await receiveMultipart(chunked(bytes, size), type, { fileField: 'file', filePath: path, maxFieldBytes: 100 });
      expect(got.fields, `chunks of ${size}`).toEqual({ purpose: 'fine-tune' });
      expect(got.file).toEqual({ filename: 'train.jsonl', bytes: Buffer.byteLength(content), sha256: createHash('sha256').update(content).digest('hex') });
      expect(readFileSync(path, 'utf8')).toBe(content);
    }
  });

  it('hands the file part to the caller\'s stream when the fields came first, ending it only once the form is whole', async () => {
    const form = new FormData();
    form.set('purpose', 'fine-tune');
    form.set('file', new Blob([content]), 'train.jsonl');
    const { bytes, type } = await encoded(form);
    for (const size of [1, 63, bytes.length]) {
      const path = join(dir, `streamed-${size}.jsonl`);
      const seen: Record<string, string>[] = [];
      const sink = new PassThrough();
      const read = (async () => {
        const chunks: Buffer[] = [];
        for await (const c of sink) chunks.push(c as Buffer);
        return Buffer.concat(chunks).toString('utf8');
      })();
      const got = await receiveMultipart(chunked(bytes, size), type, {
        fileField: 'file',
        filePath: path,
        maxFieldBytes: 100,
        streamFile: (file, fields) => (seen.push({ ...fields, filename: file.filename }), sink),
      });
      expect(seen).toEqual([{ purpose: 'fine-tune', filename: 'train.jsonl' }]);
      expect(await read).toBe(content);
      expect(got.file).toEqual({ filename: 'train.jsonl', bytes: Buffer.byteLength(content), sha256: null });
      expect(existsSync(path)).toBe(false);
    }
    // Cut after the file part but before the closing boundary: the caller's stream ends in an error, not as a whole file.
    const sink = new PassThrough();
    const read = (async () => {
      for await (const _ of sink) void _;
    })();
    await expect(receiveMultipart(chunked(bytes.subarray(0, bytes.length - 4), 50), type, { fileField: 'file', filePath: join(dir, 'cut2'), maxFieldBytes: 100, streamFile: () => sink })).rejects.toThrow(
      /ends before its closing boundary/,
    );
    await expect(read).rejects.toThrow(/ends before its closing boundary/);
  });

  it('refuses a form cut before its closing boundary, and a field over the limit, naming it', async () => {
    const form = new FormData();
    form.set('purpose', 'x'.repeat(200));
    form.set('file', new Blob([content]), 'train.jsonl');
    const { bytes, type } = await encoded(form);
    await expect(receiveMultipart(chunked(bytes.subarray(0, bytes.length - 10), 50), type, { fileField: 'file', filePath: join(dir, 'cut'), maxFieldBytes: 1000 })).rejects.toThrow(
      /ends before its closing boundary/,
    );
    await expect(receiveMultipart(chunked(bytes, 50), type, { fileField: 'file', filePath: join(dir, 'big'), maxFieldBytes: 100 })).rejects.toThrow(/^purpose: a form field of more than 100 bytes/);
    expect(boundaryOf('application/json')).toBeNull();
  });
});

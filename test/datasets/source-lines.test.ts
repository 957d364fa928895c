import { describe, expect, it } from 'vitest';
import { LineDecoder, LineSplitter, type SourceLine } from '../../datasets/ingest/source-lines.js';

function split(chunks: Buffer[], maxLineBytes = 1024): SourceLine[] {
  const splitter = new LineSplitter(maxLineBytes);
  return [...chunks.flatMap((c) => [...splitter.push(c)]), ...splitter.end()];
}

const text = (lines: SourceLine[]): (string | null)[] => lines.map((l) => l.bytes?.toString('utf8') ?? null);

describe('LineSplitter', () => {
  it('joins lines that span chunks and keeps the last line without a newline', () => {
    const lines = split([Buffer.from('ab'), Buffer.from('c\nd'), Buffer.from('e\n\nf')]);
    expect(text(lines)).toEqual(['abc', 'de', '', 'f']);
    expect(lines.map((l) => l.number)).toEqual([1, 2, 3, 4]);
  });

  it('strips CRLF endings and a byte order mark at the start of the file only', () => {
    const bom = Buffer.from([0xef, 0xbb, 0xbf]);
    expect(text(split([Buffer.concat([bom, Buffer.from('a\r\nb\r\n')])]))).toEqual(['a', 'b']);
  });

  it('drops the bytes of an over-long line but reports its full length and keeps counting lines', () => {
    const lines = split([Buffer.from('ok\n'), Buffer.alloc(30, 0x61), Buffer.alloc(30, 0x61), Buffer.from('\nnext')], 16);
    expect(lines).toEqual([
      { number: 1, bytes: Buffer.from('ok'), byteLength: 2 },
      { number: 2, bytes: null, byteLength: 60 },
      { number: 3, bytes: Buffer.from('next'), byteLength: 4 },
    ]);
  });
});

describe('LineDecoder', () => {
  const decoder = new LineDecoder(16);
  const line = (bytes: Buffer | null, byteLength = bytes?.length ?? 0): SourceLine => ({ number: 1, bytes, byteLength });

  it('decodes UTF-8 text', () => {
    expect(decoder.decode(line(Buffer.from('café')))).toEqual({ ok: true, text: 'café' });
  });

  it('rejects NUL bytes, invalid sequences and over-long lines with a reason', () => {
    expect(decoder.decode(line(Buffer.from([0x61, 0x00])))).toEqual({ ok: false, message: 'not UTF-8 text (NUL byte at byte offset 1)' });
    expect(decoder.decode(line(Buffer.from([0xc3, 0x28])))).toEqual({ ok: false, message: 'not UTF-8 text (invalid byte sequence)' });
    expect(decoder.decode(line(null, 99))).toEqual({ ok: false, message: 'line is 99 bytes, over the 16-byte limit' });
  });
});

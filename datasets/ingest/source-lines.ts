// Splits a byte stream into physical lines without ever holding more than `maxLineBytes` of one line.
// readline would buffer a 5 GB line whole before we could reject it; here an over-long line is counted and
// dropped as it streams past, and surfaces as a line with `bytes: null`.

export interface SourceLine {
  number: number; // 1-based
  bytes: Buffer | null; // without the line terminator; null when the line is over the limit
  byteLength: number; // length of the whole line, even when it was dropped
}

const LF = 0x0a;
const CR = 0x0d;
const UTF8_BOM = Buffer.from([0xef, 0xbb, 0xbf]);

export class LineSplitter {
  private parts: Buffer[] = [];
  private partBytes = 0;
  private lineNumber = 0;
  private started = false;

  constructor(private readonly maxLineBytes: number) {}

  /** Feeds one chunk; yields every line it completes. Lines may span chunks. */
  *push(chunk: Buffer): Generator<SourceLine> {
    let start = this.skipBom(chunk);
    for (;;) {
      const newline = chunk.indexOf(LF, start);
      if (newline === -1) {
        this.append(chunk.subarray(start));
        return;
      }
      this.append(chunk.subarray(start, newline));
      yield this.take();
      start = newline + 1;
    }
  }

  /** Yields the last line when the file does not end with a newline. */
  *end(): Generator<SourceLine> {
    if (this.partBytes > 0) yield this.take();
  }

  /** A UTF-8 byte order mark is tolerated at the very start of the file only. */
  private skipBom(chunk: Buffer): number {
    if (this.started) return 0;
    this.started = true;
    return chunk.subarray(0, 3).equals(UTF8_BOM) ? 3 : 0;
  }

  private append(part: Buffer): void {
    if (part.length === 0) return;
    this.partBytes += part.length;
    // Past the limit the line's bytes are dropped; only their count is kept.
    if (this.partBytes > this.maxLineBytes) this.parts = [];
    else this.parts.push(part);
  }

  private take(): SourceLine {
    this.lineNumber += 1;
    const over = this.partBytes > this.maxLineBytes;
    let bytes = over ? null : this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts, this.partBytes);
    let byteLength = this.partBytes;
    if (bytes !== null && bytes.length > 0 && bytes[bytes.length - 1] === CR) {
      bytes = bytes.subarray(0, bytes.length - 1); // CRLF line endings
      byteLength -= 1;
    }
    this.parts = [];
    this.partBytes = 0;
    return { number: this.lineNumber, bytes, byteLength };
  }
}

export type DecodedLine = { ok: true; text: string } | { ok: false; message: string };

/** Checks one line is text (valid UTF-8, no NUL bytes) within the size limit, and decodes it. */
export class LineDecoder {
  // fatal: reject invalid sequences instead of inserting U+FFFD; ignoreBOM: a BOM mid-file stays visible.
  private readonly decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

  constructor(private readonly maxLineBytes: number) {}

  decode(line: SourceLine): DecodedLine {
    if (line.bytes === null) {
      return { ok: false, message: `line is ${line.byteLength} bytes, over the ${this.maxLineBytes}-byte limit` };
    }
    const nul = line.bytes.indexOf(0);
    if (nul !== -1) return { ok: false, message: `not UTF-8 text (NUL byte at byte offset ${nul})` };
    try {
      return { ok: true, text: this.decoder.decode(line.bytes) };
    } catch {
      return { ok: false, message: 'not UTF-8 text (invalid byte sequence)' };
    }
  }
}

// RFC 4180 CSV, fed one physical line at a time. Written here rather than taken as a dependency because it is
// tiny, it must stream (records are handed on as soon as they complete), and every error must name the
// physical line a record starts on, which the general-purpose parsers do not reliably report.
//
// Quoted fields may hold commas, doubled quotes ("") and line breaks; a line break inside quotes is kept as
// "\n" whatever the file used. A quote inside an unquoted field is taken literally (5" screen), as most
// spreadsheet exports expect.

export interface CsvRecord {
  line: number; // physical line the record starts on
  fields: string[];
}

export class CsvSyntaxError extends Error {
  constructor(
    readonly line: number,
    readonly fieldIndex: number | null,
    message: string,
  ) {
    super(message);
    this.name = 'CsvSyntaxError';
  }
}

const QUOTE = '"';

export class CsvRecordParser {
  private fields: string[] = [];
  private field = '';
  private inQuotes = false; // the current line ended inside a quoted field
  private startLine = 0;
  private recordBytes = 0;

  constructor(private readonly maxRecordBytes: number) {}

  /** Feeds one line (without its terminator); returns the record it completes, or null. Blank lines are skipped. */
  pushLine(text: string, lineNumber: number, byteLength: number): CsvRecord | null {
    if (!this.inQuotes) {
      if (text.trim() === '') return null;
      this.startLine = lineNumber;
      this.recordBytes = 0;
    }
    this.checkSize(byteLength);
    let i = this.inQuotes ? this.resumeQuoted(text) : this.scanField(text, 0);
    while (i !== -1) {
      if (i === text.length) {
        this.endField();
        return this.takeRecord();
      }
      if (text[i] !== ',') {
        throw new CsvSyntaxError(
          this.startLine,
          this.fields.length,
          `unexpected ${JSON.stringify(text[i])} after a closing quote (a quote inside a quoted field is written "")`,
        );
      }
      this.endField();
      i = this.scanField(text, i + 1);
    }
    return null; // the line ended inside a quoted field; the record continues on the next line
  }

  /** Must be called at end of input: a quoted field still open there was never closed. */
  end(): void {
    if (this.inQuotes) {
      throw new CsvSyntaxError(
        this.startLine,
        this.fields.length,
        'unterminated quoted field: a quote opened in this record is never closed',
      );
    }
  }

  /** Reads one field from `from`; returns the index just past it, or -1 when the line ends inside quotes. */
  private scanField(text: string, from: number): number {
    if (text[from] === QUOTE) return this.scanQuoted(text, from + 1);
    const comma = text.indexOf(',', from);
    const end = comma === -1 ? text.length : comma;
    this.field = text.slice(from, end);
    return end;
  }

  private resumeQuoted(text: string): number {
    this.field += '\n'; // the line break was part of the quoted field
    return this.scanQuoted(text, 0);
  }

  private scanQuoted(text: string, from: number): number {
    this.inQuotes = true;
    for (;;) {
      const quote = text.indexOf(QUOTE, from);
      if (quote === -1) {
        this.field += text.slice(from);
        return -1;
      }
      this.field += text.slice(from, quote);
      if (text[quote + 1] !== QUOTE) {
        this.inQuotes = false;
        return quote + 1;
      }
      this.field += QUOTE; // "" is an escaped quote
      from = quote + 2;
    }
  }

  private endField(): void {
    this.fields.push(this.field);
    this.field = '';
  }

  /** A record spanning lines is bounded too, so a stray quote can't pull the rest of the file into memory. */
  private checkSize(byteLength: number): void {
    this.recordBytes += byteLength;
    if (this.recordBytes > this.maxRecordBytes) {
      throw new CsvSyntaxError(
        this.startLine,
        null,
        `record starting on this line is over the ${this.maxRecordBytes}-byte limit (is a quote left unterminated?)`,
      );
    }
  }

  private takeRecord(): CsvRecord {
    const record = { line: this.startLine, fields: this.fields };
    this.fields = [];
    return record;
  }
}

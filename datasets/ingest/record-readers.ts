// Turn the physical lines of an uploaded file into normalized chat records, reporting every line that can't be.
import { CsvRecordParser, CsvSyntaxError, type CsvRecord } from './csv-parser.js';
import type { IssueLog } from './issues.js';
import {
  normalizeChatRecord,
  normalizeInstructionRecord,
  normalizePreferenceRecord,
  type DatasetRecord,
  type FieldProblem,
  type RecordForm,
} from './records.js';
import type { LineDecoder, SourceLine } from './source-lines.js';

export type RecordSink = (record: DatasetRecord) => void;

export interface RecordReader {
  readonly form: RecordForm | null;
  readonly fields: readonly string[]; // top-level keys (JSONL) or header columns (CSV), as they appeared
  line(line: SourceLine): void;
  end(): void;
  emptyMessage(): string; // what to say when the file holds text but no records
}

export interface ReaderContext {
  log: IssueLog;
  decoder: LineDecoder;
  emit: RecordSink;
}

const MAX_REPORTED_FIELDS = 64; // keeps the schema summary small when every record invents its own keys

const FORM_LABELS: Record<RecordForm, string> = {
  messages: 'chat form ("messages")',
  instruction: 'instruction form ("instruction", "response")',
  preference: 'preference form ("prompt", "chosen", "rejected")',
};

export class JsonlReader implements RecordReader {
  form: RecordForm | null = null;
  private formLine = 0;
  private readonly keys = new Set<string>();

  constructor(private readonly ctx: ReaderContext) {}

  get fields(): readonly string[] {
    return [...this.keys];
  }

  line(line: SourceLine): void {
    const decoded = this.ctx.decoder.decode(line);
    if (!decoded.ok) return this.ctx.log.add(line.number, null, decoded.message);
    if (decoded.text.trim() === '') return; // blank lines are allowed and still counted
    const value = this.parseObject(decoded.text, line.number);
    if (value === null || !this.acceptForm(value, line.number)) return;
    const normalized = this.form === 'messages' ? normalizeChatRecord(value) : this.form === 'preference' ? normalizePreferenceRecord(value) : normalizeInstructionRecord(value);
    if (normalized.ok) this.ctx.emit(normalized.record);
    else reportProblems(this.ctx.log, line.number, normalized.problems);
  }

  end(): void {}

  emptyMessage(): string {
    return 'file has no records (only blank lines)';
  }

  private parseObject(text: string, lineNumber: number): Record<string, unknown> | null {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      this.ctx.log.add(lineNumber, null, `invalid JSON: ${(err as Error).message}`);
      return null;
    }
    if (typeof value === 'object' && value !== null && !Array.isArray(value)) return value as Record<string, unknown>;
    const got = value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value;
    this.ctx.log.add(lineNumber, null, `expected a JSON object, got ${got}`);
    return null;
  }

  /** The first record fixes the file's form; every later record must use the same one. */
  private acceptForm(value: Record<string, unknown>, lineNumber: number): boolean {
    const form = this.detectForm(value, lineNumber);
    if (form === null) return false;
    if (this.form === null) {
      this.form = form;
      this.formLine = lineNumber;
    } else if (form !== this.form) {
      const message =
        `mixed forms: this record is in ${FORM_LABELS[form]}, ` +
        `but line ${this.formLine} is in ${FORM_LABELS[this.form]}; use one form per file`;
      this.ctx.log.add(lineNumber, null, message);
      return false;
    }
    for (const key of Object.keys(value)) if (this.keys.size < MAX_REPORTED_FIELDS) this.keys.add(key);
    return true;
  }

  private detectForm(value: Record<string, unknown>, lineNumber: number): RecordForm | null {
    const chat = 'messages' in value;
    const instruction = 'instruction' in value || 'response' in value || 'output' in value;
    const preference = 'chosen' in value || 'rejected' in value;
    if (chat && !instruction && !preference) return 'messages';
    if (instruction && !chat && !preference) return 'instruction';
    if (preference && !chat && !instruction) return 'preference';
    const message =
      [chat, instruction, preference].filter(Boolean).length > 1
        ? 'record mixes fields of the chat ("messages"), instruction ("instruction", "response") and preference ("prompt", "chosen", "rejected") forms; use one form'
        : 'expected a "messages" array (chat form), "instruction" and "response" fields (instruction form) or "prompt", "chosen" and "rejected" (preference form)';
    this.ctx.log.add(lineNumber, null, message);
    return null;
  }
}

const CSV_COLUMNS = new Set(['instruction', 'input', 'system', 'response', 'output']);
const OPTIONAL_CSV_COLUMNS = new Set(['input', 'system']);

export class CsvReader implements RecordReader {
  readonly form = 'instruction' as const;
  private header: string[] | null = null;
  private readonly columns = new Map<string, number>(); // known column (lower case) -> index
  private readonly parser: CsvRecordParser;

  constructor(
    private readonly ctx: ReaderContext,
    maxRecordBytes: number,
  ) {
    this.parser = new CsvRecordParser(maxRecordBytes);
  }

  get fields(): readonly string[] {
    return this.header ?? [];
  }

  line(line: SourceLine): void {
    const decoded = this.ctx.decoder.decode(line);
    // Past an unreadable line the quoting state is unknown, so nothing after it can be trusted.
    if (!decoded.ok) return this.ctx.log.fatal(line.number, null, decoded.message);
    this.parse(() => this.parser.pushLine(decoded.text, line.number, line.byteLength));
  }

  end(): void {
    this.parse(() => {
      this.parser.end();
      return null;
    });
  }

  emptyMessage(): string {
    return this.header === null ? 'file has no records (only blank lines)' : 'file has a header row but no records';
  }

  private parse(step: () => CsvRecord | null): void {
    let record: CsvRecord | null;
    try {
      record = step();
    } catch (err) {
      if (!(err instanceof CsvSyntaxError)) throw err;
      const field = err.fieldIndex === null ? null : (this.header?.[err.fieldIndex] ?? `column ${err.fieldIndex + 1}`);
      return this.ctx.log.fatal(err.line, field, err.message);
    }
    if (record === null) return;
    if (this.header === null) this.readHeader(record);
    else this.readRow(record);
  }

  private readHeader(record: CsvRecord): void {
    this.header = record.fields.map((name) => name.trim());
    const issues = this.ctx.log.count;
    this.header.forEach((name, index) => this.addColumn(name, index, record.line));
    if (!this.columns.has('instruction')) this.ctx.log.add(record.line, null, 'missing required column "instruction"');
    if (!this.columns.has('response') && !this.columns.has('output')) {
      this.ctx.log.add(record.line, null, 'missing required column "response" (or its alias "output")');
    }
    if (this.columns.has('response') && this.columns.has('output')) {
      this.ctx.log.add(record.line, 'output', '"output" is an alias of "response"; keep one of the two columns');
    }
    if (this.ctx.log.count > issues) this.ctx.log.halt(); // rows can't be read against a broken header
  }

  private addColumn(name: string, index: number, line: number): void {
    const key = name.toLowerCase();
    if (!CSV_COLUMNS.has(key)) return; // other columns are ignored
    if (this.columns.has(key)) this.ctx.log.add(line, name, 'column appears more than once in the header row');
    else this.columns.set(key, index);
  }

  private readRow(record: CsvRecord): void {
    const header = this.header as string[];
    if (record.fields.length !== header.length) {
      const got = record.fields.length;
      const message = `expected ${header.length} fields as in the header row, got ${got} (check commas and quotes)`;
      return this.ctx.log.add(record.line, null, message);
    }
    const row: Record<string, string> = {};
    for (const [key, index] of this.columns) {
      const value = record.fields[index] as string;
      if (value === '' && OPTIONAL_CSV_COLUMNS.has(key)) continue; // an empty optional cell means "not given"
      row[key] = value;
    }
    const normalized = normalizeInstructionRecord(row);
    if (normalized.ok) return this.ctx.emit(normalized.record);
    const named = normalized.problems.map((p) => ({ ...p, field: this.columnName(p.field) }));
    reportProblems(this.ctx.log, record.line, named);
  }

  /** Issues name the column as the header spells it. */
  private columnName(field: string | null): string | null {
    const index = field === null ? undefined : this.columns.get(field);
    return index === undefined ? field : (this.header as string[])[index]!;
  }
}

function reportProblems(log: IssueLog, line: number, problems: FieldProblem[]): void {
  for (const p of problems) log.add(line, p.field, p.message);
}

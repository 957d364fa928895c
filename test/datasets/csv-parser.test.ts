import { describe, expect, it } from 'vitest';
import { CsvRecordParser, CsvSyntaxError, type CsvRecord } from '../../datasets/ingest/csv-parser.js';

/** Feeds text line by line, as the preprocessor does, and collects the records. */
function parse(text: string, maxRecordBytes = 1 << 20): CsvRecord[] {
  const parser = new CsvRecordParser(maxRecordBytes);
  const records: CsvRecord[] = [];
  text.split('\n').forEach((line, i) => {
    const record = parser.pushLine(line, i + 1, Buffer.byteLength(line));
    if (record) records.push(record);
  });
  parser.end();
  return records;
}

function syntaxError(text: string, maxRecordBytes?: number): CsvSyntaxError {
  try {
    parse(text, maxRecordBytes);
  } catch (err) {
    if (err instanceof CsvSyntaxError) return err;
    throw err;
  }
  throw new Error('expected a CsvSyntaxError');
}

describe('CsvRecordParser', () => {
  it('splits plain fields and keeps empty ones, including a trailing empty field', () => {
    expect(parse('a,b,c\n,x,\n')).toEqual([
      { line: 1, fields: ['a', 'b', 'c'] },
      { line: 2, fields: ['', 'x', ''] },
    ]);
  });

  it('reads quoted fields with commas and doubled quotes', () => {
    expect(parse('"a, b","say ""hi""",""')).toEqual([{ line: 1, fields: ['a, b', 'say "hi"', ''] }]);
  });

  it('joins a quoted field across lines and reports the line the record starts on', () => {
    expect(parse('h1,h2\n"one\n\ntwo",x\nlast,y')).toEqual([
      { line: 1, fields: ['h1', 'h2'] },
      { line: 2, fields: ['one\n\ntwo', 'x'] },
      { line: 5, fields: ['last', 'y'] },
    ]);
  });

  it('skips blank lines between records', () => {
    expect(parse('a,b\n\n   \nc,d\n')).toEqual([
      { line: 1, fields: ['a', 'b'] },
      { line: 4, fields: ['c', 'd'] },
    ]);
  });

  it('takes a quote inside an unquoted field literally', () => {
    expect(parse('5" screen,ok')).toEqual([{ line: 1, fields: ['5" screen', 'ok'] }]);
  });

  it('rejects text after a closing quote, naming the field', () => {
    const err = syntaxError('a,b\nx,"y"z');
    expect(err).toMatchObject({ line: 2, fieldIndex: 1 });
    expect(err.message).toContain('unexpected "z" after a closing quote');
  });

  it('rejects a quote left open at the end of input, at the line it opened on', () => {
    const err = syntaxError('a,b\nx,y\nz,"open\nmore');
    expect(err).toMatchObject({ line: 3, fieldIndex: 1 });
    expect(err.message).toContain('unterminated quoted field');
  });

  it('bounds a record that spans lines, so a stray quote cannot swallow the file', () => {
    const err = syntaxError(`a,"${'x\n'.repeat(100)}`, 50);
    expect(err).toMatchObject({ line: 1, fieldIndex: null });
    expect(err.message).toContain('over the 50-byte limit');
  });
});

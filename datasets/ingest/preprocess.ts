// Turns an uploaded dataset file into the files of an immutable dataset version: every record validated and
// normalized to chat form, exact duplicates removed, and the rest dealt into train / validation / test JSONL.
//
// The source is streamed, never read whole. The version directory appears only when everything succeeded:
// files are written to `${outDir}.tmp-<random>` and renamed into place; on any failure the temp directory is
// removed and outDir is never created.
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { Transform, type Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { Decompress } from 'fzstd';
import { lstat, mkdir, rename, rm } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import { DatasetVersionExistsError, IssueLog } from './issues.js';
import { CsvReader, JsonlReader, type RecordReader } from './record-readers.js';
import type { DatasetRecord, RecordForm } from './records.js';
import { LineDecoder, LineSplitter } from './source-lines.js';
import type { SplitInfo } from './split-writer.js';
import { SPLIT_NAMES, SplitRatiosSchema, SplitSink, type SplitFiles, type SplitRatios } from './splits.js';

export { DatasetValidationError, DatasetVersionExistsError, formatIssue, type DatasetIssue } from './issues.js';
export {
  ChatMessageSchema,
  ChatRecordSchema,
  ChatRoleSchema,
  InstructionRecordSchema,
  type ChatMessage,
  type ChatRecord,
  type InstructionRecord,
} from './records.js';
export type { SplitInfo } from './split-writer.js';
export { SplitRatiosSchema, type SplitRatios } from './splits.js';

export type DatasetFormat = 'jsonl' | 'csv';

export interface PreprocessOptions {
  sourcePath: string; // local file to read (streamed)
  displayName?: string; // name used in error messages (default: basename of sourcePath)
  format: DatasetFormat;
  outDir: string; // version directory; must not exist yet
  seed: number; // split assignment is a function of (seed, record content)
  splits: SplitRatios;
  maxLineBytes?: number; // default 1 MiB; a longer line is an error naming the line
  maxErrors?: number; // stop after collecting this many issues (default 20)
}

export interface PreprocessResult {
  source: { sha256: string; size_bytes: number; lines: number };
  num_records: number; // after dedup
  duplicates_removed: number;
  splits: { train: SplitInfo; validation: SplitInfo; test: SplitInfo }; // paths relative to outDir
  schema: { form: RecordForm; fields: string[] }; // what the input looked like
  sha256: string; // version checksum: sha256 of the train, validation and test sha256 hex strings, concatenated
}

const DEFAULT_MAX_LINE_BYTES = 1 << 20; // generous for one chat example, small enough to hold a few in memory
const DEFAULT_MAX_ERRORS = 20; // enough to show a pattern without burying the first problem
const READ_CHUNK_BYTES = 1 << 16;

interface Resolved {
  sourcePath: string;
  displayName: string;
  format: DatasetFormat;
  outDir: string;
  seed: number;
  splits: SplitRatios;
  maxLineBytes: number;
  maxErrors: number;
}

export async function preprocessDataset(opts: PreprocessOptions): Promise<PreprocessResult> {
  const options = resolveOptions(opts);
  await mkdir(dirname(options.outDir), { recursive: true });
  await assertAbsent(options.outDir);
  const tmpDir = `${options.outDir}.tmp-${randomBytes(6).toString('hex')}`;
  await mkdir(tmpDir);
  try {
    const result = await buildVersion(options, tmpDir);
    await publish(tmpDir, options.outDir);
    return result;
  } catch (err) {
    await rm(tmpDir, { recursive: true, force: true });
    throw err;
  }
}

function resolveOptions(opts: PreprocessOptions): Resolved {
  const splits = SplitRatiosSchema.safeParse(opts.splits);
  if (!splits.success) {
    throw new RangeError(`invalid split ratios ${JSON.stringify(opts.splits)}: ${splits.error.issues[0]?.message}`);
  }
  const maxLineBytes = opts.maxLineBytes ?? DEFAULT_MAX_LINE_BYTES;
  const maxErrors = opts.maxErrors ?? DEFAULT_MAX_ERRORS;
  requirePositiveInteger('maxLineBytes', maxLineBytes);
  requirePositiveInteger('maxErrors', maxErrors);
  if (!Number.isSafeInteger(opts.seed)) throw new RangeError(`seed must be an integer, got ${opts.seed}`);
  const displayName = opts.displayName ?? basename(opts.sourcePath);
  return { ...opts, splits: splits.data, displayName, maxLineBytes, maxErrors };
}

function requirePositiveInteger(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value <= 0) {
    throw new RangeError(`${name} must be a positive integer, got ${value}`);
  }
}

async function assertAbsent(outDir: string): Promise<void> {
  const existing = await lstat(outDir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return null;
    throw err;
  });
  if (existing !== null) throw new DatasetVersionExistsError(outDir);
}

/**
 * rename() cannot replace a non-empty directory, so a version published concurrently under the same name is
 * never overwritten; the check before it gives the clear error in the ordinary case.
 */
async function publish(tmpDir: string, outDir: string): Promise<void> {
  await assertAbsent(outDir);
  await rename(tmpDir, outDir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOTEMPTY' || err.code === 'EEXIST') throw new DatasetVersionExistsError(outDir);
    throw err;
  });
}

async function buildVersion(options: Resolved, dir: string): Promise<PreprocessResult> {
  const log = new IssueLog(options.displayName, options.maxErrors);
  const sink = await SplitSink.create(dir, options.seed, options.splits);
  try {
    const decoder = new LineDecoder(options.maxLineBytes);
    // Once the file is known to be bad, records are still validated (to report more issues) but not written.
    const emit = (record: DatasetRecord): void => {
      if (log.count === 0) sink.add(record);
    };
    const ctx = { log, decoder, emit };
    const reader: RecordReader =
      options.format === 'csv' ? new CsvReader(ctx, options.maxLineBytes) : new JsonlReader(ctx);
    const source = await readSource(options, reader, sink, log);
    if (log.count === 0 && sink.records === 0) {
      log.add(0, null, source.size_bytes === 0 ? 'file is empty (no records)' : reader.emptyMessage());
    }
    if (log.count > 0) throw log.toError();
    const files = await sink.finish();
    return summarize(source, sink, files, reader);
  } finally {
    await sink.discard();
  }
}

export interface ValidateOptions {
  /** the file to read, or `source`: its bytes as a stream (an upload as it arrives); one of the two */
  sourcePath?: string;
  source?: Readable;
  displayName?: string;
  format: DatasetFormat;
  maxLineBytes?: number;
  maxErrors?: number;
  /** the file's compression: its lines are checked as they are decompressed (a stream, never the whole file) */
  compression?: Compression;
}

export type Compression = 'none' | 'gzip' | 'zstd';

/**
 * The structural checks of an upload, before its preparation job: every line read and validated as
 * preprocessDataset does (the same readers, the same issues), nothing written. Throws DatasetValidationError.
 */
export async function validateDataset(opts: ValidateOptions): Promise<{ records: number; source: PreprocessResult['source'] }> {
  const maxLineBytes = opts.maxLineBytes ?? DEFAULT_MAX_LINE_BYTES;
  const maxErrors = opts.maxErrors ?? DEFAULT_MAX_ERRORS;
  requirePositiveInteger('maxLineBytes', maxLineBytes);
  requirePositiveInteger('maxErrors', maxErrors);
  if ((opts.sourcePath === undefined) === (opts.source === undefined)) throw new TypeError('validateDataset: give either sourcePath or source');
  const options = { sourcePath: opts.sourcePath, source: opts.source, maxLineBytes, compression: opts.compression ?? 'none' };
  const log = new IssueLog(opts.displayName ?? basename(opts.sourcePath ?? 'upload'), maxErrors);
  let records = 0;
  const ctx = { log, decoder: new LineDecoder(maxLineBytes), emit: () => void records++ };
  const reader: RecordReader = opts.format === 'csv' ? new CsvReader(ctx, maxLineBytes) : new JsonlReader(ctx);
  const source = await readSource(options, reader, null, log);
  if (log.count === 0 && records === 0) log.add(0, null, source.size_bytes === 0 ? 'file is empty (no records)' : reader.emptyMessage());
  if (log.count > 0) throw log.toError();
  return { records, source };
}

/** Streams the file through the line splitter and the reader, hashing the raw bytes on the way. */
async function readSource(
  options: SourceOf & Pick<Resolved, 'maxLineBytes'> & { compression?: Compression },
  reader: RecordReader,
  sink: SplitSink | null,
  log: IssueLog,
): Promise<PreprocessResult['source']> {
  const hash = createHash('sha256');
  const splitter = new LineSplitter(options.maxLineBytes);
  let size = 0;
  let lines = 0;
  try {
    for await (const chunk of sourceBytes(options)) {
      const buf = chunk as Buffer;
      hash.update(buf);
      size += buf.length;
      for (const line of splitter.push(buf)) {
        lines = line.number;
        reader.line(line);
        if (log.stopped) return { sha256: '', size_bytes: size, lines }; // the caller throws; the rest is unread
      }
      await sink?.flushIfFull();
    }
  } catch (err) {
    const compression = options.compression ?? 'none';
    if (compression === 'none' || !isDecompressionError(err)) throw err;
    log.add(0, null, `cannot decompress after ${size} bytes (line ${lines + 1}): ${(err as Error).message}; expected ${COMPRESSED_DATA[compression]}`);
    return { sha256: '', size_bytes: size, lines };
  }
  for (const line of splitter.end()) {
    lines = line.number;
    reader.line(line);
  }
  reader.end();
  return { sha256: hash.digest('hex'), size_bytes: size, lines };
}

/** Where the bytes come from: a file, or a stream that is read as it is (once). */
type SourceOf = { sourcePath?: string; source?: Readable };

/** The file's bytes, decompressed on the way when it is compressed. */
function sourceBytes(options: SourceOf & { compression?: Compression }): Readable {
  const raw = options.source ?? createReadStream(options.sourcePath!, { highWaterMark: READ_CHUNK_BYTES });
  if ((options.compression ?? 'none') === 'none') return raw;
  const decompress = options.compression === 'gzip' ? createGunzip({ chunkSize: READ_CHUNK_BYTES }) : zstdDecompressor();
  raw.on('error', (err: Error) => decompress.destroy(err));
  return raw.pipe(decompress);
}

const COMPRESSED_DATA: Record<Exclude<Compression, 'none'>, string> = { gzip: 'gzip data (starting 1f 8b)', zstd: 'zstd data (starting 28 b5 2f fd)' };

/** A corrupt or truncated stream, not the file system's error. */
const isDecompressionError = (err: unknown): boolean => err instanceof ZstdError || isZlibError(err);

/** zlib's own errors (a corrupt or truncated stream: Z_DATA_ERROR, Z_BUF_ERROR). */
const isZlibError = (err: unknown): boolean => typeof (err as { code?: unknown }).code === 'string' && /^Z_/.test((err as { code: string }).code);

class ZstdError extends Error {}

/**
 * zstd frames decompressed as a stream. Node 20's zlib has no zstd; fzstd is a small pure-JS streaming decoder (no
 * native build, nothing downloaded at install). A frame cut short fails at the end of the input.
 */
function zstdDecompressor(): Transform {
  let push: (chunk: Uint8Array) => void = () => undefined;
  const decoder = new Decompress((chunk) => push(chunk));
  const step = (fn: () => void, done: (err?: Error | null) => void) => {
    try {
      fn();
      done();
    } catch (err) {
      done(new ZstdError(`zstd: ${(err as Error).message}`));
    }
  };
  const transform = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      step(() => decoder.push(chunk), done);
    },
    flush(done) {
      step(() => decoder.push(new Uint8Array(0), true), done);
    },
  });
  push = (chunk) => transform.push(Buffer.from(chunk)); // a copy: the decoder reuses its window
  return transform;
}

function summarize(
  source: PreprocessResult['source'],
  sink: SplitSink,
  files: SplitFiles,
  reader: RecordReader,
): PreprocessResult {
  const versionHash = createHash('sha256');
  for (const name of SPLIT_NAMES) versionHash.update(files[name].sha256);
  return {
    source,
    num_records: sink.records,
    duplicates_removed: sink.duplicates,
    splits: files,
    schema: { form: reader.form as RecordForm, fields: [...reader.fields] }, // set by the first record
    sha256: versionHash.digest('hex'),
  };
}

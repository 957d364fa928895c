// A multipart/form-data body read as it streams: small fields are kept (bounded), the one file field is written to a
// local file (hashed on the way) or handed to a stream of the caller's as its bytes arrive, so an upload of any size
// allowed by limits.max_upload_bytes is never held in memory whole (Request.formData() would buffer it).
import { createHash, type Hash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { once } from 'node:events';
import { Readable, type Writable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { invalid } from './errors.js';

export interface MultipartUpload {
  fields: Record<string, string>;
  /** sha256: of the file part's bytes, hashed as they were written (null when they went to a stream of the caller's) */
  file: { filename: string; bytes: number; sha256: string | null } | null;
}

/**
 * Where the file part goes when the form's fields came before it: a stream of the caller's (which reads it as it
 * arrives), or null for the local file. Called once, when the file part's headers have been read.
 */
export type FileStreamer = (file: { filename: string }, fieldsSoFar: Record<string, string>) => Writable | null;

/** Waits until `sink` takes more, refusing when it was closed first (its reader gave up). */
async function drained(sink: Writable): Promise<void> {
  const closed = once(sink, 'close').then(() => {
    throw sink.errored ?? new Error('the file part\'s reader stopped before the part ended');
  });
  await Promise.race([once(sink, 'drain'), closed]);
}

/** The boundary of a multipart/form-data content type, or null. */
export function boundaryOf(contentType: string): string | null {
  if (!/^multipart\/form-data/i.test(contentType)) return null;
  const m = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  return m ? (m[1] ?? m[2]!) : null;
}

interface Part {
  name: string;
  filename: string | null;
}

function partOf(headerBlock: string): Part {
  const disposition = headerBlock.split('\r\n').find((l) => /^content-disposition:/i.test(l));
  const name = disposition && /\bname="([^"]*)"/i.exec(disposition)?.[1];
  if (!name) throw invalid('request body: a multipart part has no Content-Disposition name');
  const filename = /\bfilename="([^"]*)"/i.exec(disposition)?.[1] ?? null;
  return { name, filename };
}

/**
 * Reads the form: fields up to `maxFieldBytes` each; the part named `fileField` (the first one) goes to the stream
 * `streamFile` gives, else to `filePath`. Any other file part is read past and dropped.
 */
export async function receiveMultipart(
  body: WebReadableStream<Uint8Array> | ReadableStream<Uint8Array>,
  contentType: string,
  o: { fileField: string; filePath: string; maxFieldBytes: number; streamFile?: FileStreamer },
): Promise<MultipartUpload> {
  const boundary = boundaryOf(contentType);
  if (!boundary) throw invalid('request body: expected multipart/form-data with a boundary');
  const delimiter = Buffer.from(`\r\n--${boundary}`);
  const out: MultipartUpload = { fields: {}, file: null };
  // The body's first delimiter has no CRLF before it: one is put in front so every delimiter looks the same.
  let buf: Buffer = Buffer.from('\r\n');
  let state: 'preamble' | 'after-delimiter' | 'headers' | 'body' | 'done' = 'preamble';
  let part: Part | null = null;
  let field: Buffer[] = [];
  let fieldBytes = 0;
  let sink: Writable | null = null;
  let hash: Hash | null = null;

  const emit = async (data: Buffer): Promise<void> => {
    if (!part || data.length === 0) return;
    if (sink) {
      out.file!.bytes += data.length;
      hash?.update(data);
      if (!sink.write(data)) await drained(sink);
    } else if (part.filename === null) {
      fieldBytes += data.length;
      if (fieldBytes > o.maxFieldBytes) throw invalid(`${part.name}: a form field of more than ${o.maxFieldBytes} bytes`);
      field.push(data);
    }
  };
  // A caller's stream is ended only once the whole form has been read: a form that breaks off after the file is
  // refused, and its reader must see an error rather than a file it would take as whole.
  let held: Writable | null = null;
  const endPart = async (): Promise<void> => {
    if (sink && hash) {
      sink.end();
      await once(sink, 'close');
      out.file!.sha256 = hash.digest('hex');
    } else if (sink) held = sink;
    else if (part && part.filename === null) out.fields[part.name] = Buffer.concat(field).toString('utf8');
    sink = null;
    part = null;
  };

  try {
    for await (const chunk of Readable.fromWeb(body as WebReadableStream<Uint8Array>)) {
      buf = Buffer.concat([buf, chunk as Buffer]);
      for (;;) {
        if (state === 'preamble' || state === 'body') {
          const at = buf.indexOf(delimiter);
          if (at < 0) {
            // Keep what could be the start of a delimiter split across chunks.
            const keep = Math.min(buf.length, delimiter.length - 1);
            if (state === 'body') await emit(buf.subarray(0, buf.length - keep));
            buf = buf.subarray(buf.length - keep);
            break;
          }
          if (state === 'body') {
            await emit(buf.subarray(0, at));
            await endPart();
          }
          buf = buf.subarray(at + delimiter.length);
          state = 'after-delimiter';
        }
        if (state === 'after-delimiter') {
          if (buf.length < 2) break;
          const next = buf.subarray(0, 2).toString('latin1');
          if (next === '--') {
            state = 'done';
            break;
          }
          if (next !== '\r\n') throw invalid('request body: a malformed multipart delimiter');
          buf = buf.subarray(2);
          state = 'headers';
        }
        if (state === 'headers') {
          const end = buf.indexOf('\r\n\r\n');
          if (end < 0) {
            if (buf.length > 16 * 1024) throw invalid('request body: multipart part headers longer than 16 KiB');
            break;
          }
          part = partOf(buf.subarray(0, end).toString('utf8'));
          buf = buf.subarray(end + 4);
          field = [];
          fieldBytes = 0;
          if (part.filename !== null && part.name === o.fileField && out.file === null) {
            out.file = { filename: part.filename, bytes: 0, sha256: null };
            sink = o.streamFile?.({ filename: part.filename }, { ...out.fields }) ?? null;
            if (!sink) {
              sink = createWriteStream(o.filePath);
              hash = createHash('sha256');
            }
          }
          state = 'body';
          continue;
        }
        if (state === 'done') break;
      }
      if (state === 'done') break;
    }
    if (state !== 'done') throw invalid('request body: the multipart form ends before its closing boundary');
    if (held) await new Promise<void>((resolve, reject) => held!.end((err?: Error | null) => (err ? reject(err) : resolve())));
  } catch (err) {
    // The form broke off or was refused: a caller's stream sees the error, not a short file.
    for (const s of [sink, held]) if (s && !s.writableFinished) (s as Writable).destroy(err as Error);
    throw err;
  } finally {
    if (sink && hash) {
      (sink as Writable).destroy();
      if (!(sink as Writable).closed) await once(sink as Writable, 'close').catch(() => undefined);
    }
  }
  return out;
}

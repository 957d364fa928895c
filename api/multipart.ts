// A multipart/form-data body read as it streams: small fields are kept (bounded), the one file field is written to a
// local file as its bytes arrive, so an upload of any size allowed by limits.max_upload_bytes is never held in
// memory whole (Request.formData() would buffer it).
import { createWriteStream, type WriteStream } from 'node:fs';
import { once } from 'node:events';
import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { invalid } from './errors.js';

export interface MultipartUpload {
  fields: Record<string, string>;
  file: { filename: string; bytes: number } | null;
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
 * Reads the form: fields up to `maxFieldBytes` each; the part named `fileField` (the first one) goes to `filePath`.
 * Any other file part is read past and dropped.
 */
export async function receiveMultipart(body: WebReadableStream<Uint8Array> | ReadableStream<Uint8Array>, contentType: string, o: { fileField: string; filePath: string; maxFieldBytes: number }): Promise<MultipartUpload> {
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
  let sink: WriteStream | null = null;

  const emit = async (data: Buffer): Promise<void> => {
    if (!part || data.length === 0) return;
    if (sink) {
      out.file!.bytes += data.length;
      if (!sink.write(data)) await once(sink, 'drain');
    } else if (part.filename === null) {
      fieldBytes += data.length;
      if (fieldBytes > o.maxFieldBytes) throw invalid(`${part.name}: a form field of more than ${o.maxFieldBytes} bytes`);
      field.push(data);
    }
  };
  const endPart = async (): Promise<void> => {
    if (sink) {
      sink.end();
      await once(sink, 'close');
      sink = null;
    } else if (part && part.filename === null) out.fields[part.name] = Buffer.concat(field).toString('utf8');
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
            out.file = { filename: part.filename, bytes: 0 };
            sink = createWriteStream(o.filePath);
          }
          state = 'body';
          continue;
        }
        if (state === 'done') break;
      }
      if (state === 'done') break;
    }
  } finally {
    if (sink) {
      (sink as WriteStream).destroy();
      await once(sink as WriteStream, 'close').catch(() => undefined);
    }
  }
  if (state !== 'done') throw invalid('request body: the multipart form ends before its closing boundary');
  return out;
}

import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

/** SHA-256 of a file, streamed (never read whole). */
export async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

export const sha256Text = (text: string): string => createHash('sha256').update(text).digest('hex');

/** SHA-256 of a stream (an object read from the store), chunk by chunk. */
export async function sha256Stream(stream: AsyncIterable<unknown>): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of stream) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** A pass-through that hashes (SHA-256) and counts what goes through it; `measured()` once it has ended. */
export function measuring(): { stream: Transform; measured: () => { sha256: string; size_bytes: number } } {
  const hash = createHash('sha256');
  let size = 0;
  const stream = new Transform({
    transform(chunk: Buffer, _enc, done) {
      hash.update(chunk);
      size += chunk.length;
      done(null, chunk);
    },
  });
  let digest: string | null = null;
  return { stream, measured: () => ({ sha256: (digest ??= hash.digest('hex')), size_bytes: size }) };
}

/** Streams `source` into the file at `path` (never held whole), hashing and counting on the way. */
export async function writeMeasured(source: Readable, path: string): Promise<{ sha256: string; size_bytes: number }> {
  const meter = measuring();
  await pipeline(source, meter.stream, createWriteStream(path));
  return meter.measured();
}

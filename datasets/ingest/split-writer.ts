// Writes one split file, computing its record count, size and sha256 from the bytes as they are written.
import { createHash, type Hash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open, rename, type FileHandle } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { createInterface } from 'node:readline';

export interface SplitInfo {
  path: string; // relative to the version directory, e.g. 'train.jsonl'
  num_records: number;
  size_bytes: number;
  sha256: string;
}

const FLUSH_BYTES = 1 << 20; // batch small record writes into ~1 MiB writes

export class SplitWriter {
  private readonly hash: Hash = createHash('sha256');
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private records = 0;
  private bytes = 0;
  private closed = false;

  private constructor(
    private readonly file: FileHandle,
    private readonly path: string,
  ) {}

  /** Creates the file; fails if it already exists. */
  static async create(path: string): Promise<SplitWriter> {
    return new SplitWriter(await open(path, 'wx'), path);
  }

  /** Queues one record (a line of JSON without the newline). */
  add(line: string): void {
    const buf = Buffer.from(`${line}\n`, 'utf8');
    this.hash.update(buf);
    this.pending.push(buf);
    this.pendingBytes += buf.length;
    this.bytes += buf.length;
    this.records += 1;
  }

  get shouldFlush(): boolean {
    return this.pendingBytes >= FLUSH_BYTES;
  }

  async flush(): Promise<void> {
    if (this.pendingBytes === 0) return;
    const buf = Buffer.concat(this.pending, this.pendingBytes);
    this.pending = [];
    this.pendingBytes = 0;
    for (let offset = 0; offset < buf.length; ) {
      const { bytesWritten } = await this.file.write(buf, offset);
      offset += bytesWritten;
    }
  }

  async close(): Promise<SplitInfo> {
    await this.flush();
    await this.file.sync(); // the version is published by rename; its files must be on disk first
    await this.discard();
    const sha256 = this.hash.digest('hex');
    return { path: basename(this.path), num_records: this.records, size_bytes: this.bytes, sha256 };
  }

  /** Closes the file without finishing it (on failure; the directory is removed afterwards). */
  async discard(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.file.close();
  }
}

/**
 * Rewrites a finished split file with one record removed and/or one appended, returning the new file's info.
 * Used only to rebalance tiny datasets, so reading our own normalized lines back with readline is fine.
 */
export async function rewriteSplit(
  dir: string,
  info: SplitInfo,
  change: { remove?: string; append?: string },
): Promise<SplitInfo> {
  const path = join(dir, info.path);
  const next = await SplitWriter.create(`${path}.next`);
  try {
    const lines = createInterface({ input: createReadStream(path), crlfDelay: Infinity });
    for await (const line of lines) {
      if (line !== change.remove) next.add(line);
      if (next.shouldFlush) await next.flush();
    }
    if (change.append !== undefined) next.add(change.append);
    const rewritten = await next.close();
    await rename(`${path}.next`, path);
    return { ...rewritten, path: info.path };
  } finally {
    await next.discard();
  }
}

// Artifacts live in an object store: file:// under the data dir (embedded) or any S3-protocol server.
// Objects are immutable once written: a put writes to a temporary name and renames (file://) or relies on
// S3's atomic PUT; every put returns the object's size and SHA-256.
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, readdir, readFile, realpath, rename, rm, stat, copyFile, open, writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { once } from 'node:events';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Readable } from 'node:stream';
import { createHash, randomBytes } from 'node:crypto';
import type { S3Client } from '@aws-sdk/client-s3';
import { measuring, sha256File } from './hash.js';
import { keyClimbsOut } from './locations.js';
import { MIN_PART_BYTES, MAX_PART_BYTES, type Config } from '../contracts/config.js';
import { storageEncryption } from './config.js';

export interface StoredObject {
  uri: string;
  size_bytes: number;
  sha256: string;
}

/** A copy's source that does not exist (as opposed to a store that failed): retrying will not make it appear. */
export class ObjectNotFoundError extends Error {}

/**
 * A key or URI that would reach outside the store: a `..` segment once decoded, or (file://) a path outside the
 * store's root, directly or through a symbolic link. Never retried: the same name resolves the same way again.
 */
export class ObjectOutsideStoreError extends Error {}

/** A key as a store keeps it: no `..` at any depth of decoding (lib/locations.ts keyClimbsOut). */
function checkKey(key: string): void {
  if (keyClimbsOut(key)) throw new ObjectOutsideStoreError(`object key "${key}" climbs out of its bucket: no ".." segment, however encoded`);
}

export interface CopyOptions {
  /** Called as the copy advances, with the bytes done so far (copied, then hashed); a long copy heartbeats from it. */
  onProgress?: (bytesDone: number) => void;
}

/** How putStream runs: `signal` aborts it (no object is left); `maxBytes` sizes S3 parts so an object that large fits. */
export interface PutStreamOptions {
  signal?: AbortSignal;
  maxBytes?: number;
}

export interface ObjectStore {
  /**
   * Writes a stream to bucket/key as it arrives (never holding it whole), hashing and counting the bytes on the way.
   * The object appears only whole: an abort (the signal, or an error in the source) rejects and leaves no object.
   */
  putStream(bucket: string, key: string, source: Readable, opts?: PutStreamOptions): Promise<StoredObject>;
  /** Copies a local file to bucket/key. sha256: the file's digest when the caller already computed it while
   * writing the file (a streamed upload), so a large file is not read a second time to hash it. */
  putFile(bucket: string, key: string, localPath: string, sha256?: string): Promise<StoredObject>;
  /** Copies every file under a local directory to bucket/prefix/<relative path>. */
  putDirectory(bucket: string, prefix: string, localDir: string): Promise<StoredObject[]>;
  /** Downloads an object (by URI) to a local file. */
  getFile(uri: string, localPath: string): Promise<void>;
  /** Reads an object as a stream. */
  read(uri: string): Promise<Readable>;
  /**
   * Reads an object from a byte offset to its end as it is now (a growing log read in range reads), with that end;
   * null when the object does not exist or has no bytes past `start`.
   */
  readFrom(uri: string, start: number): Promise<{ body: Readable; end: number } | null>;
  exists(uri: string): Promise<boolean>;
  /** Removes the object at bucket/prefix and every object under it (a file or a whole directory). */
  deletePrefix(bucket: string, prefix: string): Promise<void>;
  /** Writes a small text object (a job's envelope, a status record) at a URI, atomically. */
  putText(uri: string, text: string): Promise<void>;
  /** Reads a small text object; null when it does not exist. */
  readText(uri: string): Promise<string | null>;
  /** The URIs of every object under a URI prefix (recursively), in key order. */
  list(prefix: string): Promise<StoredObjectEntry[]>;
  /** Removes one object by URI; an absent object is not an error. */
  deleteObject(uri: string): Promise<void>;
  /**
   * Copies one object (by URI, of this store) to bucket/key; returns the copy's size and SHA-256 as stored. A
   * source that does not exist rejects with ObjectNotFoundError.
   */
  copy(srcUri: string, bucket: string, key: string, opts?: CopyOptions): Promise<StoredObject>;
}

/** Copies every object under a URI prefix to bucket/prefix/<relative key>. */
export async function copyPrefix(store: ObjectStore, srcPrefix: string, bucket: string, prefix: string): Promise<StoredObject[]> {
  const out: StoredObject[] = [];
  for (const o of await store.list(srcPrefix)) out.push(await store.copy(o.uri, bucket, `${prefix}/${o.uri.slice(srcPrefix.replace(/\/$/, '').length + 1)}`));
  return out;
}

export interface StoredObjectEntry {
  uri: string;
  size_bytes: number;
}

/** A bucket and key as a URI of this store's kind. */
export function objectUri(store: ObjectStore, bucket: string, key: string): string {
  return store instanceof FileObjectStore ? pathToFileURL(store.pathOf(bucket, key)).href : `s3://${bucket}/${key}`;
}

export async function listFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true });
  return entries
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name))
    .sort();
}

/** Whether `path` is `root` or lies under it (both resolved). */
function isUnder(path: string, root: string): boolean {
  return path === root || path.startsWith(root.endsWith(sep) ? root : root + sep);
}

/** Why a put was aborted, as an error (a signal's reason may be anything). */
function abortReason(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new Error(`upload aborted: ${String(signal.reason ?? 'aborted')}`);
}

async function fsyncFile(path: string): Promise<void> {
  const fh = await open(path, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

export class FileObjectStore implements ObjectStore {
  private readonly root: string;
  private realRoot: Promise<string> | null = null;

  constructor(root: string) {
    this.root = resolve(root);
  }

  private path(bucket: string, key: string): string {
    checkKey(bucket);
    checkKey(key);
    return join(this.root, bucket, key);
  }

  pathOf(bucket: string, key: string): string {
    return this.path(bucket, key);
  }

  /** The root as the file system resolves it (created on first use, so a fresh data dir has one to compare with). */
  private async resolvedRoot(): Promise<string> {
    this.realRoot ??= mkdir(this.root, { recursive: true }).then(() => realpath(this.root));
    return this.realRoot;
  }

  /**
   * The local path of a URI or path of this store, refused when it lies outside the root: by its text, or through
   * a symbolic link (the real path of its nearest existing ancestor, itself included, must stay inside the real
   * root). Every read, list, copy and write goes through here, so a link planted in the store leads nowhere.
   */
  private async inside(target: string): Promise<string> {
    const path = resolve(target.startsWith('file:') ? fileURLToPath(target) : target);
    const refuse = (why: string) => new ObjectOutsideStoreError(`${target}: ${why} the object store (${this.root})`);
    if (!isUnder(path, this.root)) throw refuse('outside');
    const realRoot = await this.resolvedRoot();
    for (let at = path; ; at = dirname(at)) {
      const real = await realpath(at).catch((err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return null;
        if (err.code === 'ELOOP') throw refuse('a loop of symbolic links in');
        throw err;
      });
      if (real !== null) {
        if (!isUnder(real, realRoot)) throw refuse('a symbolic link that leads outside');
        return path;
      }
      if (at === this.root || dirname(at) === at) return path;
    }
  }

  async putText(uri: string, text: string): Promise<void> {
    const dest = await this.inside(uri);
    await mkdir(dirname(dest), { recursive: true });
    const tmp = `${dest}.tmp-${process.pid}-${Date.now()}`;
    await writeFile(tmp, text);
    await fsyncFile(tmp);
    await rename(tmp, dest);
  }

  async readText(uri: string): Promise<string | null> {
    return readFile(await this.inside(uri), 'utf8').catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return null;
      throw err;
    });
  }

  async list(prefix: string): Promise<StoredObjectEntry[]> {
    const dir = await this.inside(prefix);
    const files = await listFiles(dir).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return [];
      throw err;
    });
    // A writer's temporary names are not objects yet.
    const visible = files.filter((f) => !/\.tmp-[^/]*$/.test(f));
    // A file removed between the directory read and its stat (a job pruning an old checkpoint) is not listed.
    const entries = await Promise.all(
      visible.map(async (f) => {
        const st = await stat(f).catch((err: NodeJS.ErrnoException) => {
          if (err.code === 'ENOENT') return null;
          throw err;
        });
        return st ? { uri: pathToFileURL(f).href, size_bytes: st.size } : null;
      }),
    );
    return entries.filter((e) => e !== null);
  }

  async deleteObject(uri: string): Promise<void> {
    await rm(await this.inside(uri), { force: true });
  }

  /** Streams the source to a temporary name, hashing it on the way (one read), then fsyncs and renames. */
  async copy(srcUri: string, bucket: string, key: string, opts: CopyOptions = {}): Promise<StoredObject> {
    const src = await this.inside(srcUri);
    const found = await stat(src).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return null;
      throw err;
    });
    if (!found?.isFile()) throw new ObjectNotFoundError(`${srcUri}: no such object`);
    const dest = await this.inside(this.path(bucket, key));
    await mkdir(dirname(dest), { recursive: true });
    const tmp = `${dest}.tmp-${process.pid}-${Date.now()}`;
    const hash = createHash('sha256');
    let done = 0;
    try {
      await pipeline(
        createReadStream(src),
        async function* (chunks: AsyncIterable<Buffer>) {
          for await (const chunk of chunks) {
            hash.update(chunk);
            done += chunk.length;
            opts.onProgress?.(done);
            yield chunk;
          }
        },
        createWriteStream(tmp),
      );
      await fsyncFile(tmp);
      await rename(tmp, dest);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
    return { uri: pathToFileURL(dest).href, size_bytes: done, sha256: hash.digest('hex') };
  }

  async putFile(bucket: string, key: string, localPath: string, sha256?: string): Promise<StoredObject> {
    const dest = await this.inside(this.path(bucket, key));
    await mkdir(dirname(dest), { recursive: true });
    const tmp = `${dest}.tmp-${process.pid}-${Date.now()}`;
    await copyFile(localPath, tmp);
    await fsyncFile(tmp);
    await rename(tmp, dest);
    const { size } = await stat(dest);
    return { uri: pathToFileURL(dest).href, size_bytes: size, sha256: sha256 ?? (await sha256File(dest)) };
  }

  /**
   * A temporary name at the top of the bucket's directory (same file system, so the rename is atomic; list() skips
   * it), renamed into place when whole: the object's own directories are made only then, so a put that fails leaves
   * none behind.
   */
  async putStream(bucket: string, key: string, source: Readable, opts: PutStreamOptions = {}): Promise<StoredObject> {
    const dest = await this.inside(this.path(bucket, key));
    const bucketDir = await this.inside(join(this.root, bucket));
    await mkdir(bucketDir, { recursive: true });
    const tmp = join(bucketDir, `.tmp-${process.pid}-${randomBytes(6).toString('hex')}`);
    if (opts.signal?.aborted) {
      source.destroy();
      throw abortReason(opts.signal);
    }
    const m = measuring();
    const out = createWriteStream(tmp);
    try {
      await pipeline(source, m.stream, out, opts.signal ? { signal: opts.signal } : {});
      await fsyncFile(tmp);
      if (opts.signal?.aborted) throw abortReason(opts.signal);
      await mkdir(dirname(dest), { recursive: true });
      await rename(tmp, dest);
    } catch (err) {
      source.destroy();
      // A write stream destroyed before its file was open still opens (creates) it, then closes it: removed only
      // after that, or an early abort would leave the temporary file behind.
      if (!out.closed) await once(out, 'close').catch(() => undefined);
      await rm(tmp, { force: true });
      throw opts.signal?.aborted ? abortReason(opts.signal) : err;
    }
    return { uri: pathToFileURL(dest).href, ...m.measured() };
  }

  async putDirectory(bucket: string, prefix: string, localDir: string): Promise<StoredObject[]> {
    const out: StoredObject[] = [];
    for (const file of await listFiles(localDir)) out.push(await this.putFile(bucket, `${prefix}/${relative(localDir, file)}`, file));
    return out;
  }

  async getFile(uri: string, localPath: string): Promise<void> {
    await mkdir(dirname(localPath), { recursive: true });
    await pipeline(await this.read(uri), createWriteStream(localPath));
  }

  async read(uri: string): Promise<Readable> {
    return createReadStream(await this.inside(uri));
  }

  async readFrom(uri: string, start: number): Promise<{ body: Readable; end: number } | null> {
    const path = await this.inside(uri);
    const size = await stat(path).then((s) => s.size, () => null);
    if (size === null || size <= start) return null;
    return { body: createReadStream(path, { start, end: size - 1 }), end: size };
  }

  async exists(uri: string): Promise<boolean> {
    return stat(await this.inside(uri)).then(
      () => true,
      () => false,
    );
  }

  async deletePrefix(bucket: string, prefix: string): Promise<void> {
    await rm(await this.inside(this.path(bucket, prefix)), { recursive: true, force: true });
  }
}

/** The storage settings an S3 store is built from; the multipart threshold has its default when left out. */
export type S3StoreConfig = Omit<Config['storage'], 'multipart_threshold' | 'job_access'> & { multipart_threshold?: number };

/** Parts at most: S3 numbers them 1..10,000. */
const MAX_PARTS = 10_000;
/** Parts copied at once by one multipart copy. */
const PART_CONCURRENCY = 4;
/**
 * The part size of a streamed upload (grown when maxBytes needs it): lib-storage holds up to PART_CONCURRENCY parts
 * in memory while they upload, so a small part keeps a large upload's memory small; below one part it is one PUT.
 */
const STREAM_PART_BYTES = 8 * 1024 * 1024;

/**
 * The part size of a multipart copy: the threshold, grown when the object would need more than 10,000 parts,
 * within S3's 5 MiB..5 GiB.
 */
export function partSizeFor(sizeBytes: number, threshold: number): number {
  return Math.min(MAX_PART_BYTES, Math.max(MIN_PART_BYTES, threshold, Math.ceil(sizeBytes / MAX_PARTS)));
}

/** The request fields that make S3 encrypt an object it writes (PutObject, CopyObject, CreateMultipartUpload). */
export type EncryptionFields = { ServerSideEncryption?: 'AES256' | 'aws:kms'; SSEKMSKeyId?: string };

export function encryptionFields(storage: Pick<Config['storage'], 'endpoint' | 'encryption' | 'kms_key_id'>): EncryptionFields {
  const e = storageEncryption(storage);
  if (e.mode === 'sse-s3') return { ServerSideEncryption: 'AES256' };
  if (e.mode === 'sse-kms') return { ServerSideEncryption: 'aws:kms', SSEKMSKeyId: e.kmsKeyId! };
  return {};
}

export class S3ObjectStore implements ObjectStore {
  private readonly ensured = new Set<string>();
  constructor(
    readonly client: S3Client,
    private readonly s3: typeof import('@aws-sdk/client-s3'),
    private readonly multipartThreshold = 64 * 1024 * 1024,
    /** Every write asks for it: a copy is a new object and is encrypted as one, never inheriting its source's. */
    private readonly sse: EncryptionFields = {},
  ) {}

  static async create(config: S3StoreConfig): Promise<S3ObjectStore> {
    const s3 = await import('@aws-sdk/client-s3');
    const client = new s3.S3Client({
      endpoint: config.endpoint,
      region: config.region,
      forcePathStyle: true,
      credentials:
        config.access_key && config.secret_key
          ? { accessKeyId: config.access_key, secretAccessKey: config.secret_key }
          : undefined,
    });
    return new S3ObjectStore(client, s3, config.multipart_threshold, encryptionFields(config));
  }

  private async ensureBucket(bucket: string): Promise<void> {
    if (this.ensured.has(bucket)) return;
    try {
      await this.client.send(new this.s3.HeadBucketCommand({ Bucket: bucket }));
    } catch {
      await this.client.send(new this.s3.CreateBucketCommand({ Bucket: bucket })).catch((err: { name?: string }) => {
        if (err.name !== 'BucketAlreadyOwnedByYou' && err.name !== 'BucketAlreadyExists') throw err;
      });
    }
    this.ensured.add(bucket);
  }

  async putFile(bucket: string, key: string, localPath: string, known?: string): Promise<StoredObject> {
    checkKey(key);
    await this.ensureBucket(bucket);
    const [{ size }, sha256] = await Promise.all([stat(localPath), known ?? sha256File(localPath)]);
    await this.client.send(
      new this.s3.PutObjectCommand({
        Bucket: bucket,
        Key: key,
        Body: createReadStream(localPath),
        ContentLength: size,
        Metadata: { sha256 },
        ...this.sse,
      }),
    );
    return { uri: `s3://${bucket}/${key}`, size_bytes: size, sha256 };
  }

  /**
   * lib-storage's Upload: one PutObject below a part, else a multipart upload, aborted on failure (no parts left).
   * The SHA-256 is known only once the last byte went by, after the object's metadata was sent: it is returned (the
   * caller's row of record keeps it) and not written into the object's metadata, which nothing reads back.
   * An abort destroys the source rather than aborting the Upload itself, so done() settles only after every part in
   * flight has finished and the multipart upload is aborted; what a PUT that had already finished wrote is deleted.
   */
  async putStream(bucket: string, key: string, source: Readable, opts: PutStreamOptions = {}): Promise<StoredObject> {
    checkKey(key);
    await this.ensureBucket(bucket);
    const { Upload } = await import('@aws-sdk/lib-storage');
    const m = measuring();
    const stop = () => m.stream.destroy(abortReason(opts.signal!));
    if (opts.signal?.aborted) stop();
    opts.signal?.addEventListener('abort', stop, { once: true });
    source.on('error', (err) => m.stream.destroy(err));
    // The Upload reads the error while it reads the stream; one that comes after it stopped reading (an abort once
    // the last byte went by) is reported by the signal check below, not as an uncaught event.
    m.stream.on('error', () => undefined);
    const partSize = partSizeFor(opts.maxBytes ?? 0, STREAM_PART_BYTES);
    const upload = new Upload({ client: this.client, params: { Bucket: bucket, Key: key, Body: source.pipe(m.stream), ...this.sse }, partSize, queueSize: PART_CONCURRENCY });
    try {
      await upload.done();
      if (opts.signal?.aborted) throw abortReason(opts.signal);
    } catch (err) {
      source.destroy();
      await this.client.send(new this.s3.DeleteObjectCommand({ Bucket: bucket, Key: key })).catch(() => undefined);
      throw opts.signal?.aborted ? abortReason(opts.signal) : err;
    } finally {
      opts.signal?.removeEventListener('abort', stop);
    }
    return { uri: `s3://${bucket}/${key}`, ...m.measured() };
  }

  async putDirectory(bucket: string, prefix: string, localDir: string): Promise<StoredObject[]> {
    const out: StoredObject[] = [];
    for (const file of await listFiles(localDir)) out.push(await this.putFile(bucket, `${prefix}/${relative(localDir, file)}`, file));
    return out;
  }

  private parse(uri: string): { Bucket: string; Key: string } {
    const m = /^s3:\/\/([^/]+)\/(.+)$/.exec(uri);
    if (!m) throw new Error(`not an s3:// URI: ${uri}`);
    checkKey(m[2]!);
    return { Bucket: m[1]!, Key: m[2]! };
  }

  async getFile(uri: string, localPath: string): Promise<void> {
    await mkdir(dirname(localPath), { recursive: true });
    await pipeline(await this.read(uri), createWriteStream(localPath));
  }

  async read(uri: string): Promise<Readable> {
    const res = await this.client.send(new this.s3.GetObjectCommand(this.parse(uri)));
    return res.Body as Readable;
  }

  async readFrom(uri: string, start: number): Promise<{ body: Readable; end: number } | null> {
    try {
      const res = await this.client.send(new this.s3.GetObjectCommand({ ...this.parse(uri), Range: `bytes=${start}-` }));
      // "bytes <first>-<last>/<size>": the range served ends at the object's size when it was read.
      const end = Number(/\/(\d+)$/.exec(res.ContentRange ?? '')?.[1] ?? start + (res.ContentLength ?? 0));
      return { body: res.Body as Readable, end };
    } catch (err) {
      const name = (err as { name?: string }).name;
      if (name === 'NoSuchKey' || name === 'NoSuchBucket' || name === 'InvalidRange' || (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode === 416) return null;
      throw err;
    }
  }

  async exists(uri: string): Promise<boolean> {
    try {
      await this.client.send(new this.s3.HeadObjectCommand(this.parse(uri)));
      return true;
    } catch {
      return false;
    }
  }

  async putText(uri: string, text: string): Promise<void> {
    const { Bucket, Key } = this.parse(uri);
    await this.ensureBucket(Bucket);
    await this.client.send(new this.s3.PutObjectCommand({ Bucket, Key, Body: text, ContentType: 'application/json', ...this.sse }));
  }

  async readText(uri: string): Promise<string | null> {
    try {
      const res = await this.client.send(new this.s3.GetObjectCommand(this.parse(uri)));
      return await res.Body!.transformToString();
    } catch (err) {
      if ((err as { name?: string }).name === 'NoSuchKey' || (err as { name?: string }).name === 'NoSuchBucket') return null;
      throw err;
    }
  }

  async list(prefix: string): Promise<StoredObjectEntry[]> {
    const m = /^s3:\/\/([^/]+)\/?(.*)$/.exec(prefix);
    if (!m) throw new Error(`not an s3:// URI: ${prefix}`);
    checkKey(m[2] ?? '');
    const [Bucket, Prefix] = [m[1]!, m[2] ? m[2].replace(/\/?$/, '/') : ''];
    const out: StoredObjectEntry[] = [];
    for (let token: string | undefined; ; ) {
      let page;
      try {
        page = await this.client.send(new this.s3.ListObjectsV2Command({ Bucket, Prefix, ContinuationToken: token }));
      } catch (err) {
        if ((err as { name?: string }).name === 'NoSuchBucket') return [];
        throw err;
      }
      for (const o of page.Contents ?? []) out.push({ uri: `s3://${Bucket}/${o.Key!}`, size_bytes: o.Size ?? 0 });
      if (!page.IsTruncated) return out;
      token = page.NextContinuationToken;
    }
  }

  async deleteObject(uri: string): Promise<void> {
    await this.client.send(new this.s3.DeleteObjectCommand(this.parse(uri)));
  }

  /**
   * Server-side copy, then hashed as stored: the checksum of record describes the copy, not the source. Above the
   * multipart threshold the copy goes in parts (UploadPartCopy), which lifts CopyObject's 5 GB limit and reports
   * progress per part; a failed multipart copy is aborted, leaving no parts behind.
   */
  async copy(srcUri: string, bucket: string, key: string, opts: CopyOptions = {}): Promise<StoredObject> {
    checkKey(key);
    await this.ensureBucket(bucket);
    const src = this.parse(srcUri);
    const head = await this.client.send(new this.s3.HeadObjectCommand(src)).catch((err: { name?: string; $metadata?: { httpStatusCode?: number } }) => {
      if (err.name === 'NotFound' || err.name === 'NoSuchKey' || err.name === 'NoSuchBucket' || err.$metadata?.httpStatusCode === 404) throw new ObjectNotFoundError(`${srcUri}: no such object`);
      throw err;
    });
    const size = head.ContentLength ?? 0;
    const copySource = `${src.Bucket}/${encodeURIComponent(src.Key).replace(/%2F/g, '/')}`;
    if (size > this.multipartThreshold) await this.copyInParts(copySource, bucket, key, size, opts);
    else {
      await this.client.send(new this.s3.CopyObjectCommand({ Bucket: bucket, Key: key, CopySource: copySource, ...this.sse }));
      opts.onProgress?.(size);
    }
    const hash = createHash('sha256');
    let hashed = 0;
    for await (const chunk of await this.read(`s3://${bucket}/${key}`)) {
      hash.update(chunk as Buffer);
      hashed += (chunk as Buffer).length;
      opts.onProgress?.(size + hashed);
    }
    return { uri: `s3://${bucket}/${key}`, size_bytes: hashed, sha256: hash.digest('hex') };
  }

  private async copyInParts(copySource: string, bucket: string, key: string, size: number, opts: CopyOptions): Promise<void> {
    const partSize = partSizeFor(size, this.multipartThreshold);
    const count = Math.ceil(size / partSize);
    const { UploadId } = await this.client.send(new this.s3.CreateMultipartUploadCommand({ Bucket: bucket, Key: key, ...this.sse }));
    const parts: { ETag: string; PartNumber: number }[] = [];
    let copied = 0;
    let next = 1;
    const copyPart = async (): Promise<void> => {
      for (let n = next++; n <= count; n = next++) {
        const first = (n - 1) * partSize;
        const last = Math.min(size, first + partSize) - 1;
        const res = await this.client.send(
          new this.s3.UploadPartCopyCommand({ Bucket: bucket, Key: key, UploadId, PartNumber: n, CopySource: copySource, CopySourceRange: `bytes=${first}-${last}` }),
        );
        parts.push({ ETag: res.CopyPartResult!.ETag!, PartNumber: n });
        copied += last - first + 1;
        opts.onProgress?.(copied);
      }
    };
    try {
      await Promise.all(Array.from({ length: Math.min(PART_CONCURRENCY, count) }, copyPart));
      parts.sort((a, b) => a.PartNumber - b.PartNumber);
      await this.client.send(new this.s3.CompleteMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId, MultipartUpload: { Parts: parts } }));
    } catch (err) {
      await this.client.send(new this.s3.AbortMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId })).catch(() => undefined);
      throw err;
    }
  }

  async deletePrefix(bucket: string, prefix: string): Promise<void> {
    checkKey(prefix);
    // The key itself (a single file; deleting an absent key succeeds), then everything under it.
    await this.client.send(new this.s3.DeleteObjectCommand({ Bucket: bucket, Key: prefix }));
    for (let token: string | undefined; ; ) {
      const page = await this.client.send(new this.s3.ListObjectsV2Command({ Bucket: bucket, Prefix: `${prefix}/`, ContinuationToken: token }));
      const keys = (page.Contents ?? []).map((o) => ({ Key: o.Key! }));
      if (keys.length) await this.client.send(new this.s3.DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: keys } }));
      if (!page.IsTruncated) return;
      token = page.NextContinuationToken;
    }
  }
}

/** Where run and experiment artifacts live: the checkpoints bucket of the configured object store. */
export function artifactRootUri(deps: { config: Pick<Config, 'storage'>; home: string }): string {
  const bucket = deps.config.storage.buckets.checkpoints;
  return deps.config.storage.endpoint ? `s3://${bucket}` : `file://${join(deps.home, 'objects', bucket)}`;
}

export async function createObjectStore(config: S3StoreConfig, home: string): Promise<ObjectStore> {
  return config.endpoint ? S3ObjectStore.create(config) : new FileObjectStore(join(home, 'objects'));
}

/** A local path for a URI: file:// URIs are used in place; others are downloaded into cacheDir. */
export async function localPathFor(store: ObjectStore, uri: string, cacheDir: string): Promise<string> {
  if (uri.startsWith('file://')) return fileURLToPath(uri);
  if (uri.startsWith('/')) return uri;
  const dest = join(cacheDir, uri.replace(/^[a-z0-9]+:\/\//, '').replace(/[^A-Za-z0-9._/-]/g, '_'));
  if (!(await stat(dest).catch(() => null))) {
    const tmp = `${dest}.tmp-${process.pid}`;
    await store.getFile(uri, tmp);
    await rename(tmp, dest);
  }
  return dest;
}

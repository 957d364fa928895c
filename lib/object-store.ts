// Artifacts live in an object store: file:// under the data dir (embedded) or any S3-protocol server.
// Objects are immutable once written: a put writes to a temporary name and renames (file://) or relies on
// S3's atomic PUT; every put returns the object's size and SHA-256.
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, readdir, rename, rm, stat, copyFile, open } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Readable } from 'node:stream';
import type { S3Client } from '@aws-sdk/client-s3';
import { sha256File } from './hash.js';
import type { Config } from '../contracts/config.js';

export interface StoredObject {
  uri: string;
  size_bytes: number;
  sha256: string;
}

export interface ObjectStore {
  /** Copies a local file to bucket/key. sha256: the file's digest when the caller already computed it while
   * writing the file (a streamed upload), so a large file is not read a second time to hash it. */
  putFile(bucket: string, key: string, localPath: string, sha256?: string): Promise<StoredObject>;
  /** Copies every file under a local directory to bucket/prefix/<relative path>. */
  putDirectory(bucket: string, prefix: string, localDir: string): Promise<StoredObject[]>;
  /** Downloads an object (by URI) to a local file. */
  getFile(uri: string, localPath: string): Promise<void>;
  /** Reads an object as a stream. */
  read(uri: string): Promise<Readable>;
  exists(uri: string): Promise<boolean>;
  /** Removes the object at bucket/prefix and every object under it (a file or a whole directory). */
  deletePrefix(bucket: string, prefix: string): Promise<void>;
}

export async function listFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true });
  return entries
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name))
    .sort();
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
  constructor(private readonly root: string) {}

  private path(bucket: string, key: string): string {
    if (key.split('/').includes('..')) throw new Error(`object key "${key}" may not contain ".."`);
    return join(this.root, bucket, key);
  }

  async putFile(bucket: string, key: string, localPath: string, sha256?: string): Promise<StoredObject> {
    const dest = this.path(bucket, key);
    await mkdir(dirname(dest), { recursive: true });
    const tmp = `${dest}.tmp-${process.pid}-${Date.now()}`;
    await copyFile(localPath, tmp);
    await fsyncFile(tmp);
    await rename(tmp, dest);
    const { size } = await stat(dest);
    return { uri: pathToFileURL(dest).href, size_bytes: size, sha256: sha256 ?? (await sha256File(dest)) };
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
    return createReadStream(fileURLToPath(uri));
  }

  async exists(uri: string): Promise<boolean> {
    return stat(fileURLToPath(uri)).then(
      () => true,
      () => false,
    );
  }

  async deletePrefix(bucket: string, prefix: string): Promise<void> {
    await rm(this.path(bucket, prefix), { recursive: true, force: true });
  }
}

export class S3ObjectStore implements ObjectStore {
  private readonly ensured = new Set<string>();
  constructor(
    private readonly client: S3Client,
    private readonly s3: typeof import('@aws-sdk/client-s3'),
  ) {}

  static async create(config: Config['storage']): Promise<S3ObjectStore> {
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
    return new S3ObjectStore(client, s3);
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
    await this.ensureBucket(bucket);
    const [{ size }, sha256] = await Promise.all([stat(localPath), known ?? sha256File(localPath)]);
    await this.client.send(
      new this.s3.PutObjectCommand({
        Bucket: bucket,
        Key: key,
        Body: createReadStream(localPath),
        ContentLength: size,
        Metadata: { sha256 },
      }),
    );
    return { uri: `s3://${bucket}/${key}`, size_bytes: size, sha256 };
  }

  async putDirectory(bucket: string, prefix: string, localDir: string): Promise<StoredObject[]> {
    const out: StoredObject[] = [];
    for (const file of await listFiles(localDir)) out.push(await this.putFile(bucket, `${prefix}/${relative(localDir, file)}`, file));
    return out;
  }

  private parse(uri: string): { Bucket: string; Key: string } {
    const m = /^s3:\/\/([^/]+)\/(.+)$/.exec(uri);
    if (!m) throw new Error(`not an s3:// URI: ${uri}`);
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

  async exists(uri: string): Promise<boolean> {
    try {
      await this.client.send(new this.s3.HeadObjectCommand(this.parse(uri)));
      return true;
    } catch {
      return false;
    }
  }

  async deletePrefix(bucket: string, prefix: string): Promise<void> {
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

export async function createObjectStore(config: Config['storage'], home: string): Promise<ObjectStore> {
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

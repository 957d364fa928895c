// The object store on both back ends: file:// under the data dir, and a real S3-protocol server (moto_server).
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync, readFileSync, mkdirSync, existsSync, symlinkSync, readdirSync } from 'node:fs';
import { Readable } from 'node:stream';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileObjectStore, ObjectOutsideStoreError, S3ObjectStore, objectUri, partSizeFor, type ObjectStore } from '../lib/object-store.js';
import { sha256File, sha256Stream } from '../lib/hash.js';
import { ModelArtifactError, publishFormat } from '../lib/model-artifacts.js';
import { loadConfig } from '../lib/config.js';
import { freePort } from './support/ports.js';

/**
 * `bytes` pseudo-random bytes made as they are read (never held whole), each chunk shown to `seen` with the bytes
 * sent so far; `failAt`: the stream errors once that many bytes went by.
 */
function generated(bytes: number, seen: (chunk: Buffer, sent: number) => unknown, failAt = Infinity): Readable {
  let sent = 0;
  return new Readable({
    read() {
      if (sent >= failAt) return this.destroy(new Error('the source broke off'));
      if (sent >= bytes) return void this.push(null);
      const chunk = randomBytes(Math.min(256 * 1024, bytes - sent));
      sent += chunk.length;
      seen(chunk, sent);
      this.push(chunk);
    },
  });
}

const work = mkdtempSync(join(tmpdir(), 'hanzo-ml-store-'));
let moto: ChildProcess | null = null;
const stores: Record<string, ObjectStore> = {};

beforeAll(async () => {
  stores.file = new FileObjectStore(join(work, 'objects'));
  const bin = loadConfig({ HANZO_ML_HOME: work }).bootstrap.moto_server;
  if (!bin || !existsSync(bin)) throw new Error('moto_server is missing: run scripts/bootstrap.sh --tests');
  const port = await freePort();
  moto = spawn(bin, ['-H', '127.0.0.1', '-p', String(port)], { stdio: 'ignore' });
  const endpoint = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    if (await fetch(endpoint).then(() => true, () => false)) break;
    if (i > 100) throw new Error('moto_server did not start');
    await new Promise((r) => setTimeout(r, 200));
  }
  stores.s3 = await S3ObjectStore.create({ endpoint, access_key: 'test', secret_key: 'test', region: 'us-east-1', buckets: { datasets: 'd', checkpoints: 'c', models: 'm' } });
});
afterAll(() => {
  moto?.kill();
});

describe.each(['file', 's3'])('%s object store', (kind) => {
  it('stores a file and a directory with sizes and SHA-256, and reads them back byte for byte', async () => {
    const store = stores[kind]!;
    const src = join(work, `src-${kind}`);
    mkdirSync(join(src, 'sub'), { recursive: true });
    writeFileSync(join(src, 'a.bin'), Buffer.alloc(3 * 1024 * 1024, 7));
    writeFileSync(join(src, 'sub', 'b.txt'), 'hello');
    const one = await store.putFile('models', 'm/v1/a.bin', join(src, 'a.bin'));
    expect(one.size_bytes).toBe(3 * 1024 * 1024);
    expect(one.sha256).toBe(await sha256File(join(src, 'a.bin')));
    const all = await store.putDirectory('models', 'm/v2', src);
    expect(all.map((o) => o.uri.split('/m/v2/')[1]).sort()).toEqual(['a.bin', 'sub/b.txt']);
    const back = join(work, `back-${kind}.bin`);
    await store.getFile(one.uri, back);
    expect(await sha256File(back)).toBe(one.sha256);
    expect(await store.exists(one.uri)).toBe(true);
    expect(await store.exists(one.uri + '.missing')).toBe(false);
    const b = all.find((o) => o.uri.endsWith('b.txt'))!;
    const chunks: Buffer[] = [];
    for await (const c of await store.read(b.uri)) chunks.push(c as Buffer);
    expect(Buffer.concat(chunks).toString()).toBe('hello');
    await store.deletePrefix('models', 'm/v2');
    expect(await store.exists(b.uri)).toBe(false);
    expect(await store.exists(one.uri)).toBe(true);
    // A single file, by its own key.
    await store.deletePrefix('models', 'm/v1/a.bin');
    expect(await store.exists(one.uri)).toBe(false);
  });

  it('reads an object from a byte offset to its end as it is now, and nothing past it or of an absent object', async () => {
    const store = stores[kind]!;
    const uri = objectUri(store, 'job-logs', 'jobs/o/j/job.log');
    expect(await store.readFrom(uri, 0)).toBeNull();
    await store.putText(uri, 'first line\n');
    await store.putText(uri, 'first line\nsecond é\n');
    const r = (await store.readFrom(uri, 11))!;
    const chunks: Buffer[] = [];
    for await (const c of r.body) chunks.push(c as Buffer);
    expect(Buffer.concat(chunks).toString()).toBe('second é\n');
    expect(r.end).toBe(Buffer.byteLength('first line\nsecond é\n'));
    expect(await store.readFrom(uri, r.end)).toBeNull();
  });

  it('stores a stream as it arrives, with its size and SHA-256, in one PUT or in parts', async () => {
    const store = stores[kind]!;
    // 20 MiB crosses the 8 MiB part size of a streamed S3 upload (three parts); 5 bytes is a single PUT.
    for (const [key, bytes] of [['streams/small.bin', 5], ['streams/large.bin', 20 * 1024 * 1024 + 3]] as const) {
      const expected = createHash('sha256');
      const stored = await store.putStream('datasets', key, generated(bytes, (c) => expected.update(c)));
      expect(stored).toEqual({ uri: objectUri(store, 'datasets', key), size_bytes: bytes, sha256: expected.digest('hex') });
      expect(await sha256Stream(await store.read(stored.uri))).toBe(stored.sha256);
    }
  });

  it('leaves no object (and no parts or temporary file) when the stream fails or is aborted midway', async () => {
    const store = stores[kind]!;
    const key = 'streams/broken.bin';
    const uri = objectUri(store, 'datasets', key);
    const failing = generated(20 * 1024 * 1024, () => undefined, 12 * 1024 * 1024);
    await expect(store.putStream('datasets', key, failing)).rejects.toThrow(/the source broke off/);
    expect(await store.exists(uri)).toBe(false);
    const stop = new AbortController();
    const slow = generated(20 * 1024 * 1024, (_c, sent) => sent > 10 * 1024 * 1024 && stop.abort(new Error('the client went away')));
    await expect(store.putStream('datasets', key, slow, { signal: stop.signal })).rejects.toThrow(/the client went away/);
    expect(await store.exists(uri)).toBe(false);
    // Aborted before the first byte: the temporary file is still being opened when the write is given up.
    for (let i = 0; i < 20; i++) {
      const early = new AbortController();
      early.abort(new Error('refused at once'));
      await expect(store.putStream('datasets', key, generated(1024, () => undefined), { signal: early.signal })).rejects.toThrow(/refused at once/);
    }
    expect(await store.exists(uri)).toBe(false);
    expect(await store.list(objectUri(store, 'datasets', 'streams'))).not.toContainEqual(expect.objectContaining({ uri }));
    if (store instanceof S3ObjectStore) {
      const open = await store.client.send(new (await import('@aws-sdk/client-s3')).ListMultipartUploadsCommand({ Bucket: 'datasets' }));
      expect(open.Uploads ?? []).toEqual([]);
    } else {
      expect(readdirSync(join(work, 'objects', 'datasets'), { recursive: true }).filter((f) => /broken|\.tmp-/.test(String(f)))).toEqual([]);
    }
  });
});

describe('multipart copies', () => {
  it('copy in parts of the threshold, grown only when an object would need more than 10,000 parts', () => {
    const MiB = 1024 * 1024;
    expect(partSizeFor(12 * MiB, 5 * MiB)).toBe(5 * MiB);
    expect(partSizeFor(10 * 1024 * MiB, 64 * MiB)).toBe(64 * MiB);
    const huge = 1024 * 1024 * MiB; // 1 TiB in 5 MiB parts would be 209,716 parts
    expect(partSizeFor(huge, 5 * MiB)).toBe(Math.ceil(huge / 10_000));
    expect(Math.ceil(huge / partSizeFor(huge, 5 * MiB))).toBeLessThanOrEqual(10_000);
  });
});

describe('file object store', () => {
  it('refuses keys that climb out of the bucket, however they are encoded', async () => {
    writeFileSync(join(work, 'x'), 'x');
    for (const key of ['../../etc/x', '%2e%2e/%2e%2e/etc/x', '%252e%252e/x', 'a/..%2f..%2fx', '\u2024\u2024/x'])
      await expect(stores.file!.putFile('models', key, join(work, 'x')), key).rejects.toThrow(ObjectOutsideStoreError);
    expect(readFileSync(join(work, 'x'), 'utf8')).toBe('x');
  });

  it('keeps keys made from names with a bare "%" (a model named "100% lora")', async () => {
    writeFileSync(join(work, 'p'), 'p');
    const put = await stores.file!.putFile('models', 'dev/100% lora/v1/p.txt', join(work, 'p'));
    expect(await stores.file!.readText(put.uri)).toBe('p');
  });

  it('refuses URIs whose path, once decoded, lies outside its root', async () => {
    const store = stores.file!;
    const secret = join(work, 'secret.txt');
    writeFileSync(secret, 'secret');
    const outside = pathToFileURL(secret).href;
    const climbing = `${pathToFileURL(join(work, 'objects', 'models')).href}/${'%2e%2e/'.repeat(2)}secret.txt`;
    for (const uri of [outside, climbing]) {
      await expect(store.read(uri), uri).rejects.toThrow(ObjectOutsideStoreError);
      await expect(store.readText(uri), uri).rejects.toThrow(ObjectOutsideStoreError);
      await expect(store.exists(uri), uri).rejects.toThrow(ObjectOutsideStoreError);
      await expect(store.copy(uri, 'models', 'stolen.txt'), uri).rejects.toThrow(ObjectOutsideStoreError);
      await expect(store.putText(uri, 'overwritten'), uri).rejects.toThrow(ObjectOutsideStoreError);
      await expect(store.deleteObject(uri), uri).rejects.toThrow(ObjectOutsideStoreError);
    }
    expect(readFileSync(secret, 'utf8')).toBe('secret');
    expect(await store.exists(pathToFileURL(join(work, 'objects', 'models', 'stolen.txt')).href)).toBe(false);
  });

  it('refuses a symbolic link planted inside the store that leads outside, on read, copy, list and write', async () => {
    const store = stores.file!;
    const outsideDir = join(work, 'outside');
    mkdirSync(outsideDir, { recursive: true });
    writeFileSync(join(outsideDir, 'hostname'), 'the host');
    const planted = join(work, 'objects', 'models', 'planted');
    mkdirSync(planted, { recursive: true });
    symlinkSync(join(outsideDir, 'hostname'), join(planted, 'file-link'));
    symlinkSync(outsideDir, join(planted, 'dir-link'));
    const fileLink = pathToFileURL(join(planted, 'file-link')).href;
    const dirLink = pathToFileURL(join(planted, 'dir-link')).href;
    await expect(store.read(fileLink)).rejects.toThrow(/symbolic link/);
    await expect(store.readText(fileLink)).rejects.toThrow(ObjectOutsideStoreError);
    await expect(store.copy(fileLink, 'models', 'copied')).rejects.toThrow(ObjectOutsideStoreError);
    await expect(store.list(dirLink)).rejects.toThrow(ObjectOutsideStoreError);
    await expect(store.readText(`${dirLink}/hostname`)).rejects.toThrow(ObjectOutsideStoreError);
    // Writes through the linked directory would land outside: refused, and nothing appears there.
    writeFileSync(join(work, 'y'), 'y');
    await expect(store.putFile('models', 'planted/dir-link/written', join(work, 'y'))).rejects.toThrow(ObjectOutsideStoreError);
    await expect(store.putText(`${dirLink}/written.txt`, 'y')).rejects.toThrow(ObjectOutsideStoreError);
    await expect(store.deletePrefix('models', 'planted/dir-link')).rejects.toThrow(ObjectOutsideStoreError);
    expect(existsSync(join(outsideDir, 'written'))).toBe(false);
    expect(existsSync(join(outsideDir, 'written.txt'))).toBe(false);
    expect(readFileSync(join(outsideDir, 'hostname'), 'utf8')).toBe('the host');
    // Listing the directory that holds the links lists no file through them.
    const listed = await store.list(pathToFileURL(planted).href);
    expect(listed).toEqual([]);
  });

  it('fails a model registration for good when a source it copies has become a link that leads outside', async () => {
    const store = stores.file!;
    writeFileSync(join(work, 'outside-weights'), 'not ours');
    const dir = join(work, 'objects', 'checkpoints', 'swapped');
    mkdirSync(dir, { recursive: true });
    symlinkSync(join(work, 'outside-weights'), join(dir, 'model.safetensors'));
    const files = [{ uri: pathToFileURL(join(dir, 'model.safetensors')).href, path: 'model.safetensors' }];
    const description = { architecture: null, base_model: null, method: null };
    await expect(publishFormat(store, { bucket: 'models', prefix: 'dev/m/v1', format: 'safetensors', files, model: 'm', version: 1, description })).rejects.toThrow(ModelArtifactError);
    expect(existsSync(join(work, 'objects', 'models', 'dev', 'm', 'v1', 'safetensors', 'model.safetensors'))).toBe(false);
  });

  it('still serves objects inside its root, reached through a symbolic link that stays inside', async () => {
    const store = stores.file!;
    writeFileSync(join(work, 'z'), 'inside');
    const put = await store.putFile('models', 'real/z.txt', join(work, 'z'));
    symlinkSync(join(work, 'objects', 'models', 'real'), join(work, 'objects', 'models', 'alias'));
    expect(await store.readText(pathToFileURL(join(work, 'objects', 'models', 'alias', 'z.txt')).href)).toBe('inside');
    expect(await store.readText(put.uri)).toBe('inside');
  });
});

describe('s3 object store', () => {
  it('keeps keys free of ".." after decoding, on write, read, copy and list', async () => {
    const store = stores.s3!;
    writeFileSync(join(work, 'k'), 'k');
    for (const key of ['a/../b', 'a/%2e%2e/b', 'a/%252e%252e/b', 'a/..%2fb']) {
      await expect(store.putFile('m', key, join(work, 'k')), key).rejects.toThrow(ObjectOutsideStoreError);
      await expect(store.read(`s3://m/${key}`), key).rejects.toThrow(ObjectOutsideStoreError);
      await expect(store.copy('s3://m/x', 'm', key), key).rejects.toThrow(ObjectOutsideStoreError);
      await expect(store.list(`s3://m/${key}`), key).rejects.toThrow(ObjectOutsideStoreError);
    }
  });
});

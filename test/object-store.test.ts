// The object store on both back ends: file:// under the data dir, and a real S3-protocol server (moto_server).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync, readFileSync, mkdirSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileObjectStore, S3ObjectStore, partSizeFor, type ObjectStore } from '../lib/object-store.js';
import { sha256File } from '../lib/hash.js';
import { loadConfig } from '../lib/config.js';
import { freePort } from './support/ports.js';

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
  it('refuses keys that climb out of the bucket', async () => {
    writeFileSync(join(work, 'x'), 'x');
    await expect(stores.file!.putFile('models', '../../etc/x', join(work, 'x'))).rejects.toThrow(/may not contain/);
    expect(readFileSync(join(work, 'x'), 'utf8')).toBe('x');
  });
});

// POST /v1/datasets streams the request body once: into the object store under the version's raw key and through
// the structural checks as it arrives. A few hundred MB made on the fly go through with the API process's memory
// bounded and nothing under tmp/uploads; a bad line deep in a large body answers 400 naming it and leaves no object
// and no row; a client that goes away mid-body leaves nothing either; and the same holds on an S3 store (moto).
// The worker is off: these are the request's own checks, not the preparation job's.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { startMoto, type Moto } from './support/moto.js';
import { createObjectStore, listFiles, type ObjectStore } from '../lib/object-store.js';
import { loadConfig } from '../lib/config.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const DEV = { authorization: 'Bearer hanzo-ml-dev-token' };
const MB = 1024 * 1024;

/** The n-th chat record, padded so a line is about 1 KB (fewer lines per MB: the checks' cost is per line). */
const line = (n: number): string =>
  JSON.stringify({ messages: [{ role: 'user', content: `question ${n} ${'q'.repeat(400)}` }, { role: 'assistant', content: `answer ${n} ${'a'.repeat(500)}` }] }) + '\n';

/**
 * JSONL of at least `bytes` bytes made as it is read (never held whole), hashed on the way; line `badLine` (1-based)
 * has a message whose content is not a string. `onRead` sees the bytes sent so far.
 */
function jsonlBody(bytes: number, o: { badLine?: number; onRead?: (sent: number) => void } = {}): { stream: ReadableStream<Uint8Array>; sha256: () => string; sent: () => number } {
  const hash = createHash('sha256');
  let sent = 0;
  let n = 0;
  const node = new Readable({
    read() {
      if (sent >= bytes) return void this.push(null);
      const lines: string[] = [];
      for (let i = 0; i < 64; i++) {
        n++;
        lines.push(n === o.badLine ? '{"messages": [{"role": "user", "content": 42}]}\n' : line(n));
      }
      const chunk = Buffer.from(lines.join(''));
      hash.update(chunk);
      sent += chunk.length;
      o.onRead?.(sent);
      this.push(chunk);
    },
  });
  let digest: string | null = null;
  return { stream: Readable.toWeb(node) as ReadableStream<Uint8Array>, sha256: () => (digest ??= hash.digest('hex')), sent: () => sent };
}

async function post(stack: TestStack, query: string, body: ReadableStream<Uint8Array> | string, signal?: AbortSignal): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${stack.runtime.apiUrl}/v1/datasets?${query}`, { method: 'POST', headers: { ...DEV, 'x-filename': 'big.jsonl' }, body, duplex: 'half', signal } as RequestInit);
  return { status: res.status, body: (await res.json()) as Json };
}

/**
 * The objects of the datasets bucket whose key names the dataset (every version's prefix holds its name); on the
 * file store every file, a writer's temporary one (at the top of the bucket) included.
 */
async function objectsOf(store: ObjectStore, stack: TestStack, name: string): Promise<string[]> {
  const bucket = stack.loaded.config.storage.buckets.datasets;
  if (stack.loaded.config.storage.endpoint) return (await store.list(`s3://${bucket}`)).map((o) => o.uri).filter((u) => u.includes(`/${name}/`));
  const dir = join(stack.home, 'objects', bucket);
  return existsSync(dir) ? (await listFiles(dir)).map((f) => pathToFileURL(f).href).filter((u) => u.includes(`/${name}/`) || /\/\.tmp-[^/]*$/.test(u)) : [];
}

/** Every version of the organization, whatever its status (the Files API lists them all). */
async function versionsOf(stack: TestStack, name: string): Promise<Json[]> {
  const res = await stack.api<{ data: Json[] }>('GET', '/v1/files?limit=100');
  return res.body.data.filter((f) => f.dataset.name === name);
}

const uploadsDir = (stack: TestStack): string[] => {
  const dir = join(stack.home, 'tmp', 'uploads');
  return existsSync(dir) ? readdirSync(dir) : [];
};

/** Waits until `check` holds (a request the client left is still being wound down by the server). */
async function eventually(check: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${what} did not happen`);
}

describe.each([
  ['file', 300 * MB],
  ['s3', 40 * MB],
] as const)('streamed uploads on the %s store', (kind, largeBytes) => {
  let stack: TestStack;
  let moto: Moto | null = null;
  let store: ObjectStore;

  beforeAll(async () => {
    moto = kind === 's3' ? await startMoto(loadConfig({}).bootstrap.moto_server) : null;
    stack = await startTestStack(moto ? moto.env : {}, { worker: false });
    store = await createObjectStore(stack.loaded.config.storage, stack.home);
  }, 180_000);
  afterAll(async () => {
    await stack?.stop();
    moto?.stop();
  }, 60_000);

  it(`takes ${largeBytes / MB} MB made on the fly with the process's memory bounded and no temporary file, storing the bytes sent`, async () => {
    const name = `large-${kind}`;
    global.gc?.();
    const before = process.memoryUsage().rss;
    let peak = before;
    const tmpSeen = new Set<string>();
    const body = jsonlBody(largeBytes, {
      onRead: () => {
        peak = Math.max(peak, process.memoryUsage().rss);
        for (const f of uploadsDir(stack)) tmpSeen.add(f);
      },
    });
    const res = await post(stack, `name=${name}&format=jsonl`, body.stream);
    expect(res.status, JSON.stringify(res.body).slice(0, 500)).toBe(201);
    expect(res.body).toMatchObject({ name, status: 'preparing', size_bytes: body.sent(), sha256: body.sha256() });
    expect(res.body.num_records).toBeGreaterThan(largeBytes / 1100);
    // A generous bound: the body is 300 MB on the file store; a buffered upload would grow by at least that.
    console.info(`${kind} store: ${body.sent()} bytes uploaded, RSS grew by ${((peak - before) / MB).toFixed(1)} MB at most`);
    expect((peak - before) / MB).toBeLessThan(150);
    expect([...tmpSeen]).toEqual([]);
    const [uri] = await objectsOf(store, stack, name);
    expect(uri).toMatch(/\/raw\/source\.jsonl$/);
    const hash = createHash('sha256');
    let size = 0;
    for await (const c of await store.read(uri!)) {
      hash.update(c as Buffer);
      size += (c as Buffer).length;
    }
    expect({ size, sha256: hash.digest('hex') }).toEqual({ size: body.sent(), sha256: body.sha256() });
  }, 600_000);

  it('answers a bad line deep in a large body 400 naming the line, and leaves no object and no row', async () => {
    const name = `bad-line-${kind}`;
    const badLine = 20_000; // about 20 MB in: past the first S3 parts
    const res = await post(stack, `name=${name}&format=jsonl`, jsonlBody(30 * MB, { badLine }).stream);
    expect(res.status).toBe(400);
    expect(res.body.issues[0]).toMatchObject({ file: 'big.jsonl', line: badLine, expected: expect.any(String) });
    expect(await objectsOf(store, stack, name)).toEqual([]);
    expect(await versionsOf(stack, name)).toEqual([]);
    expect(uploadsDir(stack)).toEqual([]);
  }, 300_000);

  it('leaves no object and no row when the client goes away mid-body', async () => {
    const name = `gone-${kind}`;
    const stop = new AbortController();
    const body = jsonlBody(60 * MB, { onRead: (sent) => sent > 20 * MB && stop.abort() });
    await expect(post(stack, `name=${name}&format=jsonl`, body.stream, stop.signal)).rejects.toThrow();
    await eventually(async () => (await objectsOf(store, stack, name)).length === 0, 'the raw object removed');
    // Once the request has wound down (a row would have been written by then), nothing is left.
    await new Promise((r) => setTimeout(r, 2000));
    expect(await objectsOf(store, stack, name)).toEqual([]);
    expect(await versionsOf(stack, name)).toEqual([]);
    if (moto) {
      const { S3Client, ListMultipartUploadsCommand } = await import('@aws-sdk/client-s3');
      const client = new S3Client({ endpoint: moto.endpoint, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId: 'test', secretAccessKey: 'test' } });
      const open = await client.send(new ListMultipartUploadsCommand({ Bucket: stack.loaded.config.storage.buckets.datasets }));
      expect(open.Uploads ?? []).toEqual([]);
    }
  }, 300_000);

  it('refuses a file whose first bytes are not the format it claims, storing nothing', async () => {
    const name = `not-parquet-${kind}`;
    const res = await post(stack, `name=${name}&format=parquet`, 'this is not parquet at all');
    expect(res.status).toBe(400);
    expect(res.body.issues[0].message).toMatch(/expected a Parquet file \(starting PAR1\), found bytes 74686973/);
    expect(await objectsOf(store, stack, name)).toEqual([]);
    expect(await versionsOf(stack, name)).toEqual([]);
  }, 60_000);
});

// GET /v1/datasets/{id}/download with the S3 object store end to end, on versitygw: a real S3 server that, unlike
// moto_server, verifies query-string SigV4 signatures and X-Amz-Expires. The API answers a URL pre-signed for
// storage.public_endpoint (here `localhost`, while the store itself talks to 127.0.0.1); it is fetched as a user
// would, without any other credential, and the server refuses it with one character of its signature changed, on
// another host, or once it has expired. Another organization's download is a 404 in test/support/tenancy-cases.ts.
import { createHash } from 'node:crypto';
import { S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { presignS3Get } from '../datasets/downloads.js';
import { startVersitygw, type Versitygw } from './support/versitygw.js';
import { startTestStack, type TestStack } from './support/stack.js';
import { testConfig, DEV_TOKEN } from './support/config.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const chat = (i: number) => JSON.stringify({ messages: [{ role: 'user', content: `What does plan ${i} cost?` }, { role: 'assistant', content: `Plan ${i} costs ${i * 3} dollars a month.` }] });

/** One character of the hex signature changed: a URL that differs from the signed one in nothing else. */
function tamperSignature(url: URL): URL {
  const out = new URL(url);
  const signature = out.searchParams.get('X-Amz-Signature')!;
  out.searchParams.set('X-Amz-Signature', `${signature.slice(0, -1)}${signature.endsWith('0') ? '1' : '0'}`);
  return out;
}

describe('dataset downloads from S3', () => {
  let gw: Versitygw;
  let stack: TestStack;
  let publicEndpoint: string;
  let version: Json;
  let answer: { status: number; body: Json };

  beforeAll(async () => {
    gw = await startVersitygw(testConfig().bootstrap.versitygw);
    publicEndpoint = gw.endpoint.replace('127.0.0.1', 'localhost');
    stack = await startTestStack({ ...gw.env, HANZO_ML_STORAGE_PUBLIC_ENDPOINT: publicEndpoint });
    const res = await fetch(`${stack.runtime.apiUrl}/v1/datasets?name=s3-download&format=jsonl&wait=true`, { method: 'POST', headers: { authorization: `Bearer ${DEV_TOKEN}` }, body: Array.from({ length: 50 }, (_, i) => chat(i)).join('\n') });
    version = (await res.json()) as Json;
    expect(res.status, JSON.stringify(version)).toBe(201);
    expect(version.splits.train.path).toMatch(/^s3:\/\//);
    answer = await stack.api<Json>('GET', `/v1/datasets/${version.id}/download?split=train`);
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
  }, 180_000);

  afterAll(async () => {
    await stack?.stop();
    gw?.stop();
  });

  it("answers a pre-signed URL on storage.public_endpoint that downloads the split's bytes, with its expiry", async () => {
    const url = new URL(answer.body.url as string);
    expect(url.origin).toBe(publicEndpoint);
    expect(url.searchParams.get('X-Amz-Signature')).toMatch(/^[0-9a-f]{64}$/);
    // X-Amz-Date + X-Amz-Expires is the expires_at the API reports.
    const signedAt = Date.parse(url.searchParams.get('X-Amz-Date')!.replace(/^(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z$/, '$1-$2-$3T$4:$5:$6Z'));
    const expiresAt = signedAt + Number(url.searchParams.get('X-Amz-Expires')) * 1000;
    expect(expiresAt).toBe(Date.parse(answer.body.expires_at as string));
    expect(expiresAt).toBeGreaterThan(Date.now());

    // Fetched as a user would: no bearer token, no S3 credentials.
    const download = await fetch(url);
    expect(download.status).toBe(200);
    const bytes = Buffer.from(await download.arrayBuffer());
    const sha256 = createHash('sha256').update(bytes).digest('hex');
    expect(sha256).toBe(answer.body.sha256);
    expect(sha256).toBe(version.splits.train.sha256);
    expect(bytes.length).toBe(answer.body.size_bytes);
    expect(bytes.toString('utf8').split('\n').filter(Boolean)).toHaveLength(version.splits.train.num_records);
  });

  it('is refused (403) with one character of its signature changed, or on a host it was not signed for', async () => {
    const url = new URL(answer.body.url as string);
    const tampered = await fetch(tamperSignature(url));
    expect(tampered.status).toBe(403);
    expect(await tampered.text()).toMatch(/SignatureDoesNotMatch/);
    // The store's own address (127.0.0.1) reaches the same server, but the URL was signed for `localhost`.
    const otherHost = new URL(url);
    otherHost.hostname = '127.0.0.1';
    expect((await fetch(otherHost)).status).toBe(403);
    expect((await fetch(url)).status).toBe(200);
  });

  it('is refused (403) once its expiry has passed', async () => {
    // Signed by the API's own code, with the store's credentials, at a chosen time: an hour ago, valid for a minute.
    const storage = stack.loaded.config.storage;
    const client = new S3Client({ endpoint: storage.endpoint, region: storage.region, forcePathStyle: true, credentials: gw.credentials });
    const sign = (at: Date) => presignS3Get(client, storage, version.splits.train.path as string, 60, at);
    const expired = await fetch(await sign(new Date(Date.now() - 3_600_000)));
    expect(expired.status).toBe(403);
    expect(await expired.text()).toMatch(/expired/i);
    // The same signing now is accepted: what the server refused was the expiry, not the signature.
    const fresh = await fetch(await sign(new Date()));
    expect(fresh.status).toBe(200);
    expect(createHash('sha256').update(Buffer.from(await fresh.arrayBuffer())).digest('hex')).toBe(version.splits.train.sha256);
  });
});

// GET /v1/datasets/{id}/download with the S3 object store end to end: a real S3 server (moto_server), the API
// answering a pre-signed URL against storage.public_endpoint (here `localhost`, while the store itself talks to
// 127.0.0.1), and that URL fetched as a user would, without any other credential.
// moto_server does not check query-string signatures or X-Amz-Expires (moto 5.2.5 verifies only the Authorization
// header), so whether the URL's signature is right is proven against AWS's own example in
// test/datasets-signing.test.ts; refusal of an expired URL by the server cannot be shown with it. Another
// organization's download is a 404 in test/support/tenancy-cases.ts.
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMoto, type Moto } from './support/moto.js';
import { startTestStack, type TestStack } from './support/stack.js';
import { testConfig, DEV_TOKEN } from './support/config.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const chat = (i: number) => JSON.stringify({ messages: [{ role: 'user', content: `What does plan ${i} cost?` }, { role: 'assistant', content: `Plan ${i} costs ${i * 3} dollars a month.` }] });

describe('dataset downloads from S3', () => {
  let moto: Moto;
  let stack: TestStack;
  let publicEndpoint: string;

  beforeAll(async () => {
    moto = await startMoto(testConfig().bootstrap.moto_server);
    publicEndpoint = moto.endpoint.replace('127.0.0.1', 'localhost');
    stack = await startTestStack({ ...moto.env, HANZO_ML_STORAGE_PUBLIC_ENDPOINT: publicEndpoint });
  }, 180_000);

  afterAll(async () => {
    await stack?.stop();
    moto?.stop();
  });

  it("answers a pre-signed URL on storage.public_endpoint that downloads the split's bytes, with its expiry", async () => {
    const res = await fetch(`${stack.runtime.apiUrl}/v1/datasets?name=s3-download&format=jsonl&wait=true`, { method: 'POST', headers: { authorization: `Bearer ${DEV_TOKEN}` }, body: Array.from({ length: 50 }, (_, i) => chat(i)).join('\n') });
    const version = (await res.json()) as Json;
    expect(res.status, JSON.stringify(version)).toBe(201);
    expect(version.splits.train.path).toMatch(/^s3:\/\//);

    const before = Date.now();
    const answer = await stack.api<Json>('GET', `/v1/datasets/${version.id}/download?split=train`);
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    const url = new URL(answer.body.url as string);
    expect(url.origin).toBe(publicEndpoint);
    expect(url.searchParams.get('X-Amz-Signature')).toMatch(/^[0-9a-f]{64}$/);
    // X-Amz-Date + X-Amz-Expires is the expires_at the API reports.
    const signedAt = Date.parse(url.searchParams.get('X-Amz-Date')!.replace(/^(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z$/, '$1-$2-$3T$4:$5:$6Z'));
    expect(signedAt).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000 - 1000);
    const expiresAt = signedAt + Number(url.searchParams.get('X-Amz-Expires')) * 1000;
    expect(Math.abs(expiresAt - Date.parse(answer.body.expires_at as string))).toBeLessThanOrEqual(2000);
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
});

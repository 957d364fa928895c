// Reading dataset versions back on a real stack (file store, no worker: no job runs here but an upload's
// preparation, for which a worker runs beside the API while the upload waits for it): a split's first
// records, a signed download URL served by the API and refused once changed or expired, the list's name and tag
// filters, the derive request's validation and its queued job, and another organization's version as "not found".
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, withWorker, type TestStack } from './support/stack.js';
import { listAudit, seedDevOrganization } from '../db/repo/auth.js';

let stack: TestStack;
const OTHER = { authorization: 'Bearer token-of-another-org' };
const DEV = { authorization: 'Bearer hanzo-ml-dev-token' };
const chat = (q: string, a: string) => JSON.stringify({ messages: [{ role: 'user', content: q }, { role: 'assistant', content: a }] });
const LINES = Array.from({ length: 40 }, (_, i) => chat(`question ${i}?`, `answer ${i}.`));

async function upload(name: string, lines: string[], tags = '', headers: Record<string, string> = DEV): Promise<Record<string, any>> { // eslint-disable-line @typescript-eslint/no-explicit-any
  const res = await withWorker(stack, () => fetch(`${stack.runtime.apiUrl}/v1/datasets?name=${name}&format=jsonl&wait=true${tags ? `&tags=${tags}` : ''}`, { method: 'POST', headers, body: lines.join('\n') }));
  expect(res.status).toBe(201);
  return (await res.json()) as Record<string, unknown>;
}

async function get(path: string, headers: Record<string, string> = DEV): Promise<{ status: number; body: Record<string, any> }> { // eslint-disable-line @typescript-eslint/no-explicit-any
  const res = await fetch(`${stack.runtime.apiUrl}${path}`, { headers });
  const text = await res.text();
  return { status: res.status, body: text.startsWith('{') ? JSON.parse(text) : { text } };
}

let ds: Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

beforeAll(async () => {
  stack = await startTestStack({}, { worker: false });
  await seedDevOrganization(stack.runtime.catalogue.db, 'other-org', 'token-of-another-org');
  ds = await upload('read-ds', LINES, 'support,en');
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

describe('preview', () => {
  it('answers the first n records of the split, in the order of its file, and audits it as dataset.preview', async () => {
    const res = await get(`/v1/datasets/${ds.id}/preview?split=train&n=3`);
    expect(res.status).toBe(200);
    expect(res.body.records).toHaveLength(3);
    const file = await get(`/v1/datasets/${ds.id}/download?split=train`);
    const text = (await (await fetch(file.body.url)).text()).trim().split('\n');
    expect(res.body.records).toEqual(text.slice(0, 3).map((l) => JSON.parse(l)));
    const trail = await listAudit(stack.runtime.catalogue.db, stack.loaded.config.auth.dev_organization, { action: 'dataset.preview', limit: 10 });
    expect(trail.some((r) => r.target === ds.id)).toBe(true);
  });

  it('refuses n above 100 and an unknown split, naming the parameter', async () => {
    const big = await get(`/v1/datasets/${ds.id}/preview?n=101`);
    expect(big.status).toBe(400);
    expect(big.body.message).toMatch(/n/);
    const split = await get(`/v1/datasets/${ds.id}/preview?split=holdout`);
    expect(split.status).toBe(400);
    expect(split.body.message).toMatch(/split/);
  });
});

describe('download', () => {
  it('hands out an expiring URL that serves the split file without a token, matching its sha256', async () => {
    const res = await get(`/v1/datasets/${ds.id}/download?split=validation`);
    expect(res.status).toBe(200);
    expect(Date.parse(res.body.expires_at) - Date.now()).toBeGreaterThan(60_000);
    const file = await fetch(res.body.url);
    expect(file.status).toBe(200);
    const bytes = Buffer.from(await file.arrayBuffer());
    const { createHash } = await import('node:crypto');
    expect(createHash('sha256').update(bytes).digest('hex')).toBe(ds.splits.validation.sha256);
    expect(bytes.length).toBe(ds.splits.validation.size_bytes);
  });

  it('refuses a URL whose split, signature or expiry was changed, and an expired one', async () => {
    const { url } = (await get(`/v1/datasets/${ds.id}/download?split=train`)).body as { url: string };
    const u = new URL(url);
    const otherSplit = new URL(url.replace('/train?', '/test?'));
    const tampered = new URL(url);
    tampered.searchParams.set('signature', u.searchParams.get('signature')!.replace(/^./, (c) => (c === '0' ? '1' : '0')));
    const extended = new URL(url);
    extended.searchParams.set('expires', String(Number(u.searchParams.get('expires')) + 3600));
    for (const bad of [otherSplit, tampered, extended]) {
      const res = await fetch(bad);
      expect(res.status).toBe(403);
      expect(((await res.json()) as { message: string }).message).toMatch(/signature does not match/);
    }
    // A URL signed with the installation's key for a time already past.
    const { downloadSigningKey, signFileDownload } = await import('../datasets/downloads.js');
    const past = Math.floor(Date.now() / 1000) - 5;
    const expired = await fetch(`${u.origin}${u.pathname}?${signFileDownload(await downloadSigningKey(stack.home), ds.id, 'train', past)}`);
    expect(expired.status).toBe(403);
    expect(((await expired.json()) as { message: string }).message).toMatch(/expired/);
  });
});

describe('list filters', () => {
  it('filters by name and by any of the given tags', async () => {
    await upload('read-other', LINES.slice(0, 10), 'legal');
    await upload('read-untagged', LINES.slice(0, 10));
    const names = async (q: string) => ((await get(`/v1/datasets?${q}`)).body.datasets as { name: string }[]).map((d) => d.name).sort();
    expect(await names('tags=support')).toEqual(['read-ds']);
    expect(await names('tags=legal,support')).toEqual(['read-ds', 'read-other']);
    expect(await names('tags=nothing')).toEqual([]);
    expect(await names('name=read-other')).toEqual(['read-other']);
    expect(await names('name=read-other&tags=support')).toEqual([]);
  });
});

describe('derive requests', () => {
  const derive = (id: string, body: unknown, headers: Record<string, string> = DEV) =>
    fetch(`${stack.runtime.apiUrl}/v1/datasets/${id}/derive`, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify(body) }).then(async (r) => ({ status: r.status, body: (await r.json()) as Record<string, any> })); // eslint-disable-line @typescript-eslint/no-explicit-any

  it.each([
    [{ operations: [{ op: 'sharpen' }] }, /operations\.0/],
    [{ operations: [{ op: 'filter', min_tokens: 50, max_tokens: 10 }] }, /operations\.0.*min_tokens must not exceed max_tokens/],
    [{ operations: [{ op: 'filter', languages: ['eng'] }] }, /operations\.0\.languages\.0.*ISO 639-1/],
    [{ operations: [] }, /operations/],
    [{ operations: [{ op: 'dedup_exact' }], colour: 'red' }, /colour/],
  ])('refuses a bad body %j with a 400 naming the field', async (body, message) => {
    const res = await derive(ds.id, body);
    expect(res.status).toBe(400);
    expect(res.body.error_code).toBe('INVALID_PARAMETER_VALUE');
    expect(res.body.message).toMatch(message);
  });

  it('accepts a derive with 202, lists its job as data_preparation under dataset:<id>, and the version is 404 until stored', async () => {
    const res = await derive(ds.id, { operations: [{ op: 'dedup_exact' }, { op: 'filter', max_tokens: 512 }], tags: ['clean'] });
    expect(res.status).toBe(202);
    const jobs = await get(`/v1/jobs?parent=dataset:${ds.id}`);
    expect(jobs.status).toBe(200);
    const job = (jobs.body.jobs as { id: string; type: string; parent: string; status: string }[]).find((j) => j.id === res.body.job_id);
    expect(job).toMatchObject({ type: 'data_preparation', parent: `dataset:${ds.id}`, status: 'queued' });
    expect((await get(`/v1/datasets/${res.body.dataset_id}`)).status).toBe(404);
  });
});

describe("another organization's dataset", () => {
  it('is not found for preview, download and derive, and its list shows none of it', async () => {
    for (const path of [`/v1/datasets/${ds.id}/preview`, `/v1/datasets/${ds.id}/download`]) {
      const res = await get(path, OTHER);
      expect(res.status).toBe(404);
      expect(res.body.error_code).toBe('RESOURCE_DOES_NOT_EXIST');
    }
    const derive = await fetch(`${stack.runtime.apiUrl}/v1/datasets/${ds.id}/derive`, { method: 'POST', headers: { ...OTHER, 'content-type': 'application/json' }, body: JSON.stringify({ operations: [{ op: 'dedup_exact' }] }) });
    expect(derive.status).toBe(404);
    expect((await get('/v1/datasets?tags=support', OTHER)).body.datasets).toEqual([]);
  });
});

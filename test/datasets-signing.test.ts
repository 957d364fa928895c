// Download URL signing without a stack: what the S3 pre-signer produces (the endpoint users reach, path-style, the
// key's encoding, the expiry, the session token), the file store's HMAC check, and the configuration that would sign
// for nothing. A real S3 server accepting the URL, and refusing a changed or expired one, is
// test/datasets-download-s3.test.ts.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { S3Client } from '@aws-sdk/client-s3';
import { describe, expect, it } from 'vitest';
import { checkFileDownload, downloadSigningKey, presignS3Get, signFileDownload } from '../datasets/downloads.js';
import { ConfigError, loadConfig } from '../lib/config.js';

// The store's client as lib/object-store.ts makes it (it never sends here: signing is local).
const storeClient = (sessionToken?: string) =>
  new S3Client({ endpoint: 'http://minio.internal:9000', region: 'eu-west-1', forcePathStyle: true, credentials: { accessKeyId: 'AKIAIOSFODNN7EXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', sessionToken } });
const storage = { endpoint: 'http://minio.internal:9000', public_endpoint: 'https://files.example.com', region: 'eu-west-1' } as never;

describe('S3 pre-signed URLs', () => {
  it('sign for storage.public_endpoint, path-style, with the expiry counted from the signing time', async () => {
    const url = new URL(await presignS3Get(storeClient(), storage, 's3://hanzo-ml-datasets/org-1/ds/v1/train.jsonl', 900, new Date('2026-03-04T05:06:07.890Z')));
    expect(url.origin).toBe('https://files.example.com');
    expect(url.pathname).toBe('/hanzo-ml-datasets/org-1/ds/v1/train.jsonl');
    expect(url.searchParams.get('X-Amz-Algorithm')).toBe('AWS4-HMAC-SHA256');
    expect(url.searchParams.get('X-Amz-Date')).toBe('20260304T050607Z');
    expect(url.searchParams.get('X-Amz-Expires')).toBe('900');
    expect(url.searchParams.get('X-Amz-Credential')).toBe('AKIAIOSFODNN7EXAMPLE/20260304/eu-west-1/s3/aws4_request');
    expect(url.searchParams.get('X-Amz-SignedHeaders')).toBe('host');
    expect(url.searchParams.get('X-Amz-Signature')).toMatch(/^[0-9a-f]{64}$/);
    expect(url.searchParams.has('X-Amz-Security-Token')).toBe(false);
  });

  it('encode spaces and non-ASCII characters of the key as UTF-8 percent-escapes, keeping its slashes', async () => {
    const url = await presignS3Get(storeClient(), storage, 's3://hanzo-ml-datasets/org 1/ds/vé/train 😀+x.jsonl', 900);
    expect(new URL(url).pathname).toBe('/hanzo-ml-datasets/org%201/ds/v%C3%A9/train%20%F0%9F%98%80%2Bx.jsonl');
  });

  it('carry the session token of temporary credentials, and sign for storage.endpoint when no public one is set', async () => {
    const client = storeClient('tok/en');
    const url = new URL(await presignS3Get(client, storage, 's3://b/k', 60));
    expect(url.searchParams.get('X-Amz-Security-Token')).toBe('tok/en');
    const internal = new URL(await presignS3Get(client, { ...(storage as object), public_endpoint: undefined } as never, 's3://b/k', 60));
    expect(internal.origin).toBe('http://minio.internal:9000');
    expect(internal.pathname).toBe('/b/k');
  });

  it('sign differently for another key, expiry or signing time', async () => {
    const now = new Date('2026-03-04T05:06:07Z');
    const sig = async (uri: string, ttl: number, at: Date) => new URL(await presignS3Get(storeClient(), storage, uri, ttl, at)).searchParams.get('X-Amz-Signature');
    const base = await sig('s3://b/k', 900, now);
    expect(await sig('s3://b/k', 900, now)).toBe(base);
    expect(await sig('s3://b/k2', 900, now)).not.toBe(base);
    expect(await sig('s3://b/k', 901, now)).not.toBe(base);
    expect(await sig('s3://b/k', 900, new Date(now.getTime() + 1000))).not.toBe(base);
  });

  it('refuse a URI that is not s3://bucket/key', async () => {
    await expect(presignS3Get(storeClient(), storage, 'file:///tmp/train.jsonl', 900)).rejects.toThrow(/not an s3:\/\/ object URI/);
  });
});

describe('file-store download signatures', () => {
  it('accept the signed URL until it expires and refuse another version, split, expiry or key', async () => {
    const key = await downloadSigningKey(mkdtempSync(join(tmpdir(), 'sign-')));
    const otherKey = await downloadSigningKey(mkdtempSync(join(tmpdir(), 'sign-')));
    const expires = 2_000_000_000;
    const signature = new URLSearchParams(signFileDownload(key, 'ds-1', 'train', expires)).get('signature')!;
    expect(checkFileDownload(key, 'ds-1', 'train', expires, signature, expires - 1)).toBeNull();
    expect(checkFileDownload(key, 'ds-1', 'train', expires, signature, expires + 1)).toMatch(/expired/);
    expect(checkFileDownload(key, 'ds-2', 'train', expires, signature, 0)).toMatch(/does not match/);
    expect(checkFileDownload(key, 'ds-1', 'test', expires, signature, 0)).toMatch(/does not match/);
    expect(checkFileDownload(key, 'ds-1', 'train', expires + 60, signature, 0)).toMatch(/does not match/);
    expect(checkFileDownload(otherKey, 'ds-1', 'train', expires, signature, 0)).toMatch(/does not match/);
  });

  it('keep one key per installation across calls', async () => {
    const home = mkdtempSync(join(tmpdir(), 'sign-'));
    expect((await downloadSigningKey(home)).equals(await downloadSigningKey(home))).toBe(true);
  });
});

describe('storage.public_endpoint', () => {
  it('is refused at start-up without storage.endpoint (the file store signs through the API)', () => {
    const home = mkdtempSync(join(tmpdir(), 'cfg-'));
    expect(() => loadConfig({ HANZO_ML_HOME: home, HANZO_ML_STORAGE_PUBLIC_ENDPOINT: 'https://files.example.com' })).toThrow(ConfigError);
    expect(() => loadConfig({ HANZO_ML_HOME: home, HANZO_ML_STORAGE_PUBLIC_ENDPOINT: 'https://files.example.com' })).toThrow(/storage\.public_endpoint/);
  });
});

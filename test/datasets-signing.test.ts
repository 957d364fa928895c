// Download URL signing without a stack: the S3 pre-signer against the AWS documentation's own example, the
// public endpoint it signs for, the file store's HMAC check, and the configuration that would sign for nothing.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkFileDownload, downloadSigningKey, presignGet, presignS3Get, signFileDownload } from '../datasets/downloads.js';
import { ConfigError, loadConfig } from '../lib/config.js';

const EXAMPLE_CREDENTIALS = { accessKeyId: 'AKIAIOSFODNN7EXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY' };

describe('S3 pre-signed URLs', () => {
  it("give the signature of the AWS S3 reference's query-string example (GET test.txt, 2013-05-24, 86400 s)", () => {
    const url = presignGet({ origin: 'https://examplebucket.s3.amazonaws.com', host: 'examplebucket.s3.amazonaws.com', path: '/test.txt', region: 'us-east-1', credentials: EXAMPLE_CREDENTIALS, expiresSeconds: 86400, now: new Date('2013-05-24T00:00:00Z') });
    expect(new URL(url).searchParams.get('X-Amz-Signature')).toBe('aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404');
  });

  it('sign for storage.public_endpoint, path-style, with the key encoded and the session token carried', async () => {
    const client = { config: { credentials: async () => ({ ...EXAMPLE_CREDENTIALS, sessionToken: 'tok/en' }) } } as never;
    const storage = { endpoint: 'http://minio.internal:9000', public_endpoint: 'https://files.example.com', region: 'eu-west-1' } as never;
    const url = new URL(await presignS3Get(client, storage, 's3://hanzo-ml-datasets/org 1/ds/v1/train.jsonl', 900));
    expect(url.origin).toBe('https://files.example.com');
    expect(url.pathname).toBe('/hanzo-ml-datasets/org%201/ds/v1/train.jsonl');
    expect(url.searchParams.get('X-Amz-Expires')).toBe('900');
    expect(url.searchParams.get('X-Amz-Security-Token')).toBe('tok/en');
    const internal = new URL(await presignS3Get(client, { ...(storage as object), public_endpoint: undefined } as never, 's3://b/k', 900));
    expect(internal.origin).toBe('http://minio.internal:9000');
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

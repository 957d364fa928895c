// Encryption at rest: every object the control plane writes to S3 (a put, a streamed put, a small copy, a multipart copy, a JSON
// document) asks the server for server-side encryption, SSE-S3 by default or SSE-KMS with the configured key, and
// jobs get the same setting for their own writes. moto_server is the S3 server: it records the encryption each
// object was written with and reports it on HEAD, as S3 does. Settings that would encrypt nothing are refused.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { HeadObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../lib/config.js';
import { S3ObjectStore } from '../lib/object-store.js';
import { MIN_PART_BYTES, type Config } from '../contracts/config.js';
import { jobEnvironment } from '../jobs/environment.js';
import type { ActivityDeps } from '../activities/deps.js';
import { startMoto, type Moto } from './support/moto.js';

const work = mkdtempSync(join(tmpdir(), 'hanzo-ml-sse-'));
let moto: Moto;

beforeAll(async () => {
  moto = await startMoto(loadConfig({ HANZO_ML_HOME: work }).bootstrap.moto_server);
});
afterAll(() => moto?.stop());

const configWith = (env: Record<string, string>): Config => loadConfig({ HANZO_ML_HOME: work, ...moto.env, ...env }).config;

/** Writes one object of each kind through the store and returns how the server says each is encrypted. */
async function writeEveryKind(config: Config, bucket: string) {
  const store = await S3ObjectStore.create({ ...config.storage, multipart_threshold: MIN_PART_BYTES });
  const small = join(work, `${bucket}-small.bin`);
  const large = join(work, `${bucket}-large.bin`);
  writeFileSync(small, Buffer.alloc(1024, 1));
  writeFileSync(large, Buffer.alloc(MIN_PART_BYTES + 1024, 2)); // above the threshold: copied in parts
  await store.putFile(bucket, 'put/small.bin', small);
  await store.putFile(bucket, 'put/large.bin', large);
  await store.putText(`s3://${bucket}/put/doc.json`, '{"a":1}');
  await store.copy(`s3://${bucket}/put/small.bin`, bucket, 'copy/small.bin');
  await store.copy(`s3://${bucket}/put/large.bin`, bucket, 'copy/large.bin');
  // A streamed put: one PUT below its 8 MiB part, a multipart upload above.
  await store.putStream(bucket, 'stream/small.bin', Readable.from([Buffer.alloc(1024, 3)]));
  await store.putStream(bucket, 'stream/large.bin', Readable.from(Array.from({ length: 9 }, () => Buffer.alloc(1024 * 1024, 4))));
  const heads: Record<string, { sse?: string; key?: string }> = {};
  for (const key of ['put/small.bin', 'put/large.bin', 'put/doc.json', 'copy/small.bin', 'copy/large.bin', 'stream/small.bin', 'stream/large.bin']) {
    const head = await store.client.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
    heads[key] = { sse: head.ServerSideEncryption, key: head.SSEKMSKeyId };
  }
  return heads;
}

describe('server-side encryption of S3 objects', () => {
  it('asks for SSE-S3 on every put and copy by default', async () => {
    const heads = await writeEveryKind(configWith({}), 'sse-default');
    for (const [key, head] of Object.entries(heads)) expect(head.sse, key).toBe('AES256');
  });

  it('asks for SSE-KMS with the configured key when storage.encryption is sse-kms', async () => {
    const heads = await writeEveryKind(configWith({ HANZO_ML_STORAGE_ENCRYPTION: 'sse-kms', HANZO_ML_STORAGE_KMS_KEY_ID: 'alias/hanzo-ml-models' }), 'sse-kms');
    for (const [key, head] of Object.entries(heads)) {
      expect(head.sse, key).toBe('aws:kms');
      expect(head.key, key).toContain('alias/hanzo-ml-models');
    }
  });

  it('writes plain objects only when the operator says none', async () => {
    const heads = await writeEveryKind(configWith({ HANZO_ML_STORAGE_ENCRYPTION: 'none' }), 'sse-none');
    for (const [key, head] of Object.entries(heads)) expect(head.sse, key).toBeUndefined();
  });

  it("hands a job the same setting for its own writes, and the file store's jobs none", () => {
    const envOf = (config: Config) => jobEnvironment({ config } as ActivityDeps);
    expect(envOf(configWith({}))).toMatchObject({ HANZO_ML_STORAGE_ENCRYPTION: 'sse-s3' });
    expect(envOf(configWith({ HANZO_ML_STORAGE_ENCRYPTION: 'sse-kms', HANZO_ML_STORAGE_KMS_KEY_ID: 'k1' }))).toMatchObject({
      HANZO_ML_STORAGE_ENCRYPTION: 'sse-kms',
      HANZO_ML_STORAGE_KMS_KEY_ID: 'k1',
    });
    expect(envOf(loadConfig({ HANZO_ML_HOME: work }).config)).not.toHaveProperty('HANZO_ML_STORAGE_ENCRYPTION');
  });
});

describe('encryption settings that would do nothing are refused at start-up', () => {
  const refused = (env: Record<string, string>, message: RegExp) => expect(() => loadConfig({ HANZO_ML_HOME: work, ...env })).toThrow(message);

  it('refuses SSE on the file store, SSE-KMS without a key, and a key without SSE-KMS', () => {
    refused({ HANZO_ML_STORAGE_ENCRYPTION: 'sse-s3' }, /storage\.encryption \(HANZO_ML_STORAGE_ENCRYPTION\): "sse-s3" needs an S3 store/);
    refused({ ...moto.env, HANZO_ML_STORAGE_ENCRYPTION: 'sse-kms' }, /storage\.kms_key_id .*required with encryption: sse-kms/);
    refused({ ...moto.env, HANZO_ML_STORAGE_KMS_KEY_ID: 'k1' }, /storage\.kms_key_id .*set without storage\.encryption: sse-kms/);
    refused({ ...moto.env, HANZO_ML_STORAGE_ENCRYPTION: 'aes' }, /storage\.encryption/);
    expect(() => loadConfig({ HANZO_ML_HOME: work, HANZO_ML_STORAGE_ENCRYPTION: 'none' })).not.toThrow(ConfigError);
  });
});

// A job's object-store access against a store that enforces it: moto_server with IAM enforcement on. The worker
// mints a job's credentials (STS AssumeRole of its organization's role) exactly as a pod receives them through
// ActivityDeps.jobSecrets; with only those, org A's job reads its dataset and writes its model prefix, and the
// store refuses org B's dataset and model prefix, from the control plane's S3 client and from the trainer's
// python storage code. Roles and the worker's key are set up as an operator would, with the product's policy.
import { execFileSync, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GetObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import type { Config } from '../contracts/config.js';
import { withStorageAccess } from '../jobs/deps.js';
import { jobStoragePolicy, organizationStoragePolicy } from '../jobs/storage-access.js';
import { repoRoot } from '../lib/config.js';
import { testConfig } from './support/config.js';
import { enforceIam, motoPython, startMoto, type Moto } from './support/moto.js';

const ROLE = 'arn:aws:iam::123456789012:role/hanzo-ml-jobs-{organization}';
const probe = testConfig();
let moto: Moto;
let config: Config;
let setup: (spec: object) => unknown;

beforeAll(async () => {
  moto = await startMoto(probe.bootstrap.moto_server);
  const python = motoPython(probe.bootstrap.moto_server!);
  setup = (spec) => JSON.parse(execFileSync(python, [join(repoRoot, 'test/support/moto_iam.py')], { input: JSON.stringify({ endpoint: moto.endpoint, ...spec }), encoding: 'utf8' }));
  const base = testConfig({ HANZO_ML_STORAGE_ENDPOINT: moto.endpoint, HANZO_ML_STORAGE_JOB_ACCESS_ROLE_ARN: ROLE, HANZO_ML_STORAGE_ACCESS_KEY: 'set-below', HANZO_ML_STORAGE_SECRET_KEY: 'set-below' }).config;
  const { datasets, models, checkpoints } = base.storage.buckets;
  const worker = setup({
    buckets: [datasets, models, checkpoints],
    objects: [
      { bucket: datasets, key: 'orga/train.jsonl', body: 'a\n' },
      { bucket: datasets, key: 'orgb/train.jsonl', body: 'b\n' },
      { bucket: models, key: 'base-models/tiny/abc/config.json', body: '{}' },
    ],
    worker: 'hanzo-ml-worker',
    roles: { 'hanzo-ml-jobs-orga': organizationStoragePolicy(base, 'orga'), 'hanzo-ml-jobs-orgb': organizationStoragePolicy(base, 'orgb') },
  }) as { access_key: string; secret_key: string };
  config = { ...base, storage: { ...base.storage, access_key: worker.access_key, secret_key: worker.secret_key } };
  await enforceIam(moto.endpoint);
}, 60_000);

afterAll(() => moto?.stop());

/** What a pod of the job receives: the env of its Secret (the tracking token part stands in as empty). */
const podEnv = (organizationId: string, name: string) => withStorageAccess(async () => ({}), config)({ name, organizationId, runId: `run-${name}` });

function s3(env: Record<string, string>): S3Client {
  return new S3Client({
    endpoint: moto.endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: env.AWS_ACCESS_KEY_ID!, secretAccessKey: env.AWS_SECRET_ACCESS_KEY!, sessionToken: env.AWS_SESSION_TOKEN },
  });
}

/** 'ok' or the store's error code of one request. */
async function outcome(p: Promise<unknown>): Promise<string> {
  return p.then(
    () => 'ok',
    (e: { name?: string; Code?: string }) => e.Code ?? e.name ?? 'error',
  );
}

const read = (c: S3Client, bucket: string, key: string) => outcome(c.send(new GetObjectCommand({ Bucket: bucket, Key: key })).then((r) => r.Body?.transformToString()));
const write = (c: S3Client, bucket: string, key: string) => outcome(c.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: 'x' })));

describe('per-job object-store access against an enforcing store', () => {
  it('gives org A\'s job its own dataset, model prefix, job files, checkpoints and shared base models, and refuses org B\'s dataset, model prefix, job files and checkpoints', async () => {
    const env = await podEnv('orga', 'train-a');
    expect(Object.keys(env).sort()).toEqual(['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN']);
    expect(env.AWS_ACCESS_KEY_ID).not.toBe(config.storage.access_key);
    const c = s3(env);
    const { datasets, models, checkpoints } = config.storage.buckets;
    expect(await read(c, datasets, 'orga/train.jsonl')).toBe('ok');
    expect(await write(c, models, 'orga/model/v1/weights.bin')).toBe('ok');
    expect(await write(c, checkpoints, 'jobs/orga/train-a/result.json')).toBe('ok');
    expect(await write(c, checkpoints, 'checkpoints/orga/run-train-a/10/manifest.json')).toBe('ok');
    expect(await read(c, models, 'base-models/tiny/abc/config.json')).toBe('ok');
    expect(await read(c, datasets, 'orgb/train.jsonl')).toBe('AccessDenied');
    expect(await write(c, models, 'orgb/model/v1/weights.bin')).toBe('AccessDenied');
    expect(await write(c, models, 'base-models/tiny/abc/config.json')).toBe('AccessDenied');
    expect(await write(c, datasets, 'orga/train.jsonl')).toBe('AccessDenied');
    expect(await write(c, checkpoints, 'jobs/orgb/train-b/result.json')).toBe('AccessDenied');
    expect(await write(c, checkpoints, 'checkpoints/orgb/run-b/10/manifest.json')).toBe('AccessDenied');
  });

  it('refuses org B\'s objects to the trainer\'s own storage code (python, boto3) holding org A\'s job credentials', async () => {
    const env = await podEnv('orga', 'train-py');
    const { datasets, models } = config.storage.buckets;
    const script = `
import json
from hanzo_ml.jobio.store import ObjectStore
store = ObjectStore()
def attempt(f):
    try:
        r = f()
        return "ok" if r is None or isinstance(r, str) else repr(r)
    except Exception as e:
        return getattr(e, "response", {}).get("Error", {}).get("Code", type(e).__name__)
print(json.dumps({
  "read_a": attempt(lambda: store.read_text("s3://${datasets}/orga/train.jsonl")),
  "write_a": attempt(lambda: store.write_text("s3://${models}/orga/py/v1/config.json", "{}")),
  "read_b": attempt(lambda: store.read_text("s3://${datasets}/orgb/train.jsonl")),
  "write_b": attempt(lambda: store.write_text("s3://${models}/orgb/py/v1/config.json", "{}")),
}))`;
    const run = spawnSync(probe.bootstrap.python!, ['-c', script], {
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', PYTHONPATH: join(repoRoot, 'trainer'), HANZO_ML_STORAGE_ENDPOINT: moto.endpoint, ...env },
      encoding: 'utf8',
    });
    expect(run.stderr).toBe('');
    expect(JSON.parse(run.stdout)).toEqual({ read_a: 'ok', write_a: 'ok', read_b: 'AccessDenied', write_b: 'AccessDenied' });
  });

  it('refuses credentials whose session token is not the one minted with them', async () => {
    const env = await podEnv('orga', 'train-forged');
    const c = s3({ ...env, AWS_SESSION_TOKEN: `${env.AWS_SESSION_TOKEN}x` });
    expect(await read(c, config.storage.buckets.datasets, 'orga/train.jsonl')).toBe('InvalidToken');
  });

  it('refuses a running job\'s credentials once the operator revokes its organization\'s role policy', async () => {
    const env = await podEnv('orgb', 'train-b');
    const c = s3(env);
    expect(await read(c, config.storage.buckets.datasets, 'orgb/train.jsonl')).toBe('ok');
    await fetch(`${moto.endpoint}/moto-api/reset-auth`, { method: 'POST', body: '1' }); // the next request (the revocation) is the operator's
    setup({ revoke: 'hanzo-ml-jobs-orgb' });
    expect(await read(c, config.storage.buckets.datasets, 'orgb/train.jsonl')).toBe('AccessDenied');
  });

  it('mints nothing for an organization id that would widen the policy, naming the organization', async () => {
    await expect(podEnv('org*', 'train-wild')).rejects.toThrow(/organization 'org\*' cannot scope object-store access/);
  });

  it('narrows a job\'s session policy to its own job files and run checkpoints, beside its organization\'s prefixes', () => {
    const policy = jobStoragePolicy(config, { name: 'Train A', organizationId: 'orga', runId: 'r1' });
    const { datasets, models, checkpoints } = config.storage.buckets;
    const [writes, reads] = policy.Statement;
    expect(writes!.Resource).toEqual([`arn:aws:s3:::${models}/orga/*`, expect.stringMatching(new RegExp(`^arn:aws:s3:::${checkpoints}/jobs/orga/train-a-[0-9a-f]{8}\\*$`)), `arn:aws:s3:::${checkpoints}/checkpoints/orga/r1/*`]);
    expect(reads!.Resource).toEqual([`arn:aws:s3:::${datasets}/orga/*`, `arn:aws:s3:::${checkpoints}/jobs/orga/*`, `arn:aws:s3:::${checkpoints}/checkpoints/orga/*`, `arn:aws:s3:::${models}/base-models/*`, `arn:aws:s3:::${models}/eval-data/*`]);
    expect(JSON.stringify(policy).length).toBeLessThan(2048); // STS's limit on a session policy
  });
});

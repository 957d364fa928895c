// A derive's inputs against a store that enforces access (moto_server with IAM enforcement on): the job runner,
// holding only the credentials a pod of organization A receives (STS AssumeRole of A's role, minted as
// ActivityDeps.jobSecrets mints them), fetches the split files of the derive's envelope (built by the activity's
// own preparationJobDefinition) from A's datasets prefix, and the store refuses it organization B's split files
// should an envelope ever name them.
import { execFileSync, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parentSplitSources, preparationJobDefinition } from '../activities/dataset-prep.js';
import type { Config } from '../contracts/config.js';
import type { DatasetPreparationInput } from '../contracts/data-prep.js';
import { withStorageAccess } from '../jobs/deps.js';
import { dirInput } from '../jobs/inputs.js';
import { organizationStoragePolicy } from '../jobs/storage-access.js';
import { repoRoot } from '../lib/config.js';
import { testConfig } from './support/config.js';
import { enforceIam, motoPython, startMoto, type Moto } from './support/moto.js';

const ROLE = 'arn:aws:iam::123456789012:role/hanzo-ml-jobs-{organization}';
const SPLITS = ['train', 'validation', 'test'] as const;
const probe = testConfig();
let moto: Moto;
let config: Config;

beforeAll(async () => {
  moto = await startMoto(probe.bootstrap.moto_server);
  const base = testConfig({ HANZO_ML_STORAGE_ENDPOINT: moto.endpoint, HANZO_ML_STORAGE_JOB_ACCESS_ROLE_ARN: ROLE, HANZO_ML_STORAGE_ACCESS_KEY: 'set-below', HANZO_ML_STORAGE_SECRET_KEY: 'set-below' }).config;
  const { datasets, models, checkpoints } = base.storage.buckets;
  const spec = {
    endpoint: moto.endpoint,
    buckets: [datasets, models, checkpoints],
    objects: [
      ...['orga', 'orgb'].flatMap((org) => SPLITS.map((s) => ({ bucket: datasets, key: `${org}/chats/v1/${s}.jsonl`, body: `${org} ${s}\n` }))),
      { bucket: models, key: 'base-models/tiny/abc/tokenizer.json', body: '{}' },
    ],
    worker: 'hanzo-ml-worker',
    roles: { 'hanzo-ml-jobs-orga': organizationStoragePolicy(base, 'orga'), 'hanzo-ml-jobs-orgb': organizationStoragePolicy(base, 'orgb') },
  };
  const worker = JSON.parse(execFileSync(motoPython(probe.bootstrap.moto_server!), [join(repoRoot, 'test/support/moto_iam.py')], { input: JSON.stringify(spec), encoding: 'utf8' })) as { access_key: string; secret_key: string };
  config = { ...base, storage: { ...base.storage, access_key: worker.access_key, secret_key: worker.secret_key } };
  await enforceIam(moto.endpoint);
}, 60_000);

afterAll(() => moto?.stop());

/** The envelope of org A's derive whose parent's split files live under `org`'s prefix. */
function envelope(org: string): Record<string, unknown> {
  const input = { organization_id: 'orga', dataset_id: 'v2', request: { operations: [{ op: 'dedup_exact', against_parents: false }], split: null } } as unknown as DatasetPreparationInput;
  const splits = Object.fromEntries(SPLITS.map((s) => [s, `s3://${config.storage.buckets.datasets}/${org}/chats/v1/${s}.jsonl`])) as Record<(typeof SPLITS)[number], string>;
  const def = preparationJobDefinition(input, parentSplitSources(splits), [], dirInput(`s3://${config.storage.buckets.models}/base-models/tiny/abc`), 1);
  return { ...def.envelope, job_name: 'dataset-prep-v2', job_uri: `s3://${config.storage.buckets.checkpoints}/jobs/orga/dataset-prep-v2` };
}

/** The runner's input step (build_spec) with org A's pod credentials: each source's text, or the store's error. */
async function fetchInputs(doc: Record<string, unknown>): Promise<unknown> {
  const env = await withStorageAccess(async () => ({}), config)({ name: 'dataset-prep-v2', organizationId: 'orga', runId: null });
  const script = `
import json, sys, tempfile
from pathlib import Path
from hanzo_ml.jobio.envelope import parse_envelope
from hanzo_ml.jobio.scratch import Scratch, build_spec
from hanzo_ml.jobio.store import ObjectStore
envelope = parse_envelope(json.loads(sys.stdin.read()), "envelope.json")
try:
    spec = build_spec(ObjectStore(), envelope, Scratch(Path(tempfile.mkdtemp())))
    print(json.dumps([Path(s["path"]).read_text() for s in spec["sources"]]))
except Exception as e:
    print(json.dumps(getattr(e, "response", {}).get("Error", {}).get("Code", type(e).__name__)))`;
  const run = spawnSync(probe.bootstrap.python!, ['-c', script], {
    input: JSON.stringify(doc),
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', PYTHONPATH: join(repoRoot, 'trainer'), HANZO_ML_STORAGE_ENDPOINT: moto.endpoint, ...env },
    encoding: 'utf8',
  });
  expect(run.status, run.stderr).toBe(0);
  return JSON.parse(run.stdout);
}

describe("a derive job's inputs against an enforcing store", () => {
  it("fetches its own organization's parent split files into the job's scratch with the job's credentials", async () => {
    expect(await fetchInputs(envelope('orga'))).toEqual(['orga train\n', 'orga validation\n', 'orga test\n']);
  });

  it("is refused another organization's split files by the store itself", async () => {
    // boto3 reads an object's size first (HEAD), whose refusal is a bare 403.
    expect(await fetchInputs(envelope('orgb'))).toBe('403');
  });
});

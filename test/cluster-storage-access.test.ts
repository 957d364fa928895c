// On the test cluster: a job pod of org A, holding only what its pod received (the per-job Secret the executor
// creates from ActivityDeps.jobSecrets: credentials of org A's role minted by STS AssumeRole), runs the trainer's
// storage code against moto_server with IAM enforcement on. It reads org A's dataset and writes org A's model
// prefix; the store refuses org B's dataset and org B's model prefix. Real control plane; the kubelet stand-in runs
// the pod from the trainer image with podman, or as a local process where podman is missing (named fallback).
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatchV1Api } from '@kubernetes/client-node';
import { GetObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { loadConfig, repoRoot } from '../lib/config.js';
import { createLogger } from '../lib/log.js';
import { KubernetesExecutor } from '../jobs/executor/kubernetes.js';
import type { JobRequest } from '../jobs/executor/types.js';
import { withStorageAccess } from '../jobs/deps.js';
import { organizationStoragePolicy } from '../jobs/storage-access.js';
import { ConfigSchema, TRAINER_IMAGE, type Config } from '../contracts/config.js';
import { applyClusterObjects } from '../jobs/queue/kueue-apply.js';
import { findClusterTools } from './support/cluster/tools.js';
import { detectContainerRuntime } from './support/cluster/container-runtime.js';
import { startTestCluster, type TestCluster } from './support/cluster/control-plane.js';
import { enforceIam, motoPython, startMoto, type Moto } from './support/moto.js';

const tools = findClusterTools();
const FAKE_IMAGE = 'hanzoai/ml-trainer:storage-access';
const runtime = detectContainerRuntime();
const IMAGE = runtime.kind === 'podman' ? TRAINER_IMAGE : FAKE_IMAGE;
const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-storage-access-'));
const loaded = loadConfig({ HANZO_ML_HOME: home, HANZO_ML_LOGGING_LEVEL: 'error' });
const log = createLogger({ level: 'error', format: 'text' });

/** What the pod runs: the trainer's ObjectStore (boto3) against both organizations' prefixes, results to its job files. */
const PROBE = `
import json, os
from hanzo_ml.jobio.store import ObjectStore
store = ObjectStore()
def attempt(f):
    try:
        f()
        return "ok"
    except Exception as e:
        return getattr(e, "response", {}).get("Error", {}).get("Code", type(e).__name__)
e = os.environ
out = {
  "read_a": attempt(lambda: store.read_text(f"s3://{e['DATASETS']}/orga/train.jsonl")),
  "write_a": attempt(lambda: store.write_text(f"s3://{e['MODELS']}/orga/probe/v1/config.json", "{}")),
  "read_b": attempt(lambda: store.read_text(f"s3://{e['DATASETS']}/orgb/train.jsonl")),
  "write_b": attempt(lambda: store.write_text(f"s3://{e['MODELS']}/orgb/probe/v1/config.json", "{}")),
  "shared_key": bool(e.get("AWS_ACCESS_KEY_ID")) and e.get("AWS_ACCESS_KEY_ID") != e.get("WORKER_KEY"),
}
store.write_text(e["PROBE_OUT"], json.dumps(out))
`;

describe.skipIf(!tools)('a job pod\'s object-store access on the cluster', () => {
  let cluster: TestCluster;
  let moto: Moto;
  let config: Config;

  beforeAll(async () => {
    moto = await startMoto(loaded.bootstrap.moto_server);
    if (runtime.kind === 'podman') execFileSync(join(repoRoot, 'scripts/images.sh'), { cwd: repoRoot, stdio: ['ignore', 'ignore', 'inherit'] });
    const base: Config = { ...loaded.config, storage: { ...loaded.config.storage, endpoint: moto.endpoint, job_access: { ...loaded.config.storage.job_access, role_arn: 'arn:aws:iam::123456789012:role/hanzo-ml-jobs-{organization}' } } };
    const { datasets, models, checkpoints } = base.storage.buckets;
    const spec = {
      endpoint: moto.endpoint,
      buckets: [datasets, models, checkpoints],
      objects: [
        { bucket: datasets, key: 'orga/train.jsonl', body: 'a\n' },
        { bucket: datasets, key: 'orgb/train.jsonl', body: 'b\n' },
      ],
      worker: 'hanzo-ml-worker',
      roles: { 'hanzo-ml-jobs-orga': organizationStoragePolicy(base, 'orga'), 'hanzo-ml-jobs-orgb': organizationStoragePolicy(base, 'orgb') },
    };
    const worker = JSON.parse(execFileSync(motoPython(loaded.bootstrap.moto_server!), [join(repoRoot, 'test/support/moto_iam.py')], { input: JSON.stringify(spec), encoding: 'utf8' })) as { access_key: string; secret_key: string };
    config = { ...base, storage: { ...base.storage, access_key: worker.access_key, secret_key: worker.secret_key } };
    await enforceIam(moto.endpoint);
    cluster = await startTestCluster({
      nodes: [{ name: 'node-a', gpus: 0 }],
      images: [FAKE_IMAGE],
      containerRuntime: runtime,
      imageEnv: runtime.kind === 'podman' ? {} : { [FAKE_IMAGE]: { PATH: `${join(loaded.bootstrap.python, '..')}:${process.env.PATH}`, PYTHONPATH: join(repoRoot, 'trainer') } },
    });
    // Organization orga's namespace as `hanzo-ml cluster apply` makes it (Pod Security "restricted", its NetworkPolicy).
    await applyClusterObjects(ConfigSchema.parse({ storage: { endpoint: moto.endpoint }, scheduler: { namespace: 'jobs', organizations: ['orga'] } }), cluster.kubeConfig);
  }, 300_000);

  afterAll(async () => {
    await cluster?.stop();
    moto?.stop();
  });

  it('lets org A\'s pod read its dataset and write its model prefix, and the store refuses org B\'s dataset and model prefix', { timeout: 10 * 60_000 }, async () => {
    const k8s = new KubernetesExecutor({ kubeConfig: cluster.kubeConfig, namespacePrefix: 'jobs', images: { trainer: IMAGE }, imagePullPolicy: 'IfNotPresent', gracePeriodSeconds: 5, cpu: '100m', memory: '256Mi', gpuTypes: [], quotas: {}, log, command: () => ['python', '-c', PROBE] });
    const jobSecrets = withStorageAccess(async () => ({ HANZO_ML_TRACKING_TOKEN: 'stand-in' }), config);
    const { datasets, models, checkpoints } = config.storage.buckets;
    const name = 'orga-probe';
    const out = `s3://${checkpoints}/jobs/orga/${name}/probe.json`;
    const request: JobRequest = {
      name,
      envelopeUri: `s3://${checkpoints}/jobs/orga/${name}/envelope.json`,
      organizationId: 'orga',
      kind: 'train',
      priority: null,
      resources: { nodes: 1, processes: 1, gpus_per_node: 0, gpu_type: null, image: null, cpu: null, memory: null },
      env: { HANZO_ML_STORAGE_ENDPOINT: moto.endpoint, HANZO_ML_STORAGE_REGION: 'us-east-1', DATASETS: datasets, MODELS: models, PROBE_OUT: out, WORKER_KEY: config.storage.access_key! },
      secretEnv: await jobSecrets({ name, organizationId: 'orga', runId: null }),
    };
    await k8s.startOrAttach(request);
    const t0 = Date.now();
    let state = await k8s.state(request);
    while (state.state !== 'exited' && Date.now() - t0 < 5 * 60_000) {
      await new Promise((r) => setTimeout(r, 500));
      state = await k8s.state(request);
    }
    expect(state, await k8s.logTail(request, 40)).toMatchObject({ state: 'exited', exitCode: 0 });

    // The pod's storage keys come from its own Secret, never from a shared one.
    const job = await cluster.kubeConfig.makeApiClient(BatchV1Api).readNamespacedJob({ name, namespace: 'jobs-orga' });
    const container = job.spec!.template.spec!.containers[0]!;
    expect(container.envFrom ?? []).toEqual([]);
    const secretRefs = (container.env ?? []).filter((e) => e.valueFrom?.secretKeyRef).map((e) => e.name);
    expect(secretRefs.sort()).toEqual(['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN', 'HANZO_ML_TRACKING_TOKEN']);

    // What the pod found, read back with org A's own access (the store refuses anyone else's reading it).
    const env = request.secretEnv;
    const s3 = new S3Client({ endpoint: moto.endpoint, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId: env.AWS_ACCESS_KEY_ID!, secretAccessKey: env.AWS_SECRET_ACCESS_KEY!, sessionToken: env.AWS_SESSION_TOKEN } });
    const res = await s3.send(new GetObjectCommand({ Bucket: checkpoints, Key: `jobs/orga/${name}/probe.json` }));
    expect(JSON.parse(await res.Body!.transformToString())).toEqual({ read_a: 'ok', write_a: 'ok', read_b: 'AccessDenied', write_b: 'AccessDenied', shared_key: true });
  });
});

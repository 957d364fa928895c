// A multi-node job: an Indexed Job of two pods (one per node, gloo), its rendezvous through the headless
// Service's pod names, trains the tiny model to the same loss as one process on the same global batch. Real
// control plane and S3 (moto_server); the kubelet stand-in runs the pods as local processes (its pods all share
// 127.0.0.1, and it resolves the cluster's *.svc names there, as cluster DNS would resolve them to pod IPs).
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MockActivityEnvironment } from '@temporalio/testing';
import { BatchV1Api, CoreV1Api, NetworkingV1Api } from '@kubernetes/client-node';
import { loadConfig, repoRoot } from '../lib/config.js';
import { createLogger } from '../lib/log.js';
import { S3ObjectStore, type ObjectStore } from '../lib/object-store.js';
import { checkpointsUri } from '../lib/job-files.js';
import { LocalExecutor } from '../jobs/executor/local.js';
import { KubernetesExecutor } from '../jobs/executor/kubernetes.js';
import { localJobEnvironment } from '../jobs/environment.js';
import { runJobToCompletion } from '../activities/run-job.js';
import type { JobDefinition } from '../jobs/definition.js';
import type { JobOutcome } from '../jobs/attempts.js';
import type { ActivityDeps } from '../activities/deps.js';
import type { JobExecutor } from '../jobs/executor/types.js';
import { HardwareSchema, RecoveryPolicySchema, TrainResultSchema, type TrainResult } from '../contracts/trainer-job.js';
import { findClusterTools } from './support/cluster/tools.js';
import { detectContainerRuntime } from './support/cluster/container-runtime.js';
import { ConfigSchema, TRAINER_IMAGE } from '../contracts/config.js';
import { applyClusterObjects } from '../jobs/queue/kueue-apply.js';
import { trainJobDefinition } from './support/deps.js';
import { baseModelInput } from '../jobs/inputs.js';
import { DEFAULT_BASE_MODEL } from '../lib/base-models.js';
import { startTestCluster, type TestCluster } from './support/cluster/control-plane.js';
import { freePort } from './support/ports.js';

const tools = findClusterTools();
const FAKE_IMAGE = 'hanzoai/ml-trainer:multinode';
/** Organization dev's namespace (scheduler.namespace "jobs"). */
const NS = 'jobs-dev';
const runtime = detectContainerRuntime();
// With podman, the pods run the shipped trainer image.
const IMAGE = runtime.kind === 'podman' ? TRAINER_IMAGE : FAKE_IMAGE;
const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-multinode-'));
const loaded = loadConfig({ HANZO_ML_HOME: home, HANZO_ML_LOGGING_LEVEL: 'error' });
const log = createLogger({ level: 'error', format: 'text' });

function trainJob(name: string, store: ObjectStore, data: string, nodes: number, baseModel = loaded.bootstrap.base_model): JobDefinition {
  const spec = {
    kind: 'train',
    job_name: name,
    run_id: `run-${name}`,
    tracking_uri: null,
    base_model_path: 'input:base_model_path',
    train_path: 'input:train_path',
    validation_path: null,
    output_dir: 'output:output_dir',
    checkpoint_dir: 'checkpoints:checkpoint_dir',
    method: 'lora',
    // 8 examples a step: one process takes all 8, each of two nodes 4 of them.
    hyperparameters: { learning_rate: 5e-3, max_steps: 4, batch_size: 8, gradient_accumulation_steps: 1, warmup_steps: 0, weight_decay: 0, max_grad_norm: 1, lora_rank: 4, lora_alpha: 8, lora_dropout: 0, target_modules: ['q_proj', 'v_proj'], max_seq_length: 96, seed: 3, gradient_checkpointing: false },
    data: { chat_template: 'model', mask_prompt: true, packing: false },
    checkpoint: { every_steps: 2, keep_last: 2, every_seconds: null, keep_best: false },
    recovery: RecoveryPolicySchema.parse({}),
    hardware: HardwareSchema.parse({ nodes, processes: 1, device: 'cpu', precision: 'fp32' }),
    threads: 1,
  };
  return trainJobDefinition({ name, spec, baseModel, trainUri: data, checkpointsUri: checkpointsUri(store, loaded.config, 'dev', `run-${name}`), nodes });
}

async function train(deps: ActivityDeps, job: JobDefinition): Promise<TrainResult> {
  const out = await new MockActivityEnvironment().run(async (): Promise<JobOutcome<TrainResult>> => runJobToCompletion(deps, { job, resultSchema: TrainResultSchema, pollMs: 300 }));
  return out.result;
}

describe.skipIf(!tools)('a two-node Indexed Job', () => {
  let cluster: TestCluster;
  let moto: ChildProcess;
  let s3Deps: Omit<ActivityDeps, 'executor'>;
  let s3Data: string;

  beforeAll(async () => {
    const port = await freePort();
    moto = spawn(loaded.bootstrap.moto_server!, ['-H', '127.0.0.1', '-p', String(port)], { stdio: 'ignore' });
    // Built from the current sources (a second or two when it is).
    if (runtime.kind === 'podman') execFileSync(join(repoRoot, 'scripts/images.sh'), { cwd: repoRoot, stdio: ['ignore', 'ignore', 'inherit'] });
    cluster = await startTestCluster({
      nodes: [
        { name: 'node-a', gpus: 1 },
        { name: 'node-b', gpus: 1 },
      ],
      images: [FAKE_IMAGE],
      containerRuntime: runtime,
      // The process fallback's trainer "image": its python runs our trainer package.
      imageEnv: runtime.kind === 'podman' ? {} : { [FAKE_IMAGE]: { PATH: `${join(loaded.bootstrap.python, '..')}:${process.env.PATH}`, PYTHONPATH: join(repoRoot, 'trainer') } },
    });
    // Organization dev's namespace as `hanzo-ml cluster apply` makes it: Pod Security "restricted" admits the pods.
    await applyClusterObjects(ConfigSchema.parse({ storage: { endpoint: `http://127.0.0.1:${port}` }, scheduler: { namespace: 'jobs', organizations: ['dev'] } }), cluster.kubeConfig);
    const storage = { ...loaded.config.storage, endpoint: `http://127.0.0.1:${port}`, access_key: 't', secret_key: 't' };
    const store = await S3ObjectStore.create(storage);
    const data = join(home, 'train.jsonl');
    writeFileSync(data, readFileSync(join(repoRoot, 'examples', 'data', 'demo-task.jsonl'), 'utf8').split('\n').slice(0, 32).join('\n') + '\n');
    for (let i = 0; ; i++) {
      try {
        s3Data = (await store.putFile(storage.buckets.datasets, 'multinode/train.jsonl', data)).uri;
        break;
      } catch (err) {
        if (i > 50) throw err; // moto_server still starting
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    s3Deps = { db: null as never, store, config: { ...loaded.config, storage }, home, bootstrap: loaded.bootstrap, log, trackingUri: 'http://127.0.0.1:1', jobSecrets: async () => ({ AWS_ACCESS_KEY_ID: 't', AWS_SECRET_ACCESS_KEY: 't' }) };
  }, 300_000);

  afterAll(async () => {
    await cluster?.stop();
    moto?.kill('SIGTERM');
  });

  it('trains to the loss of one process on the same global batch, one pod per node', { timeout: 15 * 60_000 }, async () => {
    const k8s: JobExecutor = new KubernetesExecutor({ kubeConfig: cluster.kubeConfig, namespacePrefix: 'jobs', images: { trainer: IMAGE }, imagePullPolicy: 'IfNotPresent', gracePeriodSeconds: 30, cpu: '1', memory: '1Gi', gpuTypes: [], quotas: {}, log });
    // Pods read the base model from the object store, as the pipeline publishes it (they share no disk with us).
    const baseModel = await baseModelInput({ ...s3Deps, executor: k8s }, DEFAULT_BASE_MODEL);
    const two = await train({ ...s3Deps, executor: k8s }, trainJob('two-nodes', s3Deps.store, s3Data, 2, baseModel.uri));
    const pods = await cluster.kubeConfig.makeApiClient(CoreV1Api).listNamespacedPod({ namespace: NS, labelSelector: 'hanzo-ml.dev/job=two-nodes' });
    expect(new Set(pods.items.map((p) => p.spec?.nodeName))).toEqual(new Set(['node-a', 'node-b']));
    const job = await cluster.kubeConfig.makeApiClient(BatchV1Api).readNamespacedJob({ name: 'two-nodes', namespace: NS });
    expect(job.spec).toMatchObject({ completionMode: 'Indexed', completions: 2, parallelism: 2 });
    // Its pods reach each other, and only each other, through a policy of the job's own.
    const peers = await cluster.kubeConfig.makeApiClient(NetworkingV1Api).readNamespacedNetworkPolicy({ name: 'two-nodes-peers', namespace: NS });
    expect(peers.spec!.podSelector).toEqual({ matchLabels: { 'hanzo-ml.dev/job': 'two-nodes' } });
    expect(peers.spec!.ingress![0]!._from).toEqual([{ podSelector: { matchLabels: { 'hanzo-ml.dev/job': 'two-nodes' } } }]);
    expect(peers.spec!.egress![0]!.ports!.map((p) => `${p.port}-${p.endPort ?? p.port}`)).toEqual(['29500-29500', '1024-65535']);

    // The same job as one local process, reading the same objects.
    const local = new LocalExecutor({ workRoot: join(home, 'work'), python: loaded.bootstrap.python, env: localJobEnvironment(s3Deps) });
    const one = await train({ ...s3Deps, executor: local }, trainJob('one-process', s3Deps.store, s3Data, 1));
    expect(two.steps).toBe(4);
    expect(two.final_metrics['train/loss']).toBeCloseTo(one.final_metrics['train/loss']!, 4);
  });
});

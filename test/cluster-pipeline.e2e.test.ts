// Cluster execution end to end: `hanzo-ml serve` and `hanzo-ml worker` as separate processes, every job a
// batch/v1 Job on a real Kubernetes control plane (API server, scheduler, controller-manager; KWOK GPU nodes),
// job I/O only through S3 (moto_server). The one stand-in is the kubelet's (test/support/cluster/): it runs each
// pod from the trainer image with podman (scripts/images.sh builds it; a local process where podman is missing) with
// the pod's environment and reports its phase and exit code.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { S3Client, GetObjectCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { demoPipelineRequest } from '../cli/demo.js';
import type { PipelineProgress, PipelineRequest, PipelineResult } from '../contracts/pipeline.js';
import { findClusterTools, CLUSTER_TOOLS_MISSING } from './support/cluster/tools.js';
import { JOBS_NAMESPACE, startClusterStack, type ClusterStack } from './support/cluster-stack.js';
import { startTestStack } from './support/stack.js';

const tools = findClusterTools();
if (!tools) console.warn(`cluster-pipeline.e2e: skipped: ${CLUSTER_TOOLS_MISSING}`);

interface Status {
  status: string;
  progress: PipelineProgress;
  result: PipelineResult | null;
}

const BUCKET = 'hanzo-ml-checkpoints';

/** A short pipeline: enough steps for checkpoints to matter, few enough for a test. */
function shortRequest(model: string, overrides: Partial<PipelineRequest> = {}): PipelineRequest {
  const demo = demoPipelineRequest({ model_name: model });
  // Sixty steps make no good model: validation's perplexity thresholds are not what these tests are about.
  const validate = { max_perplexity: 1e9, quantized_max_perplexity: 1e9 } as PipelineRequest['validate'];
  return { ...demo, hyperparameters: { ...demo.hyperparameters, max_steps: 60 } as PipelineRequest['hyperparameters'], checkpoint: { every_steps: 10, keep_last: 3 }, validate, ...overrides };
}

describe.skipIf(!tools)('pipelines on Kubernetes (real control plane, S3, serve and worker apart)', () => {
  let stack: ClusterStack;
  let s3: S3Client;
  /** Every Job ever seen, by name, with the uids it had: proves attach, never re-create. */
  const seen = new Map<string, Set<string>>();
  let watching: ReturnType<typeof setInterval>;

  beforeAll(async () => {
    // One image the operator listed that no node has: the pull error shows in the pipeline's progress.
    stack = await startClusterStack({ images: { unpullable: `registry.example/does-not-exist@sha256:${'e'.repeat(64)}` } });
    s3 = new S3Client({ endpoint: stack.s3Endpoint, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId: 'test-access', secretAccessKey: 'test-secret' } });
    watching = setInterval(() => {
      void stack.batch.listNamespacedJob({ namespace: JOBS_NAMESPACE }).then(
        (list) => {
          for (const j of list.items) {
            const uids = seen.get(j.metadata!.name!) ?? new Set<string>();
            uids.add(j.metadata!.uid!);
            seen.set(j.metadata!.name!, uids);
          }
        },
        () => undefined,
      );
    }, 250);
  }, 10 * 60_000);

  afterAll(async () => {
    clearInterval(watching);
    await stack?.stop();
  });

  const start = (req: PipelineRequest): Promise<string> => stack.startPipeline(req);
  const until = (id: string, pred: (s: Status) => boolean, what: string, timeoutMs?: number): Promise<Status> => stack.untilPipeline(id, pred, what, timeoutMs);

  async function s3Json<T>(key: string): Promise<T | null> {
    try {
      const res = await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
      return JSON.parse(await res.Body!.transformToString()) as T;
    } catch {
      return null;
    }
  }

  async function storedSteps(runId: string): Promise<number[]> {
    const res = await s3.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: `checkpoints/dev/${runId}/` }));
    return (res.Contents ?? []).map((o) => /\/(\d+)\/manifest\.json$/.exec(o.Key!)?.[1]).filter((x): x is string => x !== undefined).map(Number).sort((a, b) => a - b);
  }

  async function trainPodRunning(id: string): Promise<string> {
    const deadline = Date.now() + 5 * 60_000;
    for (;;) {
      const pods = await stack.core.listNamespacedPod({ namespace: JOBS_NAMESPACE, labelSelector: `hanzo-ml.dev/job=${id}-train` });
      const running = pods.items.find((p) => p.status?.phase === 'Running' && !p.metadata?.deletionTimestamp);
      if (running) return running.metadata!.name!;
      if (Date.now() > deadline) throw new Error('the train pod never ran');
      await new Promise((r) => setTimeout(r, 300));
    }
  }

  async function approveAndFinish(id: string): Promise<Status> {
    await until(id, (s) => s.progress.awaiting_approval, 'approval');
    const ok = await stack.api('POST', `/v1/pipelines/${id}/approve`, { reason: 'cluster run passed the gate' });
    expect(ok.status).toBe(200);
    const deadline = Date.now() + 120_000;
    for (;;) {
      const { body } = await stack.api<Status>('GET', `/v1/pipelines/${id}`);
      if (body.status === 'COMPLETED') return body;
      if (Date.now() > deadline) throw new Error('pipeline did not complete after approval');
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  it('runs the demo pipeline as Kubernetes Jobs to production, every job a Job of its own', { timeout: 30 * 60_000 }, async () => {
    const id = await start(demoPipelineRequest({ model_name: 'cluster-demo' }));
    const done = await approveAndFinish(id);
    expect(done.result!.outcome).toBe('promoted');
    expect(done.progress.model_version).toMatchObject({ name: 'cluster-demo', stage: 'production' });
    for (const job of ['train', 'eval', 'merge', 'candle-validate', 'candle-quantize']) expect(seen.get(`${id}-${job}`)?.size, job).toBe(1);
    // Artifacts of record live in S3, not on the worker's disk.
    const gguf = Object.entries(done.result!.artifacts).find(([k]) => k.startsWith('gguf'))![1];
    expect(gguf.path).toMatch(/^s3:\/\//);
    expect(done.progress.checkpoints.every((c) => c.uri.startsWith('s3://'))).toBe(true);

    // The same request through the local executor (embedded stack, file:// objects, one trainer thread as the
    // pods have): the same weights and the same GGUF, byte for byte.
    const local = await startTestStack({ HANZO_ML_TRAINER_THREADS: '1' });
    try {
      const started = await local.api<{ id: string }>('POST', '/v1/pipelines', demoPipelineRequest({ model_name: 'cluster-demo' }));
      let mine: Status;
      for (const deadline = Date.now() + 20 * 60_000; ; ) {
        mine = (await local.api<Status>('GET', `/v1/pipelines/${started.body.id}`)).body;
        if (mine.progress.awaiting_approval || mine.status !== 'RUNNING') break;
        if (Date.now() > deadline) throw new Error('the local pipeline did not reach approval');
        await new Promise((r) => setTimeout(r, 1000));
      }
      const status = (await local.api<{ artifacts: Record<string, { checksum: string; manifest: string }> }>('GET', '/v1/models/cluster-demo/versions/1')).body;
      const clusterArtifacts = done.result!.artifacts;
      expect(Object.keys(status.artifacts).sort()).toEqual(Object.keys(clusterArtifacts).sort());
      // The adapter's adapter_config.json names the base model by the job's own path (a pod's, a local
      // workspace's), so its manifest differs; its weights do not. Every other format is identical whole.
      for (const [format, a] of Object.entries(clusterArtifacts)) if (format !== 'lora') expect(status.artifacts[format]!.checksum, format).toBe(a.checksum);
      const adapterWeights = (manifest: string) => (JSON.parse(manifest) as { files: { path: string; sha256: string }[] }).files.find((f) => f.path === 'adapter_model.safetensors')?.sha256;
      const [bucket, ...key] = clusterArtifacts.lora!.manifest!.replace(/^s3:\/\//, '').split('/');
      const clusterManifest = await (await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key.join('/') }))).Body!.transformToString();
      expect(adapterWeights((await local.runtime.store.readText(status.artifacts.lora!.manifest))!)).toBe(adapterWeights(clusterManifest));
    } finally {
      await local.stop();
    }
  });

  it('survives kill -9 of the worker mid-training: the next worker attaches to the one train Job', { timeout: 20 * 60_000 }, async () => {
    const id = await start(shortRequest('cluster-kill-worker'));
    await trainPodRunning(id);
    await until(id, (s) => s.progress.step >= 5, 'training steps');
    stack.killWorker();
    await new Promise((r) => setTimeout(r, 3000));
    // The Job does not depend on the worker: it keeps training.
    const job = await stack.batch.readNamespacedJob({ name: `${id}-train`, namespace: JOBS_NAMESPACE });
    expect(job.status?.active).toBe(1);
    // The trainer image, pinned by digest, trains as uid 1000 on a read-only root in organization dev's namespace.
    const pod = job.spec!.template.spec!;
    expect(pod.containers[0]!.image).toMatch(/@sha256:[a-f0-9]{64}$/);
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 1000 });
    expect(pod.containers[0]!.securityContext).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false });
    await stack.startWorker();
    const waiting = await until(id, (s) => s.progress.awaiting_approval || s.progress.model_version !== null, 'training to finish');
    expect(seen.get(`${id}-train`)?.size).toBe(1);
    expect([...seen.keys()].filter((n) => n.startsWith(`${id}-train-r`))).toEqual([]);
    const result = await s3Json<{ steps: number; resumed_from_step: number | null }>(`jobs/dev/${id}-train/result.json`);
    expect(result).toMatchObject({ steps: 60, resumed_from_step: null }); // nothing was lost, nothing retrained
    expect(await storedSteps(waiting.progress.run_id!)).toContain(60);
  });

  it('replaces a deleted train pod (a lost node) and resumes from the newest checkpoint in S3, not step 0', { timeout: 20 * 60_000 }, async () => {
    const id = await start(shortRequest('cluster-lost-pod'));
    const pod = await trainPodRunning(id);
    const s = await until(id, (x) => x.progress.run_id !== null && x.progress.step >= 15, 'a checkpoint');
    const deadline = Date.now() + 120_000;
    while (!(await storedSteps(s.progress.run_id!)).some((n) => n >= 10)) {
      if (Date.now() > deadline) throw new Error('no checkpoint reached S3');
      await new Promise((r) => setTimeout(r, 300));
    }
    await stack.core.deleteNamespacedPod({ name: pod, namespace: JOBS_NAMESPACE, gracePeriodSeconds: 0 });
    await until(id, (x) => x.progress.awaiting_approval || x.progress.model_version !== null, 'training to finish');
    const result = await s3Json<{ steps: number; resumed_from_step: number | null }>(`jobs/dev/${id}-train/result.json`);
    expect(result!.steps).toBe(60);
    expect(result!.resumed_from_step).toBeGreaterThanOrEqual(10);
    expect(seen.get(`${id}-train`)?.size).toBe(1); // the same Job, a new pod
  });

  it('cancels a pipeline: SIGTERM to the pod, an emergency checkpoint in S3, the Job deleted, the run KILLED', { timeout: 20 * 60_000 }, async () => {
    const id = await start(shortRequest('cluster-cancel', { hyperparameters: { ...shortRequest('x').hyperparameters, max_steps: 2000 } as PipelineRequest['hyperparameters'] }));
    await trainPodRunning(id);
    const s = await until(id, (x) => x.progress.run_id !== null && x.progress.step >= 3, 'training steps');
    const cancelled = await stack.api('POST', `/v1/pipelines/${id}/cancel`);
    expect(cancelled.status).toBe(202);
    const deadline = Date.now() + 180_000;
    for (;;) {
      const { body } = await stack.api<Status>('GET', `/v1/pipelines/${id}`);
      if (body.status === 'CANCELLED') break;
      if (Date.now() > deadline) throw new Error(`not cancelled: ${body.status}`);
      await new Promise((r) => setTimeout(r, 500));
    }
    await expect(stack.batch.readNamespacedJob({ name: `${id}-train`, namespace: JOBS_NAMESPACE })).rejects.toMatchObject({ code: 404 });
    const failure = await s3Json<{ kind: string; step: number }>(`jobs/dev/${id}-train/failure.json`);
    expect(failure?.kind).toBe('preempted');
    expect(await storedSteps(s.progress.run_id!)).toContain(failure!.step);
    const run = await stack.api<{ run: { info: { status: string } } }>('GET', `/api/2.0/mlflow/runs/get?run_id=${s.progress.run_id}`);
    expect(run.body.run.info.status).toBe('KILLED');
  });

  it('refuses a GPU request larger than any node, naming it, before any Job exists', { timeout: 10 * 60_000 }, async () => {
    const id = await start(shortRequest('cluster-too-big', { hardware: { gpus_per_node: 16, gpu_type: 'a100' } as PipelineRequest['hardware'] }));
    const deadline = Date.now() + 5 * 60_000;
    let status: Status;
    for (;;) {
      status = (await stack.api<Status>('GET', `/v1/pipelines/${id}`)).body;
      if (status.status !== 'RUNNING') break;
      if (Date.now() > deadline) throw new Error('the pipeline was not refused');
      await new Promise((r) => setTimeout(r, 500));
    }
    expect(status.progress.error).toMatch(/asks for 16 nvidia\.com\/gpu per node, but the largest node of gpu_type "a100" \(gpu-node-[ab]\) has 8/);
    expect(seen.has(`${id}-train`)).toBe(false);
  });

  it('refuses a multi-node request for a method that cannot be sharded, naming it, at the API', async () => {
    const res = await stack.api('POST', '/v1/pipelines', shortRequest('cluster-qlora', { method: 'qlora', hardware: { nodes: 2, gpus_per_node: 1 } as PipelineRequest['hardware'] }));
    expect(res.status).toBe(400);
    expect(String(res.body.message)).toMatch(/hardware\.nodes: 2: method "qlora" cannot be sharded/);
  });

  it('refuses an image reference in hardware.image at the API: a researcher names an image of the allow-list', async () => {
    const res = await stack.api('POST', '/v1/pipelines', shortRequest('cluster-own-image', { hardware: { image: 'docker.io/evil/miner:latest' } as PipelineRequest['hardware'] }));
    expect(res.status).toBe(400);
    expect(String(res.body.message)).toMatch(/hardware\.image.*scheduler\.images/);
  });

  it('refuses an image name outside scheduler.images, naming the known ones, before any Job exists', { timeout: 10 * 60_000 }, async () => {
    const id = await start(shortRequest('cluster-unlisted-image', { hardware: { image: 'miner' } as PipelineRequest['hardware'] }));
    const deadline = Date.now() + 5 * 60_000;
    let status: Status;
    for (;;) {
      status = (await stack.api<Status>('GET', `/v1/pipelines/${id}`)).body;
      if (status.status !== 'RUNNING') break;
      if (Date.now() > deadline) throw new Error('the pipeline was not refused');
      await new Promise((r) => setTimeout(r, 500));
    }
    expect(status.progress.error).toMatch(/hardware\.image "miner" is not one of scheduler\.images \(trainer, unpullable\)/);
    expect(seen.has(`${id}-train`)).toBe(false);
    expect((await stack.core.listNamespacedSecret({ namespace: JOBS_NAMESPACE })).items.map((x) => x.metadata!.name)).not.toContain(`${id}-train-secrets`);
  });

  it('shows an image that cannot be pulled in the pipeline progress within a poll', { timeout: 10 * 60_000 }, async () => {
    const id = await start(shortRequest('cluster-bad-image', { hardware: { image: 'unpullable' } as PipelineRequest['hardware'] }));
    const s = await until(id, (x) => /ErrImagePull|ImagePullBackOff/.test(x.progress.waiting ?? ''), 'the pull error to show', 3 * 60_000);
    expect(s.progress.stage).toBe('train');
    expect(s.progress.waiting).toMatch(/does-not-exist/);
    expect((await stack.api('POST', `/v1/pipelines/${id}/cancel`)).status).toBe(202);
  });
});

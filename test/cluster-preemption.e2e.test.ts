// Checkpoint-aware preemption end to end, with a real Kueue: `hanzo-ml serve` and `hanzo-ml worker` apart, every job
// a Kubernetes Job entering through its organization's queue, the real trainer in the pods (run by the kubelet
// stand-in, the one part of the cluster that is not the real component), its files only in S3 (moto_server).
// One GPU, a low-priority pipeline training on it, then a high-priority one: Kueue preempts the first, its trainer
// writes an emergency checkpoint on SIGTERM, its Job goes back to the queue, and once the GPU is free again it
// resumes from that checkpoint: the same run, its steps continuing, recorded as a preemption and not a failure.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { S3Client, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { demoPipelineRequest } from '../cli/demo.js';
import type { PipelineProgress, PipelineRequest } from '../contracts/pipeline.js';
import { findClusterTools, findKueue } from './support/cluster/tools.js';
import { JOBS_NAMESPACE, startClusterStack, type ClusterStack } from './support/cluster-stack.js';

const ready = findClusterTools() !== null && findKueue() !== null;
const BUCKET = 'hanzo-ml-checkpoints';

interface Status {
  status: string;
  progress: PipelineProgress;
}

/** One GPU-holding training job of the tiny model on the CPU (the pod asks Kubernetes for a GPU, the trainer runs on CPU). */
function request(model: string, steps: number, priority: 'high' | 'low'): PipelineRequest {
  const demo = demoPipelineRequest({ model_name: model });
  return {
    ...demo,
    hyperparameters: { ...demo.hyperparameters, max_steps: steps } as PipelineRequest['hyperparameters'],
    checkpoint: { every_steps: 40, keep_last: 3 } as PipelineRequest['checkpoint'],
    hardware: { gpus_per_node: 1, gpu_type: 'a100', device: 'cpu' } as PipelineRequest['hardware'],
    // Not about validation: these short trainings make no model that passes its perplexity thresholds.
    validate: { max_perplexity: 1e9, quantized_max_perplexity: 1e9 } as PipelineRequest['validate'],
    priority,
  };
}

describe.skipIf(!ready)('preemption by the queue (Kueue) with the real trainer', () => {
  let stack: ClusterStack;
  let s3: S3Client;

  beforeAll(async () => {
    stack = await startClusterStack({
      nodes: [{ name: 'gpu-node-a', gpus: 1, gpuType: 'a100' }],
      kueue: true,
      config: { scheduler: { gpu_types: ['a100'], quotas: { dev: { max_gpus: 1, max_concurrent_jobs: 8, priority: 'high', preemptible: true } } } },
    });
    s3 = new S3Client({ endpoint: stack.s3Endpoint, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId: 'test-access', secretAccessKey: 'test-secret' } });
  }, 10 * 60_000);

  afterAll(async () => {
    await stack?.stop();
  });

  const start = (req: PipelineRequest): Promise<string> => stack.startPipeline(req);
  const until = (id: string, pred: (s: Status) => boolean, what: string, timeoutMs?: number): Promise<Status> => stack.untilPipeline(id, pred, what, timeoutMs);

  async function storedSteps(runId: string): Promise<number[]> {
    const res = await s3.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: `checkpoints/dev/${runId}/` }));
    return (res.Contents ?? []).map((o) => /\/(\d+)\/manifest\.json$/.exec(o.Key!)?.[1]).filter((x): x is string => x !== undefined).map(Number).sort((a, b) => a - b);
  }

  it('preempts a low-priority training for a high-priority one; the victim resumes from its emergency checkpoint as the same run', { timeout: 30 * 60_000 }, async () => {
    const low = await start(request('preempted-low', 160, 'low'));
    const training = await until(low, (s) => s.progress.stage === 'train' && s.progress.step >= 5, 'the low-priority training to be under way');
    const runId = training.progress.run_id!;
    const high = await start(request('preempting-high', 20, 'high'));

    // The victim is taken back by its queue: waiting again, in the queue, with the eviction recorded.
    const evicted = await until(low, (s) => s.progress.preemptions.length > 0, 'the preemption to be recorded');
    const preemption = evicted.progress.preemptions[0]!;
    expect(preemption.reason).toMatch(/Preempted/);
    const jobs = await stack.batch.readNamespacedJob({ name: `${low}-train`, namespace: JOBS_NAMESPACE });
    expect(jobs.metadata?.labels?.['kueue.x-k8s.io/priority-class']).toBe('hanzo-ml-low');

    // The high-priority training runs to its end meanwhile.
    await until(high, (s) => s.progress.stage !== 'train' && s.progress.stage !== 'queued' && s.progress.stage !== 'preprocess', 'the high-priority training to finish');

    // The victim resumes once the GPU is free, from the emergency checkpoint it wrote on SIGTERM, and finishes.
    const done = await until(low, (s) => s.progress.stage !== 'train' && s.progress.stage !== 'queued' && s.progress.stage !== 'preprocess', 'the low-priority training to finish');
    const resumed = done.progress.preemptions[0]!;
    expect(resumed.resumed_at).not.toBeNull();
    expect(resumed.lost_seconds).toBeGreaterThan(0);
    expect(done.progress.run_id).toBe(runId); // one run
    expect(done.progress.step).toBe(160);
    expect(done.progress.recoveries).toEqual([]); // a preemption by the queue is neither a failure nor a new attempt
    const checkpointStep = Number(/(\d+)$/.exec(resumed.checkpoint ?? '')?.[1]);
    // Written at SIGTERM: at or after the last step seen before the eviction, not at a multiple of every_steps (40).
    expect(checkpointStep).toBeGreaterThanOrEqual(preemption.step ?? 0);
    expect(checkpointStep).toBeGreaterThan(0);
    // Recorded by the checkpoint watcher from S3 when it appeared (keep_last has pruned it from S3 since).
    expect(done.progress.checkpoints.map((c) => c.step)).toContain(checkpointStep);
    expect((await storedSteps(runId)).at(-1)).toBe(160);
    await stack.api('POST', `/v1/pipelines/${low}/cancel`);
    await stack.api('POST', `/v1/pipelines/${high}/cancel`);
  });
});

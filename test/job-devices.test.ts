// The GPUs of a job on Kubernetes: the API server does not say which devices the device plugin gave a pod, so each
// node's runner writes the GPUs it sees to devices.json (node R > 0: devices-R.json), and the run loop fills the
// placement's gpu_ids from them. The run loop here drives a stand-in Kubernetes executor (a scripted object: the
// cluster is not what this is about) whose "pods" write their devices files as a runner would; the object store is
// files in a temp dir.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConfigSchema } from '../contracts/config.js';
import { devicesFile, JOB_FILES, JobPlacementSchema, type JobDevices, type JobPlacement } from '../contracts/job-io.js';
import { readNodeDevices, withRunnerGpus } from '../jobs/attempts.js';
import type { JobActivity } from '../jobs/activity.js';
import type { JobDeps } from '../jobs/deps.js';
import type { JobDefinition } from '../jobs/definition.js';
import type { JobExecutor, JobRequest, JobState } from '../jobs/executor/types.js';
import { runJob } from '../jobs/run-loop.js';
import { JobFiles } from '../lib/job-files.js';
import { createLogger } from '../lib/log.js';
import { FileObjectStore } from '../lib/object-store.js';

const root = mkdtempSync(join(tmpdir(), 'hanzo-ml-devices-'));
const config = ConfigSchema.parse({});
const store = new FileObjectStore(join(root, 'objects'));
const files = (name: string) => JobFiles.of(store, config, 'dev', name);

const A100_0 = 'GPU-5b2c0a8e-3f4d-9e1b-7c6a-2d8f0e4b1a93';
const A100_1 = 'GPU-a1f3c7d2-8e5b-4a60-9b1c-3e7d2f6a8c05';
const fromCluster: JobPlacement = { pods: ['train-0', 'train-1'], nodes: ['node-a', 'node-b'], gpu_ids: [] };

describe('the GPUs a job on Kubernetes was given', () => {
  it('a one-node job shows its runner\'s GPU ids as they are, like a local job\'s', () => {
    const one: JobPlacement = { pods: ['train'], nodes: ['node-a'], gpu_ids: [] };
    expect(withRunnerGpus(one, [{ node: 'node-a', gpu_ids: [A100_0, A100_1] }])).toEqual({ ...one, gpu_ids: [A100_0, A100_1] });
  });

  it('a multi-node job shows each node\'s GPUs qualified by its node, as far as its runners have written them', () => {
    const a: JobDevices = { node: 'node-a', gpu_ids: [A100_0] };
    const b: JobDevices = { node: 'node-b', gpu_ids: [A100_0] };
    expect(withRunnerGpus(fromCluster, [a, b]).gpu_ids).toEqual([`node-a:${A100_0}`, `node-b:${A100_0}`]);
    expect(withRunnerGpus(fromCluster, [a, null]).gpu_ids).toEqual([`node-a:${A100_0}`]);
  });

  it('keeps the placement as it is when no runner has written, a CPU job found none, or the executor named the GPUs', () => {
    expect(withRunnerGpus(fromCluster, [null, null])).toBe(fromCluster);
    expect(withRunnerGpus(fromCluster, [{ node: 'node-a', gpu_ids: [] }, { node: 'node-b', gpu_ids: [] }])).toBe(fromCluster);
    const named = { ...fromCluster, gpu_ids: ['0'] };
    expect(withRunnerGpus(named, [{ node: 'node-a', gpu_ids: [A100_0] }, null])).toBe(named);
  });

  it('reads each node\'s devices file until it appears, keeps what it found, and starts over for a new attempt', async () => {
    const first = files('read-job');
    await first.writeJson(devicesFile(0), { node: 'node-a', gpu_ids: [A100_0] });
    const once = await readNodeDevices(first, 2, null);
    expect(once.byRank).toEqual([{ node: 'node-a', gpu_ids: [A100_0] }, null]);

    // node 0's file is not read again (gone from the store, it is still known); node 1's is, and now is there
    await store.deleteObject(first.file(JOB_FILES.devices));
    await first.writeJson('devices-1.json', { node: 'node-b', gpu_ids: [A100_1] });
    expect((await readNodeDevices(first, 2, once)).byRank).toEqual([{ node: 'node-a', gpu_ids: [A100_0] }, { node: 'node-b', gpu_ids: [A100_1] }]);

    // a malformed file counts as not written yet; a new attempt reads its own files
    await files('read-job-r2').writeJson(devicesFile(0), { node: 'node-c' });
    expect((await readNodeDevices(files('read-job-r2'), 2, once)).byRank).toEqual([null, null]);
  });

  /** Drives a two-node job whose pods write their devices files, then its result; what placement.json said at each poll. */
  async function placementsSeen(name: string, kind: JobExecutor['kind']): Promise<string[][]> {
    const seen: string[][] = [];
    const job: JobDefinition = { name, kind: 'test', organizationId: 'dev', envelope: { tool: 'trainer', spec: {} }, resources: { nodes: 2, gpus_per_node: 1 } };
    // Each poll: what placement.json says now, then the next thing the pods do.
    const script: ((attempt: JobFiles) => Promise<void>)[] = [
      async () => {},
      (f) => f.writeJson(devicesFile(0), { node: 'node-a', gpu_ids: [A100_0] }),
      (f) => f.writeJson(devicesFile(1), { node: 'node-b', gpu_ids: [A100_1] }),
      (f) => f.writeJson(JOB_FILES.result, { ok: true }),
    ];
    const executor: JobExecutor = {
      kind,
      machineGpus: null,
      validate: async () => {},
      startOrAttach: async () => ({ state: 'running', placement: fromCluster }),
      state: async (request: JobRequest): Promise<JobState> => {
        const attempt = files(request.name);
        seen.push((await attempt.readJson(JOB_FILES.placement, JobPlacementSchema))?.gpu_ids ?? ['(none)']);
        const step = script.shift();
        if (!step) return { state: 'exited', exitCode: 0 };
        await step(attempt);
        return { state: 'running', placement: fromCluster };
      },
      stop: async () => {},
      logTail: async () => '',
    };
    const deps = { store, config, executor, log: createLogger({ level: 'error', format: 'text' }), jobSecrets: async () => ({}) } as unknown as JobDeps;
    const activity: JobActivity = { prior: undefined, attempt: 1, heartbeat: () => {}, sleep: async () => {}, cancelRequested: () => false };
    const outcome = await runJob(deps, activity, { job, resultSchema: z.object({ ok: z.boolean() }) });
    expect(outcome.result).toEqual({ ok: true });
    return seen;
  }

  it('the run loop rewrites placement.json as the runners\' devices files appear on Kubernetes', async () => {
    const both = [`node-a:${A100_0}`, `node-b:${A100_1}`];
    expect(await placementsSeen('k8s-gpu-job', 'kubernetes')).toEqual([[], [], [`node-a:${A100_0}`], both, both]);
  });

  it('the run loop leaves the local executor\'s placement as it reported it', async () => {
    expect(await placementsSeen('local-gpu-job', 'local')).toEqual([[], [], [], [], []]);
  });
});

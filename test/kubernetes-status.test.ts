// How the Kubernetes executor reads a Job's state from its pods (jobs/executor/kubernetes-status.ts), on pod
// lists recorded from the test cluster's API server (`kubectl get pods -o json`, test/support/cluster): an Indexed
// Job of two 1-GPU pods the scheduler put on nodes gpu-a and gpu-b, and a pod asking for 2 GPUs that no node has.
// No cluster is started here.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { podsState } from '../jobs/executor/kubernetes-status.js';

/** A recorded pod list's items, fresh for each test (some change a copy). */
function recorded(file: string): V1Pod[] {
  return (JSON.parse(readFileSync(fileURLToPath(new URL(`./fixtures/${file}`, import.meta.url)), 'utf8')) as { items: V1Pod[] }).items;
}

describe('kubernetes job state from its pods', () => {
  it('reports a running Job with its pods and their nodes, and no GPU ids (the API server does not name them)', () => {
    expect(podsState(recorded('kubernetes-pods-running.json'), 2, 'job')).toEqual({
      state: 'running',
      placement: { pods: ['tune-7f3a-train-0-clqtd', 'tune-7f3a-train-1-qmv5s'], nodes: ['gpu-a', 'gpu-b'], gpu_ids: [] },
    });
  });

  it('names each node once when pods share it, in pod-name order', () => {
    const pods = recorded('kubernetes-pods-running.json').reverse();
    for (const p of pods) p.spec!.nodeName = 'gpu-a';
    expect(podsState(pods, 2, 'job')).toMatchObject({ state: 'running', placement: { pods: ['tune-7f3a-train-0-clqtd', 'tune-7f3a-train-1-qmv5s'], nodes: ['gpu-a'] } });
  });

  it('leaves out a pod that is being deleted: its replacement is where the job runs', () => {
    const pods = recorded('kubernetes-pods-running.json');
    pods[0]!.metadata!.deletionTimestamp = new Date('2026-11-26T17:49:00Z');
    expect(podsState(pods, 1, 'job')).toEqual({ state: 'running', placement: { pods: ['tune-7f3a-train-1-qmv5s'], nodes: ['gpu-b'], gpu_ids: [] } });
  });

  it('is pending, without a placement, while fewer pods run than the Job has nodes', () => {
    expect(podsState(recorded('kubernetes-pods-running.json'), 3, 'job')).toEqual({ state: 'pending', reason: 'WaitingForGang', message: '2 of 3 pods running' });
  });

  it("is pending with the scheduler's reason when no node fits the pod", () => {
    const state = podsState(recorded('kubernetes-pods-unschedulable.json'), 1, 'job');
    expect(state).toMatchObject({ state: 'pending', reason: 'Unschedulable' });
    expect(state).toHaveProperty('message', expect.stringContaining('Insufficient nvidia.com/gpu'));
    expect(state).not.toHaveProperty('placement');
  });
});

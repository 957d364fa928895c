// Reading a Job's pods the way a person reads `kubectl describe`: why a pod is not running yet, and how its
// container ended. Kept apart from the executor so the mapping is small and testable on plain objects.
import type { V1Pod } from '@kubernetes/client-node';
import type { JobPlacement, JobState } from './types.js';

/** Why a pending pod is not running: unschedulable (with the scheduler's message), or its container waiting. */
export function podWaitingState(pod: V1Pod, container: string): { reason: string; message: string } | null {
  const status = pod.status;
  const unscheduled = status?.conditions?.find((c) => c.type === 'PodScheduled' && c.status === 'False');
  if (unscheduled) return { reason: unscheduled.reason ?? 'Unschedulable', message: unscheduled.message ?? 'no node fits the pod' };
  const cs = status?.containerStatuses?.find((c) => c.name === container);
  const waiting = cs?.state?.waiting;
  if (waiting?.reason) return { reason: waiting.reason, message: waiting.message ?? '' };
  return null;
}

/**
 * The exit of the Job's most recently finished container: its code and reason. A pod the Job controller gave
 * up on without a container exit (deadline, deleted before it started) has none.
 */
export function terminatedExit(pods: V1Pod[], container: string): { exitCode: number; reason: string } | null {
  const ended = pods
    .map((p) => p.status?.containerStatuses?.find((c) => c.name === container)?.state?.terminated)
    .filter((t): t is NonNullable<typeof t> => t !== undefined)
    .sort((a, b) => String(a.finishedAt ?? '').localeCompare(String(b.finishedAt ?? '')));
  const last = ended.at(-1);
  return last ? { exitCode: last.exitCode, reason: last.reason ?? '' } : null;
}

/**
 * The state of a Job that is neither finished nor suspended, from its pods: running once as many pods run as it
 * has nodes (with where they run), else pending with the reason a person would look for first.
 */
export function podsState(pods: V1Pod[], nodes: number, container: string): JobState {
  const live = pods.filter((p) => !p.metadata?.deletionTimestamp && (p.status?.phase === 'Pending' || p.status?.phase === 'Running'));
  const running = live.filter((p) => p.status?.phase === 'Running');
  if (running.length > 0 && running.length >= nodes) return { state: 'running', placement: podPlacement(running) };
  const waiting = live.map((p) => podWaitingState(p, container)).find((w) => w !== null);
  if (waiting) return { state: 'pending', reason: waiting.reason, message: waiting.message };
  if (running.length > 0) return { state: 'pending', reason: 'WaitingForGang', message: `${running.length} of ${nodes} pods running` };
  return { state: 'pending', reason: 'ContainerCreating', message: pods.length === 0 ? 'the Job has no pod yet' : 'starting its pod' };
}

/**
 * Where the running pods are: their names and their nodes (spec.nodeName), in pod-name order. gpu_ids stay empty
 * here: the device plugin's assignment of GPUs to a container is not in the pod's status, and nothing else the API
 * server returns names them (only the kubelet's pod-resources socket on the node does). Each pod's runner lists the
 * GPUs it was given in devices.json instead, and the run loop fills gpu_ids from those (jobs/attempts.ts withRunnerGpus).
 */
export function podPlacement(running: V1Pod[]): JobPlacement {
  const sorted = [...running].sort((a, b) => String(a.metadata?.name).localeCompare(String(b.metadata?.name)));
  const pods = sorted.map((p) => p.metadata?.name).filter((n): n is string => !!n);
  const nodes = [...new Set(sorted.map((p) => p.spec?.nodeName).filter((n): n is string => !!n))];
  return { pods, nodes, gpu_ids: [] };
}

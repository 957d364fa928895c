// Reading a Job's pods the way a person reads `kubectl describe`: why a pod is not running yet, and how its
// container ended. Kept apart from the executor so the mapping is small and testable on plain objects.
import type { V1Pod } from '@kubernetes/client-node';

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

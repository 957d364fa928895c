// Waiting at the organization's admission gate (queue/admission.ts) before a job starts.
import type { JobActivity, JobHeartbeat } from './activity.js';
import type { JobDeps } from './deps.js';
import type { JobDefinition } from './definition.js';
import type { JobRequest, QueuePlace } from './executor/types.js';
import type { AdmissionGate } from './queue/admission.js';

export const gpusOf = (r: JobRequest): number => r.resources.gpus_per_node * r.resources.nodes;

/**
 * Waits for the organization's admission gate to give the job a slot (scheduler.quotas max_concurrent_jobs; in
 * the embedded mode also max_gpus and this machine's GPUs). A job that already exists (an activity retried after a
 * worker crash) keeps the slot it had. Returns the environment that pins the job to its GPUs, locally.
 */
export async function waitForAdmission(
  deps: JobDeps,
  activity: JobActivity,
  gate: AdmissionGate,
  def: JobDefinition,
  request: JobRequest,
  onWaiting: ((why: string, queue: QueuePlace | null) => Promise<void>) | undefined,
  pollMs = 1000,
): Promise<Record<string, string>> {
  const found = (await deps.executor.state(request)).state;
  const alreadyRunning = found !== 'absent' && found !== 'lost';
  for (;;) {
    const answer = await gate.request({ name: def.name, organizationId: def.organizationId, priority: def.priority ?? null, gpus: gpusOf(request), alreadyRunning });
    if (answer.admitted) return deps.executor.machineGpus === null ? {} : { CUDA_VISIBLE_DEVICES: answer.gpuIndices.join(',') };
    const why = `queued in organization ${def.organizationId}${answer.position ? ` at position ${answer.position}` : ''}: ${answer.reason}`;
    await onWaiting?.(why, { queue: def.organizationId, position: answer.position, reason: answer.reason });
    activity.heartbeat({ job: request.name, phase: 'pending', restarts: 0, waiting: why } satisfies JobHeartbeat);
    await activity.sleep(pollMs);
  }
}

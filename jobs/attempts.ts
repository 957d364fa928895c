// A job's attempts: each restart (a preemption, a lost job, a fault) runs a new attempt with its own name,
// envelope and files under the job's logical name, and the run loop reads each attempt's progress from there.
import { z } from 'zod';
import { JobFiles, jobNameOf } from '../lib/job-files.js';
import { attemptJobName } from '../lib/job-log.js';
import { devicesFile, JOB_FILES, JobDevicesSchema, type JobDevices } from '../contracts/job-io.js';
import { TrainProgressSchema, type TrainProgress } from '../contracts/trainer-job.js';
import type { Logger } from '../lib/log.js';
import type { JobDeps } from './deps.js';
import { jobResources, type JobDefinition } from './definition.js';
import { jobEnvironment } from './environment.js';
import type { JobPlacement, JobRequest } from './executor/types.js';
import { readRecoveries, type RecoveryLog } from './recovery.js';

export interface JobOutcome<T> {
  result: T;
  /** the files of the attempt that succeeded (its outputs are under files.outputUri(field)) */
  files: JobFiles;
}

/** The attempt after `recoveries.length` restarts: its own name, envelope and files. */
export async function prepareAttempt(
  deps: JobDeps,
  def: JobDefinition,
  recoveries: RecoveryLog['recoveries'],
  withSecrets = true,
): Promise<{ request: JobRequest; files: JobFiles }> {
  const attempt = recoveries.length + 1;
  const name = attemptJobName(def.name, attempt);
  const files = JobFiles.of(deps.store, deps.config, def.organizationId, name);
  // A restart after out-of-memory or divergence runs the adjusted spec the recovery recorded.
  const spec = recoveries.findLast((r) => r.spec_after)?.spec_after ?? def.envelope.spec;
  if ((await files.readEnvelope().catch(() => null)) === null) await files.writeEnvelope({ ...def.envelope, spec, job_name: name, job_uri: files.uri });
  const request: JobRequest = {
    name,
    envelopeUri: files.envelopeUri,
    organizationId: def.organizationId,
    kind: def.kind,
    priority: def.priority ?? null,
    resources: jobResources(def),
    env: jobEnvironment(deps),
    secretEnv: withSecrets ? await deps.jobSecrets(def) : {},
  };
  return { request, files };
}

/** The files of the job's logical name, where its recovery and preemption records live across attempts. */
export function logicalFiles(deps: JobDeps, def: JobDefinition): JobFiles {
  return JobFiles.of(deps.store, deps.config, def.organizationId, jobNameOf(def.name));
}

/** The request of the attempt a job is on now (for stopping it from outside the run loop); it mints no secrets. */
export async function currentAttempt(deps: JobDeps, def: JobDefinition): Promise<JobRequest> {
  const recoveries = await readRecoveries(logicalFiles(deps, def));
  return (await prepareAttempt(deps, def, recoveries, false)).request;
}

export async function readProgress(files: JobFiles): Promise<TrainProgress | null> {
  return files.readJson(JOB_FILES.progress, TrainProgressSchema);
}

export async function lastReportedStep(files: JobFiles): Promise<number | null> {
  return (await files.readJson(JOB_FILES.progress, StepSchema))?.step ?? null;
}

const StepSchema = z.object({ step: z.number().int().nonnegative() });
const LastCheckpointSchema = z.object({ last_checkpoint: z.string().nullable() });

/** Notes when the job's newest checkpoint changed (progress.json names it). */
export async function checkpointSeen(files: JobFiles, seen: { name: string | null; at: number }): Promise<{ name: string | null; at: number }> {
  const name = (await files.readJson(JOB_FILES.progress, LastCheckpointSchema))?.last_checkpoint ?? null;
  return name !== null && name !== seen.name ? { name, at: Date.now() } : seen;
}

/**
 * Writes the attempt's placement.json (GET /v1/jobs/{id} reads it) when the executor reports a placement not yet
 * written for this attempt. A failed write is only logged: the next poll tries again, and the job runs on.
 */
export async function writePlacement(files: JobFiles, placement: JobPlacement | undefined, written: string | null, log: Logger): Promise<string | null> {
  if (!placement) return written;
  const key = `${files.uri} ${JSON.stringify(placement)}`;
  if (key === written) return written;
  try {
    await files.writeJson(JOB_FILES.placement, placement);
    return key;
  } catch (err) {
    log.warn('job placement not written', { job: files.name, error: String(err) });
    return written;
  }
}

/** What each node's runner of an attempt said of its GPUs, by node rank; null where its file is not there yet. */
export interface NodeDevices {
  /** the attempt's files these were read from: a new attempt reads its own */
  uri: string;
  byRank: (JobDevices | null)[];
}

/**
 * Reads the devices files of an attempt's `nodes` runners (devices.json, devices-<rank>.json) not read yet: each is
 * written once, so one found is kept and never read again.
 */
export async function readNodeDevices(files: JobFiles, nodes: number, known: NodeDevices | null): Promise<NodeDevices> {
  const prior = known?.uri === files.uri ? known.byRank : [];
  const byRank = await Promise.all(Array.from({ length: nodes }, async (_, rank) => prior[rank] ?? (await files.readJson(devicesFile(rank), JobDevicesSchema))));
  return { uri: files.uri, byRank };
}

/**
 * The placement with the GPUs the job's runners found, for an executor that cannot say which it assigned
 * (Kubernetes: the device plugin's choice is not in the pod's status). One node: its ids as they are, like the local
 * executor's; several: `<node>:<id>`, since two nodes' ids need not differ. A placement that names its GPUs keeps them.
 */
export function withRunnerGpus(placement: JobPlacement, devices: (JobDevices | null)[]): JobPlacement {
  if (placement.gpu_ids.length > 0) return placement;
  const found = devices.filter((d): d is JobDevices => d !== null);
  const gpuIds = devices.length > 1 ? found.flatMap((d) => d.gpu_ids.map((id) => `${d.node}:${id}`)) : found.flatMap((d) => d.gpu_ids);
  return gpuIds.length > 0 ? { ...placement, gpu_ids: gpuIds } : placement;
}

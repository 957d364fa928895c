// Runs one trainer/tool job to completion from inside an activity, through whichever executor is configured:
// start or re-attach by name, poll, heartbeat, start a new attempt after a preemption or a lost job (resuming
// from its newest checkpoint in the object store), start one with an adjusted spec after out-of-memory or
// divergence (recovery.ts), and stop the job only on a real cancellation. Everything it reads of the job comes
// from the object store (contracts/job-io.ts), never from a disk shared with the job.
import { join } from 'node:path';
import { Context, CancelledFailure, sleep } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { JOB_SECRET_RENEW_MS, type ActivityDeps } from '../activities/deps.js';
import { JobRejected, type JobPlacement, type JobRequest, type JobResources, type JobState, type QueuePlace } from './executor/types.js';
import { readPreemptions, recordEviction, recordResumed } from './preemptions.js';
import { admissionGate, type AdmissionGate } from './queue/admission.js';
import { repoRoot, durationMs, storageEncryption } from '../lib/config.js';
import { JobFiles, jobNameOf } from '../lib/job-files.js';
import { attemptJobName } from '../lib/job-log.js';
import { JOB_FILES, type JobEnvelopeInput } from '../contracts/job-io.js';
import type { JobPreemption, JobRecovery } from '../contracts/pipeline.js';
import type { JobPriority } from '../contracts/config.js';
import { TrainProgressSchema, type RecoveryPolicy, type TrainJobSpec, type TrainProgress } from '../contracts/trainer-job.js';
import { adjustSpecAfterFault, readFailure, readRecoveries, visibleRecoveries, writeRecoveries, type FaultKind, type RecoveryLog, type TrainerFailure } from './recovery.js';

/** The trainer's exit codes (trainer/hanzo_ml/cli.py). */
export const TRAINER_EXIT = { badSpec: 2, outOfMemory: 3, diverged: 4, preempted: 143 } as const;
const MAX_RESTARTS = 5;

export interface JobHeartbeat {
  job: string;
  phase: 'pending' | 'running' | 'restarting' | 'finished';
  restarts: number;
  /** why a pending job is not running yet (no node fits, pulling its image, ...) */
  waiting?: string | null;
  /** every restart after a fault so far, oldest first */
  recoveries?: JobRecovery[];
  [key: string]: unknown;
}

/** How a train job recovers from out-of-memory and divergence; without it those exits fail the activity. */
export interface JobRecoveryOptions {
  policy: RecoveryPolicy;
  /** Called for each fault: `restarting` false means the policy gave up and the activity is about to fail. */
  onFault?: (recovery: JobRecovery, restarting: boolean, failure: TrainerFailure | null, attempt: JobFiles) => Promise<void>;
}

/** A job as the activity describes it: what to run (its envelope) and what it needs. */
export interface JobDefinition {
  /** logical name, stable across attempts (e.g. `<pipeline>-train`) */
  name: string;
  kind: string;
  organizationId: string;
  /** the envelope without job_name/job_uri, which each attempt fills in */
  envelope: Omit<JobEnvelopeInput, 'job_name' | 'job_uri'>;
  resources?: Partial<JobResources>;
  /** the run whose metrics the job reports (its tracking token is scoped to it) */
  runId?: string | null;
  /** its priority in the organization's queue; default the organization's (HPO trials: low) */
  priority?: JobPriority | null;
}

/** The environment every job gets, wherever it runs (no secrets: those are per job). */
export function jobEnvironment(deps: ActivityDeps): Record<string, string> {
  const env: Record<string, string> = {
    HF_HUB_OFFLINE: '1',
    TRANSFORMERS_OFFLINE: '1',
    HF_DATASETS_OFFLINE: '1',
    OMP_NUM_THREADS: String(deps.config.trainer.threads),
    PYTHONUNBUFFERED: '1',
    HANZO_ML_STORAGE_REGION: deps.config.storage.region,
  };
  if (deps.config.storage.endpoint) env.HANZO_ML_STORAGE_ENDPOINT = deps.config.storage.endpoint;
  // The job's own writes (checkpoints, adapters, logs) are encrypted at rest as the control plane's are.
  const sse = storageEncryption(deps.config.storage);
  if (sse.mode !== 'none') env.HANZO_ML_STORAGE_ENCRYPTION = sse.mode;
  if (sse.kmsKeyId) env.HANZO_ML_STORAGE_KMS_KEY_ID = sse.kmsKeyId;
  return env;
}

/** Local jobs run the repository's trainer; pods run the image's (its PYTHONPATH is set there). */
export function localJobEnvironment(deps: Pick<ActivityDeps, 'bootstrap' | 'config'>): Record<string, string> {
  const env: Record<string, string> = { PYTHONPATH: join(repoRoot, 'trainer'), HANZO_ML_CANDLE: deps.config.trainer.candle ?? deps.bootstrap.candle };
  // A local job reaches an S3 server with the credentials of the configuration (a pod gets a Secret's).
  if (deps.config.storage.access_key) env.AWS_ACCESS_KEY_ID = deps.config.storage.access_key;
  if (deps.config.storage.secret_key) env.AWS_SECRET_ACCESS_KEY = deps.config.storage.secret_key;
  return env;
}

function resourcesOf(def: JobDefinition): JobResources {
  return {
    nodes: def.resources?.nodes ?? 1,
    processes: def.resources?.processes ?? 1,
    gpus_per_node: def.resources?.gpus_per_node ?? 0,
    gpu_type: def.resources?.gpu_type ?? null,
    image: def.resources?.image ?? null,
    cpu: def.resources?.cpu ?? null,
    memory: def.resources?.memory ?? null,
  };
}

/** The attempt after `recoveries.length` restarts: its own name, envelope and files. */
async function prepareAttempt(
  deps: ActivityDeps,
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
    resources: resourcesOf(def),
    env: jobEnvironment(deps),
    secretEnv: withSecrets ? await deps.jobSecrets(def) : {},
  };
  return { request, files };
}

export interface JobOutcome<T> {
  result: T;
  /** the files of the attempt that succeeded (its outputs are under files.outputUri(field)) */
  files: JobFiles;
}

/**
 * Drives a job until it exits 0, then parses its result.json with the given schema.
 * `onPoll` runs on every poll (e.g. to read progress.json) and returns extra heartbeat fields.
 * The job's secrets (its tracking token) are renewed while this drives it and revoked once it has ended.
 */
export async function runJobToCompletion<T>(deps: ActivityDeps, p: DriveOptions<T>): Promise<JobOutcome<T>> {
  const renewal = setInterval(() => void deps.jobSecrets.renew?.(p.job).catch((err: unknown) => deps.log.warn('job secrets not renewed', { job: p.job.name, err: String(err) })), JOB_SECRET_RENEW_MS);
  try {
    const outcome = await driveJob(deps, p);
    await endJobSecrets(deps, p.job);
    return outcome;
  } catch (err) {
    if (jobHasEnded(err)) await endJobSecrets(deps, p.job);
    throw err;
  } finally {
    clearInterval(renewal);
  }
}

/**
 * Whether a failed drive leaves no job for a later attempt of the activity to re-attach to: a real cancellation
 * (the job was stopped), a failure for good, or the job's own non-zero exit. Anything else (a worker shutdown, an
 * unreachable cluster API) may leave it running, and its token to the lease.
 */
function jobHasEnded(err: unknown): boolean {
  if (err instanceof CancelledFailure) return !leftRunning(err);
  return err instanceof ApplicationFailure && (err.nonRetryable || err.type === 'JobFailed');
}

/** Revokes an ended job's secrets; a failure to do so leaves them to their lease rather than fail the activity. */
async function endJobSecrets(deps: ActivityDeps, job: JobDefinition): Promise<void> {
  await deps.jobSecrets.revoke?.(job).catch((err: unknown) => deps.log.warn('job secrets not revoked: they expire with their lease', { job: job.name, err: String(err) }));
}

interface DriveOptions<T> {
  job: JobDefinition;
  resultSchema: z.ZodType<T>;
  pollMs?: number;
  onPoll?: (files: JobFiles) => Promise<Record<string, unknown>>;
  /** why the job is not running, and its place in its queue when it waits in one */
  onWaiting?: (why: string, queue: QueuePlace | null) => Promise<void>;
  /** each time the queue preempts the job or it resumes: every preemption so far */
  onPreemptions?: (preemptions: JobPreemption[]) => Promise<void>;
  /** the checkpoint interval the job was given: a preemption finding an older newest checkpoint is reported */
  checkpointIntervalSeconds?: number;
  recovery?: JobRecoveryOptions;
}

async function driveJob<T>(deps: ActivityDeps, p: DriveOptions<T>): Promise<JobOutcome<T>> {
  const ctx = Context.current();
  const prior = ctx.info.heartbeatDetails as JobHeartbeat | undefined;
  let restarts = prior?.restarts ?? 0;
  const logical = JobFiles.of(deps.store, deps.config, p.job.organizationId, jobNameOf(p.job.name));
  const recoveries = await readRecoveries(logical);
  const log = deps.log.child({ job: p.job.name, attempt: ctx.info.attempt });
  let { request, files } = await prepareAttempt(deps, p.job, recoveries);
  await validateOrReject(deps, request);
  const gate = admissionGate(deps.db, deps.config, deps.executor.machineGpus);
  const deviceEnv = gate.enabled
    ? await waitForAdmission(deps, gate, p.job, request, p.onWaiting, p.pollMs).catch(async (err: unknown) => {
        // Cancelled (or paused) while it waited: it leaves the queue rather than hold its place.
        if (err instanceof CancelledFailure && !leftRunning(err)) await gate.release(p.job.name);
        throw err;
      })
    : {};
  Object.assign(request.env, deviceEnv);
  let state = await deps.executor.startOrAttach(request);
  let slotRefreshedAt = Date.now();
  log.info(prior ? 'job re-attached' : 'job started', { name: request.name, state: state.state });
  const pullTimeoutMs = durationMs(deps.config.scheduler.image_pull_timeout);
  let pullFailingSince: number | null = null;
  let preemptions = await readPreemptions(logical);
  const preemptionCtx = () => ({ deps, logical, attempt: files, job: p.job, checkpointIntervalSeconds: p.checkpointIntervalSeconds ?? null });
  // When the newest checkpoint appeared, for the staleness of one at a preemption (the job's start until one does).
  let lastCheckpoint: { name: string | null; at: number } = { name: null, at: Date.now() };
  // The attempt and placement last written to placement.json: a new attempt or a changed placement writes it again.
  let placementWritten: string | null = null;
  const beat = (phase: JobHeartbeat['phase'], extra: Record<string, unknown> = {}): void =>
    ctx.heartbeat({ job: request.name, phase, restarts, recoveries: visibleRecoveries(recoveries), preemptions: preemptions.length, ...extra } satisfies JobHeartbeat);
  const nextAttempt = async (): Promise<void> => {
    ({ request, files } = await prepareAttempt(deps, p.job, recoveries));
    Object.assign(request.env, deviceEnv);
    state = await deps.executor.startOrAttach(request);
  };
  try {
    for (;;) {
      if (state.state === 'exited' && state.exitCode === 0) break;
      // A user's own command exits with codes of its own: 2, 3 and 4 mean bad spec, out of memory and divergence
      // only from the product's tools.
      const productTool = p.job.envelope.tool !== 'command';
      if (state.state === 'exited' && state.exitCode === TRAINER_EXIT.badSpec && productTool)
        throw ApplicationFailure.nonRetryable(`${p.job.name}: rejected its job spec:\n${await deps.executor.logTail(request, 5)}`, 'BadJobSpec');
      const failure = state.state === 'exited' && state.exitCode !== 0 ? await readFailure(files) : null;
      // torchrun exits 1 whatever its workers exited with: failure.json, which the runner clears when it
      // starts, says what happened.
      if (failure?.kind === 'preempted' && state.state === 'exited') state = { state: 'exited', exitCode: TRAINER_EXIT.preempted };
      const fault = state.state === 'exited' && productTool ? (faultOfExit(state.exitCode) ?? (failure && failure.kind !== 'preempted' ? failure.kind : null)) : null;
      if (fault) {
        await recoverFromFault(deps, { ...p, files, logical }, fault, recoveries, log);
        beat('restarting');
        await nextAttempt();
        continue;
      }
      if (state.state === 'exited' && state.exitCode !== TRAINER_EXIT.preempted)
        throw ApplicationFailure.retryable(`${p.job.name}: exited with code ${state.exitCode}${state.reason ? ` (${state.reason})` : ''}:\n${await deps.executor.logTail(request, 15)}`, 'JobFailed');
      if (state.state === 'exited' || state.state === 'lost' || state.state === 'absent') {
        // Preempted (emergency checkpoint written) or lost (killed with no exit code): a new attempt resumes
        // from the newest checkpoint in the object store.
        if (++restarts > MAX_RESTARTS) throw ApplicationFailure.nonRetryable(`${p.job.name}: restarted ${MAX_RESTARTS} times, giving up`, 'JobRestartLimit');
        log.warn('job is not running, starting a new attempt', { found: state, restarts });
        recoveries.push({
          kind: state.state === 'exited' ? 'preempted' : 'lost',
          step: await lastReportedStep(files),
          restart: recoveries.length + 1,
          change: 'none: resumes from its last checkpoint',
          at: new Date().toISOString(),
        });
        await writeRecoveries(logical, recoveries);
        beat('restarting');
        await nextAttempt();
        continue;
      }
      if (state.state === 'pending') {
        const why = [state.reason, state.message].filter(Boolean).join(': ') || 'waiting to be scheduled';
        pullFailingSince = isPullFailure(state.reason) ? (pullFailingSince ?? Date.now()) : null;
        if (pullFailingSince !== null && Date.now() - pullFailingSince > pullTimeoutMs) {
          await deps.executor.stop(request, 0);
          throw ApplicationFailure.nonRetryable(`${p.job.name}: its image cannot be pulled (${why}) for ${deps.config.scheduler.image_pull_timeout}`, 'ImagePullFailed');
        }
        if (state.evicted) {
          const before = preemptions.length;
          preemptions = await recordEviction(preemptionCtx(), preemptions, state.evicted, lastCheckpoint.at);
          if (preemptions.length > before) await p.onPreemptions?.(preemptions);
        }
        await p.onWaiting?.(why, state.queue ?? null);
        beat('pending', { waiting: why });
      } else {
        if (preemptions.at(-1)?.resumed_at === null) {
          preemptions = await recordResumed(preemptionCtx(), preemptions);
          await p.onPreemptions?.(preemptions);
        }
        if (state.state === 'running') placementWritten = await writePlacement(files, state.placement, placementWritten, log);
        if (p.checkpointIntervalSeconds !== undefined) lastCheckpoint = await checkpointSeen(files, lastCheckpoint);
        if (gate.enabled && Date.now() - slotRefreshedAt > SLOT_REFRESH_MS) {
          await gate.request({ name: p.job.name, organizationId: p.job.organizationId, priority: p.job.priority ?? null, gpus: gpusOf(request), alreadyRunning: true });
          slotRefreshedAt = Date.now();
        }
        const extra = p.onPoll ? await p.onPoll(files) : {};
        beat('running', extra);
      }
      await sleep(p.pollMs ?? 1000);
      state = await deps.executor.state(request);
    }
  } catch (err) {
    await stopOnRealCancel(deps, request, err);
    // The slot goes with the job: kept while it runs on without us (a worker shutdown), freed once it has ended.
    if (gate.enabled && !leftRunning(err)) await gate.release(p.job.name);
    throw err;
  }
  if (gate.enabled) await gate.release(p.job.name);
  beat('finished');
  const result = await files.readJson(JOB_FILES.result, p.resultSchema);
  if (result === null) throw ApplicationFailure.retryable(`${p.job.name}: exited 0 but ${files.file(JOB_FILES.result)} is missing or malformed`, 'JobFailed');
  return { result, files };
}

/**
 * Writes the attempt's placement.json (GET /v1/jobs/{id} reads it) when the executor reports a placement not yet
 * written for this attempt. A failed write is only logged: the next poll tries again, and the job runs on.
 */
async function writePlacement(files: JobFiles, placement: JobPlacement | undefined, written: string | null, log: ActivityDeps['log']): Promise<string | null> {
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

const SLOT_REFRESH_MS = 30_000;
const gpusOf = (r: JobRequest): number => r.resources.gpus_per_node * r.resources.nodes;

/** A worker shutdown or heartbeat timeout leaves the job running for the next attempt of the activity. */
function leftRunning(err: unknown): boolean {
  return err instanceof CancelledFailure && !Context.current().cancellationDetails?.cancelRequested;
}

/**
 * Waits for the organization's admission gate to give the job a slot (scheduler.quotas max_concurrent_jobs; in
 * the embedded mode also max_gpus and this machine's GPUs). A job that already exists (an activity retried after a
 * worker crash) keeps the slot it had. Returns the environment that pins the job to its GPUs, locally.
 */
async function waitForAdmission(
  deps: ActivityDeps,
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
    Context.current().heartbeat({ job: request.name, phase: 'pending', restarts: 0, waiting: why } satisfies JobHeartbeat);
    await sleep(pollMs);
  }
}

async function validateOrReject(deps: ActivityDeps, request: JobRequest): Promise<void> {
  try {
    await deps.executor.validate(request);
  } catch (err) {
    // A job no executor can run fails for good; anything else (the API server unreachable) is retried.
    if (err instanceof JobRejected) throw ApplicationFailure.nonRetryable(err.message, 'BadJobSpec');
    throw err;
  }
}

function isPullFailure(reason: string | null): boolean {
  return reason === 'ErrImagePull' || reason === 'ImagePullBackOff' || reason === 'InvalidImageName' || reason === 'ErrImageNeverPull';
}

function faultOfExit(code: number): FaultKind | null {
  if (code === TRAINER_EXIT.outOfMemory) return 'out_of_memory';
  if (code === TRAINER_EXIT.diverged) return 'diverged';
  return null;
}

export async function readProgress(files: JobFiles): Promise<TrainProgress | null> {
  return files.readJson(JOB_FILES.progress, TrainProgressSchema);
}

async function lastReportedStep(files: JobFiles): Promise<number | null> {
  return (await files.readJson(JOB_FILES.progress, StepSchema))?.step ?? null;
}

const StepSchema = z.object({ step: z.number().int().nonnegative() });
const LastCheckpointSchema = z.object({ last_checkpoint: z.string().nullable() });

/** Notes when the job's newest checkpoint changed (progress.json names it). */
async function checkpointSeen(files: JobFiles, seen: { name: string | null; at: number }): Promise<{ name: string | null; at: number }> {
  const name = (await files.readJson(JOB_FILES.progress, LastCheckpointSchema))?.last_checkpoint ?? null;
  return name !== null && name !== seen.name ? { name, at: Date.now() } : seen;
}

/**
 * Records the adjusted spec for the next attempt after out-of-memory or divergence, or fails the activity for
 * good when the policy allows no more. Idempotent per failure: the record carries the failure's time and the
 * spec it chose, so an activity retried between writing the record and restarting re-applies that spec.
 */
async function recoverFromFault(
  deps: ActivityDeps,
  p: { job: JobDefinition; files: JobFiles; logical: JobFiles; recovery?: JobRecoveryOptions },
  kind: FaultKind,
  recoveries: RecoveryLog['recoveries'],
  log: ActivityDeps['log'],
): Promise<void> {
  const failure = await readFailure(p.files);
  const last = recoveries.at(-1);
  if (failure && last?.failure_at === failure.at && last.spec_after) return;
  const failureType = kind === 'out_of_memory' ? 'OutOfMemory' : 'TrainingDiverged';
  const what = failure?.message ?? (await p.files.logTail(5));
  const record = { kind, step: failure?.step ?? null, restart: recoveries.length + 1, at: new Date().toISOString() };
  if (!p.recovery) throw ApplicationFailure.nonRetryable(`${p.job.name}: ${kind.replace(/_/g, ' ')}: ${what}`, failureType);
  const spec = ((await p.files.readEnvelope())?.spec ?? p.job.envelope.spec) as TrainJobSpec;
  const adjusted = adjustSpecAfterFault(spec, kind, p.recovery.policy, recoveries, failure?.micro_batch);
  if (!adjusted.ok) {
    log.error('job fault: giving up', { kind, reason: adjusted.reason });
    await p.recovery.onFault?.({ ...record, change: `none: ${adjusted.reason}` }, false, failure, p.files);
    throw ApplicationFailure.nonRetryable(`${p.job.name}: ${adjusted.reason}: ${what}`, failureType);
  }
  log.warn('job fault: restarting with an adjusted spec', { kind, change: adjusted.change });
  const recovery = { ...record, change: adjusted.change };
  recoveries.push({ ...recovery, failure_at: failure?.at, spec_after: adjusted.spec });
  await writeRecoveries(p.logical, recoveries);
  await p.recovery.onFault?.(recovery, true, failure, p.files);
}

/** A cancelled workflow stops its job; a worker shutdown or timeout leaves it running for the next attempt. */
async function stopOnRealCancel(deps: ActivityDeps, request: JobRequest, err: unknown): Promise<void> {
  if (!(err instanceof CancelledFailure)) return;
  const details = Context.current().cancellationDetails;
  if (!details?.cancelRequested) return;
  deps.log.warn('cancelled: stopping job', { job: request.name });
  await stopJobKeepingHeartbeat(deps, request);
}

/** Stops a job within the configured grace period, heartbeating while it waits (a long grace outlasts a heartbeat timeout). */
export async function stopJobKeepingHeartbeat(deps: ActivityDeps, request: JobRequest): Promise<void> {
  const beat = setInterval(() => {
    try {
      Context.current().heartbeat({ job: request.name, phase: 'stopping' });
    } catch {
      // not inside an activity (a test) or already completed
    }
  }, 5000);
  try {
    await deps.executor.stop(request, durationMs(deps.config.scheduler.preemption.grace_period) / 1000);
  } finally {
    clearInterval(beat);
  }
}

/** The request of the attempt a job is on now (for stopping it from outside runJobToCompletion); it mints no secrets. */
export async function currentAttempt(deps: ActivityDeps, def: JobDefinition): Promise<JobRequest> {
  const recoveries = await readRecoveries(JobFiles.of(deps.store, deps.config, def.organizationId, jobNameOf(def.name)));
  return (await prepareAttempt(deps, def, recoveries, false)).request;
}

/** Stops a job from outside runJobToCompletion (a pruned trial) and revokes its secrets: it has ended. */
export async function stopJob(deps: ActivityDeps, def: JobDefinition): Promise<void> {
  await stopJobKeepingHeartbeat(deps, await currentAttempt(deps, def));
  await endJobSecrets(deps, def);
}

export type { JobState };

// Runs one trainer/tool job to completion for whatever drives it (an activity: activities/run-job.ts), through
// whichever executor is configured: start or re-attach by name, poll, heartbeat, start a new attempt after a
// preemption or a lost job (resuming from its newest checkpoint in the object store), start one with an adjusted
// spec after out-of-memory or divergence (faults.ts), and stop the job only on a real cancellation. Everything it
// reads of the job comes from the object store (contracts/job-io.ts), never from a disk shared with the job.
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import type { z } from 'zod';
import { durationMs } from '../lib/config.js';
import type { JobFiles } from '../lib/job-files.js';
import type { Logger } from '../lib/log.js';
import { JOB_FILES } from '../contracts/job-io.js';
import type { JobPreemption } from '../contracts/pipeline.js';
import type { JobActivity, JobHeartbeat } from './activity.js';
import { gpusOf, waitForAdmission } from './admission-wait.js';
import { checkpointSeen, lastReportedStep, logicalFiles, prepareAttempt, readNodeDevices, withRunnerGpus, writePlacement, type JobOutcome, type NodeDevices } from './attempts.js';
import { JOB_SECRET_RENEW_MS, type JobDeps } from './deps.js';
import type { JobDefinition, JobRecoveryOptions } from './definition.js';
import { JobRejected, type JobPlacement, type JobRequest, type JobState, type QueuePlace } from './executor/types.js';
import { faultOfExit, isPullFailure, recoverFromFault, TRAINER_EXIT } from './faults.js';
import { readPreemptions, recordEviction, recordResumed } from './preemptions.js';
import { admissionGate, type AdmissionGate } from './queue/admission.js';
import { readFailure, readRecoveries, visibleRecoveries, writeRecoveries, type FaultKind } from './recovery.js';
import { endJobSecrets, leftRunning, stopOnRealCancel } from './stop.js';
import { FailureType, nonRetryable, retryable } from '../contracts/failures.js';

const MAX_RESTARTS = 5;
const SLOT_REFRESH_MS = 30_000;

/**
 * Drives a job until it exits 0, then parses its result.json with the given schema.
 * `onPoll` runs on every poll (e.g. to read progress.json) and returns extra heartbeat fields.
 * The job's secrets (its tracking token) are renewed while this drives it and revoked once it has ended.
 */
export async function runJob<T>(deps: JobDeps, activity: JobActivity, p: RunJobOptions<T>): Promise<JobOutcome<T>> {
  const renewal = setInterval(() => void deps.jobSecrets.renew?.(p.job).catch((err: unknown) => deps.log.warn('job secrets not renewed', { job: p.job.name, err: String(err) })), JOB_SECRET_RENEW_MS);
  try {
    const outcome = await driveJob(deps, activity, p);
    await endJobSecrets(deps, p.job);
    return outcome;
  } catch (err) {
    if (jobHasEnded(activity, err)) await endJobSecrets(deps, p.job);
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
function jobHasEnded(activity: JobActivity, err: unknown): boolean {
  if (err instanceof CancelledFailure) return !leftRunning(activity, err);
  return err instanceof ApplicationFailure && (err.nonRetryable || err.type === FailureType.JobFailed);
}

export interface RunJobOptions<T> {
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

async function driveJob<T>(deps: JobDeps, activity: JobActivity, p: RunJobOptions<T>): Promise<JobOutcome<T>> {
  const prior = activity.prior;
  let restarts = prior?.restarts ?? 0;
  const logical = logicalFiles(deps, p.job);
  const recoveries = await readRecoveries(logical);
  const log = deps.log.child({ job: p.job.name, attempt: activity.attempt });
  let { request, files } = await prepareAttempt(deps, p.job, recoveries);
  await validateOrReject(deps, request);
  const gate = admissionGate(deps.db, deps.config, deps.executor.machineGpus);
  const deviceEnv = gate.enabled
    ? await waitForAdmission(deps, activity, gate, p.job, request, p.onWaiting, p.pollMs).catch(async (err: unknown) => {
        // Cancelled (or paused) while it waited: it leaves the queue rather than hold its place.
        if (err instanceof CancelledFailure && !leftRunning(activity, err)) await gate.release(p.job.name);
        throw err;
      })
    : {};
  Object.assign(request.env, deviceEnv);
  let state = await deps.executor.startOrAttach(request);
  const watch: Watch = { pullFailingSince: null, preemptions: await readPreemptions(logical), lastCheckpoint: { name: null, at: Date.now() }, placementWritten: null, devices: null, slotRefreshedAt: Date.now() };
  log.info(prior ? 'job re-attached' : 'job started', { name: request.name, state: state.state });
  const beat = (phase: JobHeartbeat['phase'], extra: Record<string, unknown> = {}): void =>
    activity.heartbeat({ job: request.name, phase, restarts, recoveries: visibleRecoveries(recoveries), preemptions: watch.preemptions.length, ...extra } satisfies JobHeartbeat);
  try {
    for (;;) {
      if (state.state === 'exited' && state.exitCode === 0) break;
      if (state.state === 'exited' || state.state === 'lost' || state.state === 'absent') {
        const ended = await endOfAttempt(deps, p.job, request, files, state);
        if (ended.fault) await recoverFromFault({ ...p, files, logical }, ended.fault, recoveries, log);
        else {
          // Preempted (emergency checkpoint written) or lost (killed with no exit code): a new attempt resumes
          // from the newest checkpoint in the object store.
          if (++restarts > MAX_RESTARTS) throw nonRetryable(FailureType.JobRestartLimit, `${p.job.name}: restarted ${MAX_RESTARTS} times, giving up`);
          log.warn('job is not running, starting a new attempt', { found: ended.found, restarts });
          recoveries.push({ kind: ended.resume, step: await lastReportedStep(files), restart: recoveries.length + 1, change: 'none: resumes from its last checkpoint', at: new Date().toISOString() });
          await writeRecoveries(logical, recoveries);
        }
        beat('restarting');
        ({ request, files } = await prepareAttempt(deps, p.job, recoveries));
        Object.assign(request.env, deviceEnv);
        state = await deps.executor.startOrAttach(request);
        continue;
      }
      const poll = { deps, p, gate, log, logical, request, files, watch };
      if (state.state === 'pending') beat('pending', { waiting: await pollPending(poll, state) });
      else beat('running', await pollRunning(poll, state));
      await activity.sleep(p.pollMs ?? 1000);
      state = await deps.executor.state(request);
    }
  } catch (err) {
    await stopOnRealCancel(deps, activity, request, err);
    // The slot goes with the job: kept while it runs on without us (a worker shutdown), freed once it has ended.
    if (gate.enabled && !leftRunning(activity, err)) await gate.release(p.job.name);
    throw err;
  }
  if (gate.enabled) await gate.release(p.job.name);
  beat('finished');
  const result = await files.readJson(JOB_FILES.result, p.resultSchema);
  if (result === null) throw retryable(FailureType.JobFailed, `${p.job.name}: exited 0 but ${files.file(JOB_FILES.result)} is missing or malformed`);
  return { result, files };
}

type Ended = { fault: FaultKind; resume?: never; found?: never } | { fault?: never; resume: 'preempted' | 'lost'; found: JobState };

/**
 * What an attempt that no longer runs (and did not exit 0) means: a fault to recover from with an adjusted spec,
 * or a preemption or loss to resume from its last checkpoint. A rejected spec or a failed exit fails the job.
 */
async function endOfAttempt(deps: JobDeps, job: JobDefinition, request: JobRequest, files: JobFiles, found: JobState): Promise<Ended> {
  let state = found;
  // A user's own command exits with codes of its own: 2, 3 and 4 mean bad spec, out of memory and divergence
  // only from the product's tools.
  const productTool = job.envelope.tool !== 'command';
  if (state.state === 'exited' && state.exitCode === TRAINER_EXIT.badSpec && productTool)
    throw nonRetryable(FailureType.BadJobSpec, `${job.name}: rejected its job spec:\n${await deps.executor.logTail(request, 5)}`);
  const failure = state.state === 'exited' && state.exitCode !== 0 ? await readFailure(files) : null;
  // torchrun exits 1 whatever its workers exited with: failure.json, which the runner clears when it
  // starts, says what happened.
  if (failure?.kind === 'preempted' && state.state === 'exited') state = { state: 'exited', exitCode: TRAINER_EXIT.preempted };
  const fault = state.state === 'exited' && productTool ? (faultOfExit(state.exitCode) ?? (failure && failure.kind !== 'preempted' ? failure.kind : null)) : null;
  if (fault) return { fault };
  if (state.state === 'exited' && state.exitCode !== TRAINER_EXIT.preempted)
    throw retryable(FailureType.JobFailed, `${job.name}: exited with code ${state.exitCode}${state.reason ? ` (${state.reason})` : ''}:\n${await deps.executor.logTail(request, 15)}`);
  return { resume: state.state === 'exited' ? 'preempted' : 'lost', found: state };
}

/** What the loop keeps of the job from one poll to the next, besides its attempt. */
interface Watch {
  /** since when its image has failed to pull, null while it has not */
  pullFailingSince: number | null;
  preemptions: JobPreemption[];
  /** when the newest checkpoint appeared, for the staleness of one at a preemption (the job's start until one does) */
  lastCheckpoint: { name: string | null; at: number };
  /** the attempt and placement last written to placement.json: a new attempt or a changed placement writes it again */
  placementWritten: string | null;
  /** the GPUs its runners found (devices.json), read while the executor's placement names none */
  devices: NodeDevices | null;
  /** when its admission slot was last refreshed */
  slotRefreshedAt: number;
}

interface Poll<T> {
  deps: JobDeps;
  p: RunJobOptions<T>;
  gate: AdmissionGate;
  log: Logger;
  logical: JobFiles;
  request: JobRequest;
  files: JobFiles;
  watch: Watch;
}

const preemptionContext = <T>(c: Poll<T>) => ({ deps: c.deps, logical: c.logical, attempt: c.files, job: c.p.job, checkpointIntervalSeconds: c.p.checkpointIntervalSeconds ?? null });

/**
 * A pending attempt: fails for good once its image has not pulled for scheduler.image_pull_timeout, records an
 * eviction by its queue, and tells why it waits (returned for the heartbeat).
 */
async function pollPending<T>(c: Poll<T>, state: Extract<JobState, { state: 'pending' }>): Promise<string> {
  const { deps, p, watch } = c;
  const why = [state.reason, state.message].filter(Boolean).join(': ') || 'waiting to be scheduled';
  watch.pullFailingSince = isPullFailure(state.reason) ? (watch.pullFailingSince ?? Date.now()) : null;
  if (watch.pullFailingSince !== null && Date.now() - watch.pullFailingSince > durationMs(deps.config.scheduler.image_pull_timeout)) {
    await deps.executor.stop(c.request, 0);
    throw nonRetryable(FailureType.ImagePullFailed, `${p.job.name}: its image cannot be pulled (${why}) for ${deps.config.scheduler.image_pull_timeout}`);
  }
  if (state.evicted) {
    const before = watch.preemptions.length;
    watch.preemptions = await recordEviction(preemptionContext(c), watch.preemptions, state.evicted, watch.lastCheckpoint.at);
    if (watch.preemptions.length > before) await p.onPreemptions?.(watch.preemptions);
  }
  await p.onWaiting?.(why, state.queue ?? null);
  return why;
}

/**
 * A running attempt: records its resumption after a preemption, its placement and its newest checkpoint, keeps
 * its admission slot fresh, and returns the caller's extra heartbeat fields.
 */
async function pollRunning<T>(c: Poll<T>, state: Extract<JobState, { state: 'running' }>): Promise<Record<string, unknown>> {
  const { p, watch } = c;
  if (watch.preemptions.at(-1)?.resumed_at === null) {
    watch.preemptions = await recordResumed(preemptionContext(c), watch.preemptions);
    await p.onPreemptions?.(watch.preemptions);
  }
  watch.placementWritten = await writePlacement(c.files, await placementOf(c, state), watch.placementWritten, c.log);
  if (p.checkpointIntervalSeconds !== undefined) watch.lastCheckpoint = await checkpointSeen(c.files, watch.lastCheckpoint);
  if (c.gate.enabled && Date.now() - watch.slotRefreshedAt > SLOT_REFRESH_MS) {
    await c.gate.request({ name: p.job.name, organizationId: p.job.organizationId, priority: p.job.priority ?? null, gpus: gpusOf(c.request), alreadyRunning: true });
    watch.slotRefreshedAt = Date.now();
  }
  return p.onPoll ? await p.onPoll(c.files) : {};
}

/** The running attempt's placement; on Kubernetes, with the GPUs its runners found once their devices files appear. */
async function placementOf<T>(c: Poll<T>, state: Extract<JobState, { state: 'running' }>): Promise<JobPlacement | undefined> {
  const placement = state.placement;
  if (!placement || placement.gpu_ids.length > 0 || c.deps.executor.kind !== 'kubernetes') return placement;
  c.watch.devices = await readNodeDevices(c.files, c.request.resources.nodes, c.watch.devices);
  return withRunnerGpus(placement, c.watch.devices.byRank);
}

async function validateOrReject(deps: JobDeps, request: JobRequest): Promise<void> {
  try {
    await deps.executor.validate(request);
  } catch (err) {
    // A job no executor can run fails for good; anything else (the API server unreachable) is retried.
    if (err instanceof JobRejected) throw nonRetryable(FailureType.BadJobSpec, err.message);
    throw err;
  }
}

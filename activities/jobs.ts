// Runs one trainer/tool job to completion from inside an activity: start or re-attach, poll, heartbeat,
// restart after a preemption or a lost process (resuming from its checkpoint), restart after out-of-memory or
// divergence with an adjusted spec (recovery.ts), and stop the job only on a real cancellation.
import { readFile, writeFile, mkdir, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { Context, CancelledFailure, sleep } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { z } from 'zod';
import type { ActivityDeps } from './deps.js';
import type { JobRequest } from './executor/local.js';
import { repoRoot } from '../lib/config.js';
import type { JobRecovery } from '../contracts/pipeline.js';
import type { RecoveryPolicy, TrainJobSpec } from '../contracts/trainer-job.js';
import { adjustSpecAfterFault, readFailure, readRecoveries, writeRecoveries, type FaultKind, type RecoveryLog, type TrainerFailure } from './recovery.js';

/** The trainer's exit codes (trainer/hanzo_ml/cli.py). */
export const TRAINER_EXIT = { badSpec: 2, outOfMemory: 3, diverged: 4, preempted: 143 } as const;
const MAX_RESTARTS = 5;

export interface JobHeartbeat {
  job: string;
  phase: 'running' | 'restarting' | 'finished';
  restarts: number;
  /** every restart after a fault so far, oldest first */
  recoveries?: JobRecovery[];
  [key: string]: unknown;
}

/** How a train job recovers from out-of-memory and divergence; without it those exits fail the activity. */
export interface JobRecoveryOptions {
  policy: RecoveryPolicy;
  /** Called for each fault: `restarting` false means the policy gave up and the activity is about to fail. */
  onFault?: (recovery: JobRecovery, restarting: boolean, failure: TrainerFailure | null) => Promise<void>;
}

export function workdirFor(deps: ActivityDeps, pipelineId: string, job: string): string {
  return join(deps.home, 'work', pipelineId, job);
}

/** processes > 1 runs the trainer under torchrun (the executor's launchCommand). */
export function trainerCommand(deps: ActivityDeps, kind: string, workdir: string, processes = 1): JobRequest {
  return {
    workdir,
    processes,
    command: [deps.bootstrap.python, '-m', 'hanzo_ml', kind, '--spec', join(workdir, 'spec.json'), ...(kind === 'train' ? ['--workdir', workdir] : [])],
    env: {
      PYTHONPATH: join(repoRoot, 'trainer'),
      HF_HUB_OFFLINE: '1',
      TRANSFORMERS_OFFLINE: '1',
      HF_DATASETS_OFFLINE: '1',
      HANZO_ML_TRACKING_TOKEN: deps.trackingToken,
      OMP_NUM_THREADS: String(deps.config.trainer.threads),
      PYTHONUNBUFFERED: '1',
    },
  };
}


export async function writeSpec(workdir: string, spec: unknown): Promise<void> {
  await mkdir(workdir, { recursive: true });
  const tmp = join(workdir, 'spec.json.tmp');
  await writeFile(tmp, JSON.stringify(spec, null, 2));
  await rename(tmp, join(workdir, 'spec.json'));
}

async function logTail(workdir: string, lines = 15): Promise<string> {
  const text = await readFile(join(workdir, 'job.log'), 'utf8').catch(() => '');
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

/**
 * Drives a job until it exits 0, then parses its result file with the given schema.
 * `onPoll` runs on every poll (e.g. to read progress.json) and returns extra heartbeat fields.
 */
export async function runJobToCompletion<T>(
  deps: ActivityDeps,
  p: {
    job: string;
    request: JobRequest;
    resultPath: string;
    resultSchema: z.ZodType<T>;
    pollMs?: number;
    onPoll?: () => Promise<Record<string, unknown>>;
    recovery?: JobRecoveryOptions;
  },
): Promise<T> {
  const ctx = Context.current();
  const prior = ctx.info.heartbeatDetails as JobHeartbeat | undefined;
  let restarts = prior?.restarts ?? 0;
  const workdir = p.request.workdir;
  const recoveries = await readRecoveries(workdir);
  const visible = (): JobRecovery[] => recoveries.map(({ failure_at: _f, spec_after: _s, ...r }) => r);
  const log = deps.log.child({ job: p.job, attempt: ctx.info.attempt });
  if (deps.executor.state(workdir).state === 'lost') {
    // The job died with the worker (or the machine): startOrAttach starts it again from its checkpoint.
    recoveries.push({ kind: 'lost', step: await lastReportedStep(workdir), restart: recoveries.length + 1, change: 'none: resumes from its last checkpoint', at: new Date().toISOString() });
    await writeRecoveries(workdir, recoveries);
  }
  let state = await deps.executor.startOrAttach(p.request);
  log.info(prior ? 'job re-attached' : 'job started', { state: state.state });
  try {
    for (;;) {
      if (state.state === 'exited' && state.exitCode === 0) break;
      if (state.state === 'exited' && state.exitCode === TRAINER_EXIT.badSpec)
        throw ApplicationFailure.nonRetryable(`${p.job}: rejected its job spec:\n${await logTail(workdir, 5)}`, 'BadJobSpec');
      const failure = state.state === 'exited' && state.exitCode !== 0 ? await readFailure(workdir) : null;
      // torchrun exits 1 whatever its workers exited with: failure.json, which each process clears when it
      // starts, says what happened.
      if (failure?.kind === 'preempted' && state.state === 'exited') state = { state: 'exited', exitCode: TRAINER_EXIT.preempted };
      const fault = state.state === 'exited' ? (faultOfExit(state.exitCode) ?? (failure && failure.kind !== 'preempted' ? failure.kind : null)) : null;
      if (fault) {
        await recoverFromFault(p, fault, recoveries, log);
        ctx.heartbeat({ job: p.job, phase: 'restarting', restarts, recoveries: visible() } satisfies JobHeartbeat);
        state = await deps.executor.restart(p.request);
        continue;
      }
      if (state.state === 'exited' && state.exitCode !== TRAINER_EXIT.preempted)
        throw ApplicationFailure.retryable(`${p.job}: exited with code ${state.exitCode}:\n${await logTail(workdir)}`, 'JobFailed');
      if (state.state !== 'running') {
        // Preempted (emergency checkpoint written) or lost (killed with no exit code): resume in place.
        if (++restarts > MAX_RESTARTS) throw ApplicationFailure.nonRetryable(`${p.job}: restarted ${MAX_RESTARTS} times, giving up`, 'JobRestartLimit');
        log.warn('job is not running, restarting it', { found: state, restarts });
        recoveries.push({
          kind: state.state === 'exited' ? 'preempted' : 'lost',
          step: await lastReportedStep(workdir),
          restart: recoveries.length + 1,
          change: 'none: resumes from its last checkpoint',
          at: new Date().toISOString(),
        });
        await writeRecoveries(workdir, recoveries);
        ctx.heartbeat({ job: p.job, phase: 'restarting', restarts, recoveries: visible() } satisfies JobHeartbeat);
        state = await deps.executor.restart(p.request);
        continue;
      }
      const extra = p.onPoll ? await p.onPoll() : {};
      ctx.heartbeat({ job: p.job, phase: 'running', restarts, recoveries: visible(), ...extra } satisfies JobHeartbeat);
      await sleep(p.pollMs ?? 1000);
      state = deps.executor.state(workdir);
    }
  } catch (err) {
    await stopOnRealCancel(deps, p, err);
    throw err;
  }
  ctx.heartbeat({ job: p.job, phase: 'finished', restarts, recoveries: visible() } satisfies JobHeartbeat);
  const raw = JSON.parse(await readFile(p.resultPath, 'utf8'));
  return p.resultSchema.parse(raw);
}

function faultOfExit(code: number): FaultKind | null {
  if (code === TRAINER_EXIT.outOfMemory) return 'out_of_memory';
  if (code === TRAINER_EXIT.diverged) return 'diverged';
  return null;
}

async function lastReportedStep(workdir: string): Promise<number | null> {
  try {
    const step = (JSON.parse(await readFile(join(workdir, 'progress.json'), 'utf8')) as { step?: unknown }).step;
    return typeof step === 'number' ? step : null;
  } catch {
    return null;
  }
}

/**
 * Rewrites spec.json for the next attempt after out-of-memory or divergence, or fails the activity for good
 * when the policy allows no more. Idempotent per failure: the record carries the failure's time and the spec it
 * chose, so an activity retried between writing the record and restarting re-applies that spec, not a new one.
 */
async function recoverFromFault(
  p: { job: string; request: JobRequest; recovery?: JobRecoveryOptions },
  kind: FaultKind,
  recoveries: RecoveryLog['recoveries'],
  log: ActivityDeps['log'],
): Promise<void> {
  const workdir = p.request.workdir;
  const failure = await readFailure(workdir);
  const last = recoveries.at(-1);
  if (failure && last?.failure_at === failure.at && last.spec_after) {
    await writeSpec(workdir, last.spec_after);
    return;
  }
  const failureType = kind === 'out_of_memory' ? 'OutOfMemory' : 'TrainingDiverged';
  const what = failure?.message ?? (await logTail(workdir, 5));
  const record = { kind, step: failure?.step ?? null, restart: recoveries.length + 1, at: new Date().toISOString() };
  if (!p.recovery) throw ApplicationFailure.nonRetryable(`${p.job}: ${kind.replace(/_/g, ' ')}: ${what}`, failureType);
  const spec = JSON.parse(await readFile(join(workdir, 'spec.json'), 'utf8')) as TrainJobSpec;
  const adjusted = adjustSpecAfterFault(spec, kind, p.recovery.policy, recoveries);
  if (!adjusted.ok) {
    log.error('job fault: giving up', { kind, reason: adjusted.reason });
    await p.recovery.onFault?.({ ...record, change: `none: ${adjusted.reason}` }, false, failure);
    throw ApplicationFailure.nonRetryable(`${p.job}: ${adjusted.reason}: ${what}`, failureType);
  }
  log.warn('job fault: restarting with an adjusted spec', { kind, change: adjusted.change });
  const recovery = { ...record, change: adjusted.change };
  recoveries.push({ ...recovery, failure_at: failure?.at, spec_after: adjusted.spec });
  await writeRecoveries(workdir, recoveries);
  await writeSpec(workdir, adjusted.spec);
  await p.recovery.onFault?.(recovery, true, failure);
}

/** A cancelled workflow stops its job; a worker shutdown or timeout leaves it running for the next attempt. */
async function stopOnRealCancel(deps: ActivityDeps, p: { job: string; request: JobRequest }, err: unknown): Promise<void> {
  if (!(err instanceof CancelledFailure)) return;
  const details = Context.current().cancellationDetails;
  if (!details?.cancelRequested) return;
  deps.log.warn('pipeline cancelled: stopping job', { job: p.job });
  deps.executor.signal(p.request.workdir, 'SIGTERM');
  for (let i = 0; i < 120 && deps.executor.state(p.request.workdir).state === 'running'; i++) await new Promise((r) => setTimeout(r, 500));
  deps.executor.signal(p.request.workdir, 'SIGKILL');
}

// Runs one trainer/tool job to completion from inside an activity: start or re-attach, poll, heartbeat,
// restart after a preemption or a lost process, and stop the job only on a real cancellation.
import { readFile, writeFile, mkdir, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { Context, CancelledFailure, sleep } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { z } from 'zod';
import type { ActivityDeps } from './deps.js';
import type { JobRequest } from './executor/local.js';
import { repoRoot } from '../lib/config.js';

export const TRAINER_EXIT = { badSpec: 2, preempted: 143 } as const;
const MAX_RESTARTS = 5;

export interface JobHeartbeat {
  job: string;
  phase: 'running' | 'restarting' | 'finished';
  restarts: number;
  [key: string]: unknown;
}

export function workdirFor(deps: ActivityDeps, pipelineId: string, job: string): string {
  return join(deps.home, 'work', pipelineId, job);
}

export function trainerCommand(deps: ActivityDeps, kind: string, workdir: string): JobRequest {
  return {
    workdir,
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
  p: { job: string; request: JobRequest; resultPath: string; resultSchema: z.ZodType<T>; pollMs?: number; onPoll?: () => Promise<Record<string, unknown>> },
): Promise<T> {
  const ctx = Context.current();
  const prior = ctx.info.heartbeatDetails as JobHeartbeat | undefined;
  let restarts = prior?.restarts ?? 0;
  const log = deps.log.child({ job: p.job, attempt: ctx.info.attempt });
  let state = await deps.executor.startOrAttach(p.request);
  log.info(prior ? 'job re-attached' : 'job started', { state: state.state });
  try {
    for (;;) {
      if (state.state === 'exited' && state.exitCode === 0) break;
      if (state.state === 'exited' && state.exitCode === TRAINER_EXIT.badSpec)
        throw ApplicationFailure.nonRetryable(`${p.job}: rejected its job spec:\n${await logTail(p.request.workdir, 5)}`, 'BadJobSpec');
      if (state.state === 'exited' && state.exitCode !== TRAINER_EXIT.preempted)
        throw ApplicationFailure.retryable(`${p.job}: exited with code ${state.exitCode}:\n${await logTail(p.request.workdir)}`, 'JobFailed');
      if (state.state !== 'running') {
        // Preempted (emergency checkpoint written) or lost (killed with no exit code): resume in place.
        if (++restarts > MAX_RESTARTS) throw ApplicationFailure.nonRetryable(`${p.job}: restarted ${MAX_RESTARTS} times, giving up`, 'JobRestartLimit');
        log.warn('job is not running, restarting it', { found: state, restarts });
        ctx.heartbeat({ job: p.job, phase: 'restarting', restarts } satisfies JobHeartbeat);
        state = await deps.executor.restart(p.request);
        continue;
      }
      const extra = p.onPoll ? await p.onPoll() : {};
      ctx.heartbeat({ job: p.job, phase: 'running', restarts, ...extra } satisfies JobHeartbeat);
      await sleep(p.pollMs ?? 1000);
      state = deps.executor.state(p.request.workdir);
    }
  } catch (err) {
    await stopOnRealCancel(deps, p, err);
    throw err;
  }
  ctx.heartbeat({ job: p.job, phase: 'finished', restarts } satisfies JobHeartbeat);
  const raw = JSON.parse(await readFile(p.resultPath, 'utf8'));
  return p.resultSchema.parse(raw);
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

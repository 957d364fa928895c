// The run loop (jobs/run-loop.ts) driven by a plain JobActivity, with no Temporal activity around it: the seam
// activities/run-job.ts fills with Temporal's Context. Jobs are node scripts on the real local executor, playing
// the job runner; the catalogue is not needed (no admission quotas are configured).
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { JobActivity } from '../jobs/activity.js';
import { currentAttempt } from '../jobs/attempts.js';
import { defineJob } from '../jobs/definition.js';
import type { JobDeps } from '../jobs/deps.js';
import { LocalExecutor } from '../jobs/executor/local.js';
import type { JobExecutor, JobRequest, JobState } from '../jobs/executor/types.js';
import { runJob } from '../jobs/run-loop.js';
import { loadConfig } from '../lib/config.js';
import { createLogger } from '../lib/log.js';
import { FileObjectStore } from '../lib/object-store.js';

/** Deps whose jobs run `script` with the job's directory in the store as their first argument. */
function scriptDeps(script: string): JobDeps & { executor: LocalExecutor } {
  const root = mkdtempSync(join(tmpdir(), 'hanzo-ml-run-loop-'));
  const loaded = loadConfig({ HANZO_ML_HOME: root, HANZO_ML_LOGGING_LEVEL: 'error' });
  const executor = new LocalExecutor({
    workRoot: join(root, 'work'),
    python: 'unused',
    env: {},
    // The scratch path names the job's workdir on the command line, which is how the executor knows its process.
    command: (job, scratch) => [process.execPath, '-e', script, dirname(fileURLToPath(job.envelopeUri)), scratch],
  });
  const store = new FileObjectStore(join(root, 'objects'));
  // The catalogue stands in as null: with no quotas configured the run loop never reads it.
  return { db: null as never, store, config: loaded.config, bootstrap: loaded.bootstrap, executor, log: createLogger({ level: 'error', format: 'text' }), jobSecrets: async () => ({}) };
}

/** A JobActivity that records its heartbeats and, after `polls` sleeps, is cancelled (on request or not). */
function plainActivity(o: { polls?: number; cancelRequested?: boolean } = {}): JobActivity & { beats: Record<string, unknown>[] } {
  const beats: Record<string, unknown>[] = [];
  let sleeps = 0;
  return {
    beats,
    prior: undefined,
    attempt: 1,
    heartbeat: (details) => void beats.push(details),
    sleep: async (ms) => {
      if (o.polls !== undefined && ++sleeps > o.polls) throw new CancelledFailure('cancelled');
      await new Promise((r) => setTimeout(r, ms));
    },
    cancelRequested: () => o.cancelRequested ?? false,
  };
}

const job = (name: string) => defineJob({ name, kind: 'command', organizationId: 'dev', tool: 'command', spec: {} });
const resultSchema = z.object({ ok: z.boolean() });
const FOREVER = `setInterval(() => {}, 1000);`;

describe('the run loop without Temporal', () => {
  it('runs a job to its result, heartbeating through the activity it is given', async () => {
    const deps = scriptDeps(`require('fs').writeFileSync(process.argv[1] + '/result.json', JSON.stringify({ ok: true }));`);
    const activity = plainActivity();
    const { result } = await runJob(deps, activity, { job: job('plain'), resultSchema, pollMs: 50 });
    expect(result).toEqual({ ok: true });
    expect(activity.beats.at(-1)).toMatchObject({ job: 'plain', phase: 'finished', restarts: 0 });
  }, 30_000);

  it('stops the job when the activity is cancelled on request', async () => {
    const deps = scriptDeps(FOREVER);
    await expect(runJob(deps, plainActivity({ polls: 3, cancelRequested: true }), { job: job('cancelled'), resultSchema, pollMs: 50 })).rejects.toBeInstanceOf(CancelledFailure);
    expect((await deps.executor.state(await attemptOf(deps, 'cancelled'))).state).not.toBe('running');
  }, 30_000);

  it('leaves the job running when the activity ends without a cancellation request (a worker shutdown)', async () => {
    const deps = scriptDeps(FOREVER);
    await expect(runJob(deps, plainActivity({ polls: 3, cancelRequested: false }), { job: job('left'), resultSchema, pollMs: 50 })).rejects.toBeInstanceOf(CancelledFailure);
    const request = await attemptOf(deps, 'left');
    expect((await deps.executor.state(request)).state).toBe('running');
    await deps.executor.stop(request, 0);
  }, 30_000);
});

/** The request of the job's current attempt, as the executor knows it. */
const attemptOf = (deps: JobDeps, name: string): Promise<JobRequest> => currentAttempt(deps, job(name));

/**
 * A stand-in for the Kubernetes executor whose pod never leaves ErrImagePull (a cluster is not what this is
 * about): it records the stops it is asked for.
 */
function imageNeverPulls(): JobExecutor & { stopped: string[] } {
  const stopped: string[] = [];
  const pending: JobState = { state: 'pending', reason: 'ErrImagePull', message: 'registry.example/trainer:missing not found' };
  return {
    kind: 'kubernetes',
    machineGpus: null,
    stopped,
    validate: async () => undefined,
    startOrAttach: async () => pending,
    state: async () => pending,
    stop: async (job) => void stopped.push(job.name),
    logTail: async () => '',
  };
}

describe('a job whose image cannot be pulled', () => {
  it('fails for good once its image has not pulled for scheduler.image_pull_timeout, and is stopped', async () => {
    const base = scriptDeps(FOREVER);
    const executor = imageNeverPulls();
    const deps: JobDeps = { ...base, executor, config: { ...base.config, scheduler: { ...base.config.scheduler, image_pull_timeout: '300ms' } } };
    const activity = plainActivity();
    const run = runJob(deps, activity, { job: job('unpullable'), resultSchema, pollMs: 50 });
    await expect(run).rejects.toBeInstanceOf(ApplicationFailure);
    await expect(run).rejects.toMatchObject({ type: 'ImagePullFailed', nonRetryable: true, message: expect.stringContaining('ErrImagePull: registry.example/trainer:missing not found') });
    expect(executor.stopped).toEqual(['unpullable']);
    // While it waited, the heartbeats said why.
    expect(activity.beats[0]).toMatchObject({ phase: 'pending', waiting: 'ErrImagePull: registry.example/trainer:missing not found' });
  }, 30_000);
});

// A job's event log (db/repo/job-events.ts) on both engines: status events from setJobStatus in the job's own
// transaction, training progress as metrics / checkpoint / message events that a restarted worker does not repeat,
// ascending reads after a cursor, other organizations' jobs unseen, and, on Postgres, concurrent appends to one job
// that a follower reading "after the last seq it saw" never skips.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { insertJob, setJobStatus } from '../db/repo/jobs.js';
import { appendJobEvents, listJobEvents, type JobEventRow } from '../db/repo/job-events.js';
import { startPostgres, type TestPostgres } from './support/postgres.js';
import { progressEvents } from '../jobs/progress-events.js';
import type { TrainProgress } from '../contracts/trainer-job.js';

const engines = ['pglite', 'postgres'] as const;

describe.each(engines)('job events on %s', (engine) => {
  let pgServer: TestPostgres | null = null;
  let cat: Catalogue;

  beforeAll(async () => {
    if (engine === 'postgres') {
      pgServer = await startPostgres();
      cat = await openCatalogue({ url: await pgServer.createDatabase('job_events') });
    } else {
      cat = await openCatalogue({});
    }
    await seedDevOrganization(cat.db, 'org-a', 'token-a');
    await seedDevOrganization(cat.db, 'org-b', 'token-b');
  }, 120_000);
  afterAll(async () => {
    await cat.close();
    await pgServer?.stop();
  });

  const job = (id: string, org = 'org-a') =>
    insertJob(cat.db, { id, organizationId: org, name: id, submittedBy: 'dev', type: 'training', kind: 'command', spec: {}, status: 'queued', workflowId: `job:${id}` });

  it('records each change of status once, with the queue reason and the failure message, in order', async () => {
    await job('j1');
    await setJobStatus(cat.db, 'j1', 'queued', { message: 'queued at position 2: quota' });
    await setJobStatus(cat.db, 'j1', 'queued', { message: 'queued at position 2: quota' });
    await setJobStatus(cat.db, 'j1', 'running', { message: null });
    await setJobStatus(cat.db, 'j1', 'running', { message: null });
    await setJobStatus(cat.db, 'j1', 'failed', { message: 'exited with code 3' });
    await setJobStatus(cat.db, 'j1', 'running', { message: null });
    const events = await listJobEvents(cat.db, 'org-a', 'j1', { limit: 100 });
    expect(events.map((e) => [e.type, e.level, e.message])).toEqual([
      ['status', 'info', 'queued'],
      ['status', 'info', 'queued: queued at position 2: quota'],
      ['status', 'info', 'running'],
      ['status', 'error', 'failed: exited with code 3'],
    ]);
    expect(events.at(-1)!.data).toEqual({ status: 'failed', message: 'exited with code 3' });
    expect(events.map((e) => e.seq)).toEqual([...events.map((e) => e.seq)].sort((a, b) => a - b));
  });

  it('records each new step, checkpoint and trainer event once, also after the worker restarts and the trainer resumes', async () => {
    await job('j4');
    const progress = (step: number, checkpoint: string | null, events: TrainProgress['events'] = []): TrainProgress => ({
      step,
      max_steps: 10,
      resumed_from_step: null,
      last_checkpoint: checkpoint,
      metrics: { 'train/loss': 1 / step },
      best_checkpoint: null,
      events,
    });
    const skipped = { kind: 'checkpoint_skipped' as const, step: 2, message: 'checkpoint step-2 is incomplete: skipped', at: '2026-01-01T00:00:01.000Z' };
    const first = progressEvents({ db: cat.db }, 'org-a', 'j4');
    for (const p of [progress(1, null), progress(1, null), progress(3, 'step-2'), progress(4, 'step-2', [skipped])]) await first(p);
    // A new worker re-attaches: the same progress.json again, then the trainer resumes from step 2 and goes on.
    const second = progressEvents({ db: cat.db }, 'org-a', 'j4');
    for (const p of [progress(4, 'step-2', [skipped]), progress(3, 'step-2'), progress(5, 'step-4')]) await second(p);
    const events = (await listJobEvents(cat.db, 'org-a', 'j4', { limit: 100 })).filter((e) => e.type !== 'status');
    expect(events.map((e) => [e.type, e.message])).toEqual([
      ['metrics', 'step 1/10: train/loss=1'],
      ['metrics', 'step 3/10: train/loss=0.3333'],
      ['checkpoint', 'checkpoint step-2 written'],
      ['metrics', 'step 4/10: train/loss=0.2500'],
      ['message', 'checkpoint step-2 is incomplete: skipped'],
      ['metrics', 'step 5/10: train/loss=0.2000'],
      ['checkpoint', 'checkpoint step-4 written'],
    ]);
    expect(events[0]!.data).toEqual({ step: 1, max_steps: 10, metrics: { 'train/loss': 1 } });
  });

  it('pages after a cursor, ascending, and shows no organization another one\'s job', async () => {
    await job('j2');
    await appendJobEvents(
      cat.db,
      Array.from({ length: 7 }, (_, i) => ({ organizationId: 'org-a', jobId: 'j2', level: 'info' as const, type: 'metrics' as const, message: `step ${i + 1}`, data: { step: i + 1 } })),
    );
    const first = await listJobEvents(cat.db, 'org-a', 'j2', { limit: 4 });
    const rest = await listJobEvents(cat.db, 'org-a', 'j2', { after: first.at(-1)!.seq, limit: 100 });
    expect([...first, ...rest].map((e) => e.message)).toEqual(['queued', ...Array.from({ length: 7 }, (_, i) => `step ${i + 1}`)]);
    expect(await listJobEvents(cat.db, 'org-b', 'j2', { limit: 100 })).toEqual([]);
  });

  it('never lets a follower skip an event while appends to the job run concurrently', async () => {
    await job('j3');
    const writers = Array.from({ length: 8 }, (_, w) =>
      (async () => {
        for (let i = 0; i < 15; i++)
          await appendJobEvents(cat.db, [{ organizationId: 'org-a', jobId: 'j3', level: 'info', type: 'message', message: `${w}:${i}`, data: {} }]);
      })(),
    );
    const seen: JobEventRow[] = [];
    let done = false;
    const follower = (async () => {
      while (!done || seen.length < 121) {
        const page = await listJobEvents(cat.db, 'org-a', 'j3', { after: seen.at(-1)?.seq, limit: 10 });
        seen.push(...page);
        if (done && page.length === 0) break;
      }
    })();
    await Promise.all(writers);
    done = true;
    await follower;
    const all = await listJobEvents(cat.db, 'org-a', 'j3', { limit: 1000 });
    expect(all).toHaveLength(121);
    expect(seen.map((e) => e.seq)).toEqual(all.map((e) => e.seq));
  });
});

// A queued job's place told live: each change of its position or reason in its queue is a `queue` event of the job
// (db/repo/jobs.ts setJobQueue), never a repeat of an unchanged place and at most one per QUEUE_EVENT_MIN_MS, and
// GET /v1/stream carries it. End to end: jobs wait behind a full local admission gate (max_concurrent_jobs 1), run
// by the real LocalExecutor and run loop with the submitted job's phase recorder, and the page stream of the last
// one shows its position go from 2 to 1 when the one before it is admitted. The jobs are small node scripts (the
// executor's `command` option stands in for the trainer); the catalogue is PGlite; Temporal is not used.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MockActivityEnvironment } from '@temporalio/testing';
import { appWithoutTemporal } from './support/api-app.js';
import { DEV_TOKEN, testConfig } from './support/config.js';
import { readSse } from './support/sse.js';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { listJobEvents } from '../db/repo/job-events.js';
import { insertJob, QUEUE_EVENT_MIN_MS, setJobQueue, setJobStatus } from '../db/repo/jobs.js';
import { runJobToCompletion } from '../activities/run-job.js';
import type { ActivityDeps } from '../activities/deps.js';
import { ConfigSchema } from '../contracts/config.js';
import type { JobDefinition } from '../jobs/definition.js';
import { LocalExecutor } from '../jobs/executor/local.js';
import { jobPhaseRecorder, phaseCallbacks } from '../jobs/phases.js';
import { FileObjectStore } from '../lib/object-store.js';
import { createLogger } from '../lib/log.js';

/** Runs `ms`, then writes its result where the run loop reads it. */
const SCRIPT = `const [d, ms] = process.argv.slice(1); setTimeout(() => require('fs').writeFileSync(d + '/result.json', '{"ok":true}'), Number(ms));`;

let cat: Catalogue;
let app: ReturnType<typeof appWithoutTemporal>;

const queuedJob = (id: string) =>
  insertJob(cat.db, { id, organizationId: 'dev', name: id, submittedBy: 'dev', type: 'training', kind: 'command', spec: {}, status: 'queued', workflowId: `job:${id}` });
const queueEvents = async (id: string) => (await listJobEvents(cat.db, 'dev', id, { limit: 100 })).filter((e) => e.type === 'queue');
const at = (ms: number) => new Date(Date.UTC(2026, 0, 1) + ms);

beforeAll(async () => {
  cat = await openCatalogue({});
  await seedDevOrganization(cat.db, 'dev', DEV_TOKEN);
  app = appWithoutTemporal(cat.db, testConfig());
});
afterAll(async () => cat?.close());

describe("a queued job's place", () => {
  it('is told once per change of position or reason, not on each poll that repeats it', async () => {
    await queuedJob('q-once');
    const place = { queue: 'dev', position: 2, reason: 'behind 1 job(s)' };
    for (let poll = 0; poll < 5; poll++) await setJobQueue(cat.db, 'q-once', place, at(poll * QUEUE_EVENT_MIN_MS));
    await setJobQueue(cat.db, 'q-once', { ...place, reason: 'waiting for a slot' }, at(6 * QUEUE_EVENT_MIN_MS));
    await setJobQueue(cat.db, 'q-once', { ...place, position: 1, reason: 'waiting for a slot' }, at(8 * QUEUE_EVENT_MIN_MS));
    const events = await queueEvents('q-once');
    expect(events.map((e) => [e.message, e.data])).toEqual([
      ['queued #2 in dev: behind 1 job(s)', { queue: 'dev', position: 2, reason: 'behind 1 job(s)' }],
      ['queued #2 in dev: waiting for a slot', { queue: 'dev', position: 2, reason: 'waiting for a slot' }],
      ['queued #1 in dev: waiting for a slot', { queue: 'dev', position: 1, reason: 'waiting for a slot' }],
    ]);
  });

  it('holds a change back within the least interval, and tells the newest place at the first poll after it', async () => {
    await queuedJob('q-rate');
    const place = (position: number) => ({ queue: 'dev', position, reason: 'behind others' });
    await setJobQueue(cat.db, 'q-rate', place(4), at(0));
    await setJobQueue(cat.db, 'q-rate', place(3), at(QUEUE_EVENT_MIN_MS / 4));
    await setJobQueue(cat.db, 'q-rate', place(2), at(QUEUE_EVENT_MIN_MS / 2));
    expect((await queueEvents('q-rate')).map((e) => e.data)).toEqual([place(4)]);
    await setJobQueue(cat.db, 'q-rate', place(2), at(QUEUE_EVENT_MIN_MS));
    expect((await queueEvents('q-rate')).map((e) => (e.data as { position: number }).position)).toEqual([4, 2]);
  });

  it('is told again when the job waits again after it ran, even at the same place', async () => {
    await queuedJob('q-again');
    const place = { queue: 'dev', position: 1, reason: 'waiting for a slot' };
    await setJobQueue(cat.db, 'q-again', place, at(0));
    await setJobStatus(cat.db, 'q-again', 'running', { message: null });
    await setJobStatus(cat.db, 'q-again', 'queued', { message: 'resumed' });
    await setJobQueue(cat.db, 'q-again', place, at(QUEUE_EVENT_MIN_MS / 2));
    expect(await queueEvents('q-again')).toHaveLength(2);
  });

  it('is not told for a job that is not queued', async () => {
    await queuedJob('q-paused');
    await setJobStatus(cat.db, 'q-paused', 'paused', { message: null });
    await setJobQueue(cat.db, 'q-paused', { queue: 'dev', position: 1, reason: 'x' }, at(0));
    expect(await queueEvents('q-paused')).toEqual([]);
  });
});

describe('behind a full local admission gate', () => {
  const root = mkdtempSync(join(tmpdir(), 'hanzo-ml-queue-events-'));
  const config = ConfigSchema.parse({ scheduler: { quotas: { dev: { max_gpus: 0, max_concurrent_jobs: 1 } } } });
  const executor = new LocalExecutor({
    workRoot: join(root, 'work'),
    python: 'unused',
    env: {},
    gpus: 0,
    command: (job, scratch) => [process.execPath, '-e', SCRIPT, dirname(fileURLToPath(job.envelopeUri)), String(job.name.startsWith('gate-third') ? 200 : 2 * QUEUE_EVENT_MIN_MS), scratch],
  });
  const run = (id: string) => {
    const deps = { db: cat.db, executor, store: new FileObjectStore(join(root, 'objects')), log: createLogger({ level: 'error', format: 'text' }), config, jobSecrets: async () => ({}) } as unknown as ActivityDeps;
    const job: JobDefinition = { name: id, kind: 'test', organizationId: 'dev', priority: null, envelope: { tool: 'trainer', spec: {} }, resources: { gpus_per_node: 0 } };
    return new MockActivityEnvironment().run(() => runJobToCompletion(deps, { job, resultSchema: z.object({ ok: z.boolean() }), pollMs: 100, ...phaseCallbacks(jobPhaseRecorder(cat.db, id)) }));
  };
  const waitUntil = async (what: string, ok: () => Promise<boolean>) => {
    for (const until = Date.now() + 60_000; !(await ok()); await new Promise((r) => setTimeout(r, 50))) if (Date.now() > until) throw new Error(`timed out waiting until ${what}`);
  };

  it('streams the position of the job behind two others going from 2 to 1 when the first of them is admitted', async () => {
    for (const id of ['gate-first', 'gate-second', 'gate-third']) await queuedJob(id);
    const res = await app.request('/v1/stream?topics=job:gate-third', { headers: { authorization: `Bearer ${DEV_TOKEN}` } });
    expect(res.status).toBe(200);
    type Frame = { event: string; data: { event?: { type: string; data: Record<string, unknown> } } };
    const sse = readSse(res, (f) => (f.data ? ({ event: f.event!, data: JSON.parse(f.data) } as Frame) : undefined), 60_000);
    try {
      const first = run('gate-first');
      await waitUntil('the first job runs', async () => (await listJobEvents(cat.db, 'dev', 'gate-first', { limit: 100 })).some((e) => e.type === 'status' && e.data.status === 'running'));
      const second = run('gate-second');
      await waitUntil('the second job waits', async () => (await queueEvents('gate-second')).length > 0);
      const third = run('gate-third');
      await Promise.all([first, second, third]);
      const places = () => sse.items.filter((f) => f.data.event?.type === 'queue').map((f) => f.data.event!.data);
      const running = () => sse.items.findIndex((f) => f.data.event?.type === 'status' && f.data.event.data.status === 'running');
      await waitUntil('the stream has told the third job running', async () => running() >= 0);
      // Its position went from 2 to 1; between them its reason may change too (the first job gone, the second not yet
      // admitted: "behind 1 job"), each change told once.
      const told = places();
      expect(told.map((p) => p.position).filter((p, i, all) => p !== all[i - 1])).toEqual([2, 1]);
      expect(told[0]).toMatchObject({ queue: 'dev', position: 2, reason: expect.stringMatching(/max_concurrent_jobs 1 reached/) });
      for (let i = 1; i < told.length; i++) expect(told[i], `event ${i} repeats the one before`).not.toEqual(told[i - 1]);
      // Every place was told before the job ran, as it happened, on the page's one stream.
      const lastPlace = sse.items.map((f) => f.data.event?.type).lastIndexOf('queue');
      expect(lastPlace).toBeLessThan(running());
    } finally {
      await sse.close();
    }
  }, 120_000);
});

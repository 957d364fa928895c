// The admission gate in front of the executor (jobs/queue/admission.ts) on the real catalogue (PGlite): an
// organization's max_concurrent_jobs under a burst, its queue order (priority, then arrival), and in the embedded
// mode this machine's GPUs handed out by CUDA device index, never one to two jobs. The jobs are small node
// scripts run by the real LocalExecutor (its `command` option stands in for the trainer, which this is not about).
import { mkdirSync, mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MockActivityEnvironment } from '@temporalio/testing';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { LocalExecutor } from '../jobs/executor/local.js';
import { runJobToCompletion } from '../activities/run-job.js';
import type { JobDefinition } from '../jobs/definition.js';
import { FileObjectStore } from '../lib/object-store.js';
import type { ActivityDeps } from '../activities/deps.js';
import { ConfigSchema } from '../contracts/config.js';
import type { JobPriority } from '../contracts/config.js';
import { createLogger } from '../lib/log.js';
import { listAdmissions } from '../db/repo/admissions.js';
import { queueStatus } from '../jobs/queue/queue-status.js';
import { admissionGate } from '../jobs/queue/admission.js';
import { createMetrics } from '../api/metrics.js';

/** Records when it ran and which devices it saw, runs `ms`, then writes its result. */
const SCRIPT = `const fs = require('fs'); const [d, log, ms] = process.argv.slice(1);
  const name = require('path').basename(d);
  fs.writeFileSync(log + '/' + name + '.start', JSON.stringify({ at: Date.now(), devices: process.env.CUDA_VISIBLE_DEVICES ?? null }));
  setTimeout(() => { fs.writeFileSync(log + '/' + name + '.end', String(Date.now())); fs.writeFileSync(d + '/result.json', '{"ok":true}'); }, Number(ms));`;

let cat: Catalogue;

function setup(o: { quotas?: Record<string, unknown>; gpus?: number; ms?: number }) {
  const root = mkdtempSync(join(tmpdir(), 'hanzo-ml-admission-'));
  const log = join(root, 'log');
  mkdirSync(log);
  const config = ConfigSchema.parse({ scheduler: { quotas: o.quotas ?? {} } });
  const executor = new LocalExecutor({
    workRoot: join(root, 'work'),
    python: 'unused',
    env: {},
    gpus: o.gpus ?? 0,
    command: (job, scratch) => [process.execPath, '-e', SCRIPT, dirname(fileURLToPath(job.envelopeUri)), log, String(o.ms ?? 300), scratch],
  });
  const deps = { db: cat.db, executor, store: new FileObjectStore(join(root, 'objects')), log: createLogger({ level: 'error', format: 'text' }), config, jobSecrets: async () => ({}) } as unknown as ActivityDeps;
  const run = (name: string, org: string, priority: JobPriority | null = null, gpus = 0) => {
    const job: JobDefinition = { name, kind: 'test', organizationId: org, priority, envelope: { tool: 'trainer', spec: {} }, resources: { gpus_per_node: gpus } };
    return new MockActivityEnvironment().run(() => runJobToCompletion(deps, { job, resultSchema: z.object({ ok: z.boolean() }), pollMs: 100 }));
  };
  /** Every job's [start, end] and the devices it saw, from its own records. */
  const ran = () => {
    const files = readdirSync(log);
    return files.filter((f) => f.endsWith('.start')).map((f) => {
      const name = f.slice(0, -'.start'.length);
      const start = JSON.parse(readFileSync(join(log, f), 'utf8')) as { at: number; devices: string | null };
      const end = files.includes(`${name}.end`) ? Number(readFileSync(join(log, `${name}.end`), 'utf8')) : Infinity;
      return { name, start: start.at, end, devices: start.devices };
    });
  };
  return { run, ran };
}

/** The most jobs whose [start, end] intervals overlap at one instant. */
function maxOverlap(intervals: { start: number; end: number }[]): number {
  const points = intervals.flatMap((i) => [[i.start, 1] as const, [i.end, -1] as const]).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let now = 0;
  let max = 0;
  for (const [, d] of points) max = Math.max(max, (now += d));
  return max;
}

describe('the admission gate', () => {
  beforeAll(async () => {
    cat = await openCatalogue({});
  });
  afterAll(async () => {
    await cat?.close();
  });

  it('holds max_concurrent_jobs under a burst of 50 submissions, and runs every one', async () => {
    const { run, ran } = setup({ quotas: { burst: { max_gpus: 0, max_concurrent_jobs: 3 } }, ms: 200 });
    let admittedSeen = 0;
    const watch = setInterval(() => {
      void listAdmissions(cat.db, 'burst').then((rows) => (admittedSeen = Math.max(admittedSeen, rows.filter((r) => r.state === 'admitted').length)));
    }, 50);
    try {
      const results = await Promise.all(Array.from({ length: 50 }, (_, i) => run(`burst-${i}`, 'burst')));
      expect(results.every((r) => (r as { result: { ok: boolean } }).result.ok)).toBe(true);
    } finally {
      clearInterval(watch);
    }
    const jobs = ran();
    expect(jobs).toHaveLength(50);
    expect(maxOverlap(jobs)).toBeLessThanOrEqual(3);
    expect(maxOverlap(jobs)).toBeGreaterThanOrEqual(2);
    expect(admittedSeen).toBeLessThanOrEqual(3);
    expect(await listAdmissions(cat.db, 'burst')).toEqual([]); // every slot given back
  }, 300_000);

  it('admits a waiting high-priority job before an earlier low-priority one of the same organization', async () => {
    const { run, ran } = setup({ quotas: { prio: { max_gpus: 0, max_concurrent_jobs: 1, priority: 'high' } }, ms: 1500 });
    const holder = run('holder', 'prio');
    await waitUntil(() => ran().some((j) => j.name === 'holder'));
    const low = run('low-first', 'prio', 'low');
    await waitUntil(async () => (await listAdmissions(cat.db, 'prio')).length === 2);
    // What `hanzo-ml queue list` shows of it.
    const [queue] = await queueStatus(cat.db, ConfigSchema.parse({ scheduler: { quotas: { prio: { max_gpus: 0, max_concurrent_jobs: 1 } } } }), null, ['prio']);
    expect(queue).toMatchObject({ organization: 'prio', admitted: 1, pending: 1, borrowed_gpus: null });
    expect(queue!.jobs.map((j) => [j.job, j.stage, j.position])).toEqual([['holder', 'admitted', null], ['low-first', 'waiting_for_slot', 1]]);
    const high = run('high-second', 'prio', 'high');
    await Promise.all([holder, low, high]);
    const start = Object.fromEntries(ran().map((j) => [j.name, j.start]));
    expect(start['high-second']!).toBeLessThan(start['low-first']!);
  }, 120_000);

  it('hands this machine\'s GPUs out by device index, never one to two jobs, and queues the rest', async () => {
    const { run, ran } = setup({ gpus: 2, ms: 600 });
    await Promise.all(['g0', 'g1', 'g2', 'g3', 'g4'].map((n) => run(n, 'dev', null, 1)));
    const jobs = ran();
    expect(jobs).toHaveLength(5);
    expect(jobs.every((j) => j.devices === '0' || j.devices === '1')).toBe(true);
    expect(maxOverlap(jobs)).toBeLessThanOrEqual(2);
    for (const a of jobs)
      for (const b of jobs)
        if (a !== b && a.start < b.end && b.start < a.end) expect(a.devices, `${a.name} and ${b.name} overlap`).not.toBe(b.devices);
  }, 120_000);

  it('is what hanzo_ml_queue_depth reports: waiting jobs by organization and priority name', async () => {
    const config = ConfigSchema.parse({ scheduler: { quotas: { depth: { max_gpus: 0, max_concurrent_jobs: 1 }, other: { max_gpus: 0, max_concurrent_jobs: 1, priority: 'low' } } } });
    const gate = admissionGate(cat.db, config, null);
    const ask = (name: string, org: string, priority: JobPriority | null) => gate.request({ name, organizationId: org, priority, gpus: 0, alreadyRunning: false });
    expect((await ask('depth-running', 'depth', null)).admitted).toBe(true);
    for (const [name, priority] of [['depth-a', null], ['depth-b', 'high'], ['depth-c', 'high']] as const) expect((await ask(name, 'depth', priority)).admitted).toBe(false);
    expect((await ask('other-running', 'other', null)).admitted).toBe(true);
    expect((await ask('other-a', 'other', null)).admitted).toBe(false);
    const metric = (await createMetrics(cat.db, config).registry.getMetricsAsJSON()).find((m) => m.name === 'hanzo_ml_queue_depth')!;
    const series = (metric.values as { labels: Record<string, string>; value: number }[]).filter((v) => ['depth', 'other'].includes(v.labels.org!));
    expect(series.map((v) => [v.labels.org, v.labels.priority, v.value]).sort()).toEqual([
      ['depth', 'high', 2],
      ['depth', 'medium', 1],
      ['other', 'low', 1],
    ]);
    for (const name of ['depth-running', 'depth-a', 'depth-b', 'depth-c', 'other-running', 'other-a']) await gate.release(name);
  });
});

async function waitUntil(probe: () => boolean | Promise<boolean>, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 50));
  }
}

// Where a job runs, from the executor to GET /v1/jobs/{id}: the local executor reports a running job's placement
// (its name, this machine, the CUDA device indices of its environment), the run loop writes it to the attempt's
// placement.json, and the job detail answers the latest attempt's (null before one was seen running). The jobs are
// small node scripts run by the real LocalExecutor (its `command` option stands in for the trainer, which this is
// not about); the catalogue is PGlite and the object store is files.
import { mkdtempSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MockActivityEnvironment } from '@temporalio/testing';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { addJobSegment, getJobById, insertJob } from '../db/repo/jobs.js';
import { LocalExecutor } from '../jobs/executor/local.js';
import type { JobRequest } from '../jobs/executor/types.js';
import { runJobToCompletion } from '../activities/run-job.js';
import type { JobDefinition } from '../jobs/definition.js';
import type { JobOutcome } from '../jobs/attempts.js';
import { writeRecoveries } from '../jobs/recovery.js';
import type { ActivityDeps } from '../activities/deps.js';
import { jobDetail } from '../api/job-detail.js';
import { jobView } from '../api/routes/jobs.js';
import type { ApiDeps } from '../api/deps.js';
import { ConfigSchema } from '../contracts/config.js';
import { JOB_FILES, JobPlacementSchema } from '../contracts/job-io.js';
import { FileObjectStore } from '../lib/object-store.js';
import { JobFiles, jobNameOf } from '../lib/job-files.js';
import { createLogger } from '../lib/log.js';

/** Runs `ms`, then writes its result where the run loop reads it (the job's files are under file://). */
const SCRIPT = `const [d, ms] = process.argv.slice(1); setTimeout(() => require('fs').writeFileSync(d + '/result.json', '{"ok":true}'), Number(ms));`;

let cat: Catalogue;
const root = mkdtempSync(join(tmpdir(), 'hanzo-ml-placement-'));
const config = ConfigSchema.parse({});
const store = new FileObjectStore(join(root, 'objects'));

function executor(gpus = 0, ms = 1500): LocalExecutor {
  return new LocalExecutor({
    workRoot: join(root, 'work'),
    python: 'unused',
    env: {},
    gpus,
    command: (job, scratch) => [process.execPath, '-e', SCRIPT, dirname(fileURLToPath(job.envelopeUri)), String(ms), scratch],
  });
}

function request(name: string, env: Record<string, string>): JobRequest {
  return {
    name,
    envelopeUri: `file://${join(root, 'objects', name, 'envelope.json')}`,
    organizationId: 'dev',
    kind: 'test',
    priority: null,
    resources: { nodes: 1, processes: 1, gpus_per_node: 0, gpu_type: null, image: null, cpu: null, memory: null },
    env,
    secretEnv: {},
  };
}

/** GET /v1/jobs/{id}'s answer for a job row (the route's own functions; no run is linked, so no metrics are read). */
async function detail(id: string) {
  const row = (await getJobById(cat.db, id))!;
  return jobDetail({ db: cat.db, store, config } as unknown as ApiDeps, row, jobView(row));
}

async function queuedJob(id: string) {
  await insertJob(cat.db, { id, organizationId: 'dev', name: id, submittedBy: 'dev', type: 'training', kind: 'command', spec: {}, status: 'queued', workflowId: `job:${id}` });
}

const segment = (jobName: string, n = 1) => ({ segment: n, job_name: jobName, checkpoints_uri: null, resumed_from: null, started_at: new Date().toISOString() });

describe('job placement', () => {
  beforeAll(async () => {
    cat = await openCatalogue({});
    await seedDevOrganization(cat.db, 'dev', 'dev-token');
  });
  afterAll(async () => {
    await cat?.close();
  });

  it('the local executor reports a running job on this machine with the GPU indices of its environment, also to a restarted worker', async () => {
    const ex = executor(4, 5000);
    const gpuJob = request('gpu-job', { CUDA_VISIBLE_DEVICES: '1,3' });
    const cpuJob = request('cpu-job', { CUDA_VISIBLE_DEVICES: '' });
    try {
      expect(await ex.startOrAttach(gpuJob)).toEqual({ state: 'running', placement: { pods: ['gpu-job'], nodes: [hostname()], gpu_ids: ['1', '3'] } });
      expect(await ex.startOrAttach(cpuJob)).toEqual({ state: 'running', placement: { pods: ['cpu-job'], nodes: [hostname()], gpu_ids: [] } });
      // A new worker attaches with a request that no longer carries the devices: the job's own record says them.
      expect(await executor(4).state(request('gpu-job', {}))).toMatchObject({ state: 'running', placement: { gpu_ids: ['1', '3'] } });
    } finally {
      await ex.stop(gpuJob, 0);
      await ex.stop(cpuJob, 0);
    }
    expect(await ex.state(gpuJob)).not.toHaveProperty('placement');
  }, 60_000);

  it('answers null for a queued job, then the placement the run loop wrote for its running attempt', async () => {
    const job: JobDefinition = { name: 'placed-job', kind: 'test', organizationId: 'dev', envelope: { tool: 'trainer', spec: {} }, resources: { gpus_per_node: 1 } };
    await queuedJob('j-placed');
    expect((await detail('j-placed')).placement).toBeNull();
    await addJobSegment(cat.db, 'j-placed', segment(jobNameOf(job.name)));
    expect((await detail('j-placed')).placement).toBeNull();

    // A machine of 2 GPUs: the admission gate gives the job device 0, and the run loop sees it running.
    const deps = { db: cat.db, executor: executor(2), store, log: createLogger({ level: 'error', format: 'text' }), config, jobSecrets: async () => ({}) } as unknown as ActivityDeps;
    const outcome = await new MockActivityEnvironment().run(async (): Promise<JobOutcome<{ ok: boolean }>> => runJobToCompletion(deps, { job, resultSchema: z.object({ ok: z.boolean() }), pollMs: 100 }));
    const written = { pods: [jobNameOf(job.name)], nodes: [hostname()], gpu_ids: ['0'] };
    expect(await outcome.files.readJson(JOB_FILES.placement, JobPlacementSchema)).toEqual(written);
    expect((await detail('j-placed')).placement).toEqual(written);
  }, 60_000);

  it("answers the latest attempt's placement: none while a restarted attempt or a resumed segment has not been seen running", async () => {
    await queuedJob('j-restarted');
    await addJobSegment(cat.db, 'j-restarted', segment('restarted-job'));
    const first = JobFiles.of(store, config, 'dev', 'restarted-job');
    await first.writeJson(JOB_FILES.placement, { pods: ['restarted-job'], nodes: ['node-a'], gpu_ids: ['0'] });
    expect((await detail('j-restarted')).placement).toEqual({ pods: ['restarted-job'], nodes: ['node-a'], gpu_ids: ['0'] });

    await writeRecoveries(first, [{ kind: 'lost', step: 3, restart: 1, change: 'none: resumes from its last checkpoint', at: new Date().toISOString() }]);
    expect((await detail('j-restarted')).attempts).toHaveLength(2);
    expect((await detail('j-restarted')).placement).toBeNull();
    await JobFiles.of(store, config, 'dev', 'restarted-job-r2').writeJson(JOB_FILES.placement, { pods: ['restarted-job-r2'], nodes: ['node-b'], gpu_ids: ['1'] });
    expect((await detail('j-restarted')).placement).toEqual({ pods: ['restarted-job-r2'], nodes: ['node-b'], gpu_ids: ['1'] });

    // Paused and resumed: the new segment waits in the queue, nowhere yet.
    await addJobSegment(cat.db, 'j-restarted', segment('restarted-job-s2', 2));
    expect((await detail('j-restarted')).placement).toBeNull();
  });
});

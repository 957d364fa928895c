// The checkpoint watcher: records each complete checkpoint (manifest verified against the stored copy) as a
// run artifact, ignores one without a manifest or whose files do not match it, and raises a stale event; the same
// as one pass per call (sweepCheckpoints) for the watcher workflow that waits between passes on timers.
import { createHash, randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MockActivityEnvironment } from '@temporalio/testing';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { getOrCreateExperiment } from '../db/repo/experiments.js';
import { artifactsOf } from '../db/repo/run-artifacts.js';
import { createRun, runDataOf } from '../db/repo/runs.js';
import { outbox } from '../db/schema/index.js';
import { createTrainingActivities } from '../activities/training.js';
import { loadConfig } from '../lib/config.js';
import { offlineActivityDeps } from './support/deps.js';
import type { CheckpointWatchState } from '../contracts/pipeline.js';

const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-watch-'));
let cat: Catalogue;
const runId = randomUUID();
const pipelineId = randomUUID();
// Where the job runner puts a run's checkpoints in the (file://) object store: checkpoints/{org}/{run_id}/{step}/.
const ckptRoot = join(home, 'objects', 'hanzo-ml-checkpoints', 'checkpoints', 'dev', runId);

function writeCheckpoint(step: number, opts: { manifest?: boolean; corrupt?: boolean; best?: number; root?: string } = {}): void {
  const dir = join(opts.root ?? ckptRoot, opts.best !== undefined ? 'best' : String(step));
  mkdirSync(dir, { recursive: true });
  const content = `weights of step ${step}`;
  writeFileSync(join(dir, 'adapter_model.safetensors'), content);
  const sha = createHash('sha256').update(opts.corrupt ? 'something else' : content).digest('hex');
  if (opts.manifest !== false)
    writeFileSync(
      join(dir, 'manifest.json'),
      JSON.stringify({
        step,
        created_at: new Date().toISOString(),
        files: [{ path: 'adapter_model.safetensors', size_bytes: content.length, sha256: sha }],
        ...(opts.best !== undefined ? { eval_loss: opts.best, copy_of: `step-${String(step).padStart(8, '0')}` } : {}),
      }),
    );
}

type Watched = Awaited<ReturnType<ReturnType<typeof createTrainingActivities>['watchCheckpoints']>>;

describe('watchCheckpoints activity', () => {
  let activities: ReturnType<typeof createTrainingActivities>;

  beforeAll(async () => {
    cat = await openCatalogue({});
    await seedDevOrganization(cat.db, 'dev', 'hanzo-ml-dev-token');
    const exp = await getOrCreateExperiment(cat.db, 'dev', 'e', 'file:///x');
    await createRun(cat.db, { id: runId, organizationId: 'dev', experimentId: exp, name: 'r', userId: 'dev', artifactRoot: 'file:///x', config: {}, params: {} });
    const loaded = loadConfig({ HANZO_ML_HOME: home, HANZO_ML_TRAINER_CHECKPOINT_ALERT_AFTER: '1s', HANZO_ML_LOGGING_LEVEL: 'error' });
    activities = createTrainingActivities(offlineActivityDeps(cat.db, loaded, home));
  });
  afterAll(async () => cat.close());

  it('records complete checkpoints only, with the manifest checksum, and is idempotent', async () => {
    writeCheckpoint(10);
    writeCheckpoint(20, { manifest: false }); // still being written: does not exist yet
    writeCheckpoint(30, { corrupt: true }); // files do not match the manifest
    const env = new MockActivityEnvironment();
    const first: Watched = await env.run(activities.watchCheckpoints, { pipelineId, runId, organizationId: 'dev', once: true });
    expect(first.checkpoints.map((c) => c.step)).toEqual([10]);
    writeCheckpoint(20);
    const second: Watched = await env.run(activities.watchCheckpoints, { pipelineId, runId, organizationId: 'dev', once: true });
    expect(second.checkpoints.map((c) => c.step)).toEqual([10, 20]);
    const rows = await artifactsOf(cat.db, runId);
    expect(rows.map((r) => r.path)).toEqual(['checkpoints/step-00000010', 'checkpoints/step-00000020']);
    expect(rows[0]!.sha256).toMatch(/^[0-9a-f]{64}$/);
  });

  it('reports a checkpoint whose files do not match its manifest once, as a run tag and a checkpoint.corrupt event', async () => {
    const env = new MockActivityEnvironment();
    await env.run(activities.watchCheckpoints, { pipelineId, runId, organizationId: 'dev', once: true });
    const corrupt = (await cat.db.select().from(outbox)).filter((e) => (e.payload as { event: string }).event === 'checkpoint.corrupt');
    expect(corrupt).toHaveLength(1); // step 30 of the first test, seen by three watcher runs
    expect(corrupt[0]!.payload).toMatchObject({ run_id: runId, checkpoint: 'step-00000030', message: expect.stringContaining('does not match the manifest') });
    const tags = (await runDataOf(cat.db, [runId])).tags.get(runId)!;
    expect(JSON.parse(tags.find((t) => t.key === 'hanzo_ml.event.checkpoint_corrupt.step-00000030')!.value)).toMatchObject({ kind: 'checkpoint_corrupt' });
  });

  it('records best/ as an unchanging copy named after the checkpoint it copies, apart from the step list', async () => {
    writeCheckpoint(20, { best: 0.75 });
    const env = new MockActivityEnvironment();
    const watched: Watched = await env.run(activities.watchCheckpoints, { pipelineId, runId, organizationId: 'dev', once: true });
    expect(watched.checkpoints.map((c) => c.step)).toEqual([10, 20]);
    const best = (await artifactsOf(cat.db, runId)).find((r) => r.path === 'checkpoints/best-step-00000020')!;
    expect(best.metadata).toMatchObject({ kind: 'best_checkpoint', step: 20 });
    expect(best.uri).toMatch(new RegExp(`/checkpoints/dev/${runId}/best-step-00000020$`));
    // A better checkpoint replacing best/ later does not change what was recorded.
    writeCheckpoint(10, { best: 0.5 });
    await env.run(activities.watchCheckpoints, { pipelineId, runId, organizationId: 'dev', once: true });
    expect(readFileSync(join(ckptRoot, 'best-step-00000020', 'adapter_model.safetensors'), 'utf8')).toBe('weights of step 20');
  });

  it('emits a checkpoint.stale event when no new checkpoint appears within the interval, until cancelled', async () => {
    const env = new MockActivityEnvironment();
    const watching = env.run(activities.watchCheckpoints, { pipelineId, runId, organizationId: 'dev', once: false });
    await new Promise((r) => setTimeout(r, 3500));
    env.cancel();
    await expect(watching).rejects.toThrow();
    const events = await cat.db.select().from(outbox);
    const stale = events.filter((e) => (e.payload as { event: string }).event === 'checkpoint.stale');
    expect(stale).toHaveLength(1);
    expect(stale[0]!.payload).toMatchObject({ run_id: runId, job_id: pipelineId });
  });

  it('makes one pass per call for the watcher workflow, carrying its state: a stale gap alerts once, a new checkpoint ends it', async () => {
    const other = { pipelineId: randomUUID(), runId: randomUUID(), organizationId: 'dev' };
    const exp = await getOrCreateExperiment(cat.db, 'dev', 'e', 'file:///x');
    await createRun(cat.db, { id: other.runId, organizationId: 'dev', experimentId: exp, name: 'r2', userId: 'dev', artifactRoot: 'file:///x', config: {}, params: {} });
    const env = new MockActivityEnvironment();
    const pass = (state: CheckpointWatchState | null): Promise<CheckpointWatchState> => env.run(activities.sweepCheckpoints, { ...other, state });
    const first = await pass(null);
    // checkpoint_alert_after is 1s here: a pass every second at most (never more often).
    expect(first).toMatchObject({ alerted: false, poll_ms: 1000 });
    await new Promise((r) => setTimeout(r, 1200));
    const second = await pass(first);
    const third = await pass(second);
    expect([second.alerted, third.alerted]).toEqual([true, true]);
    const staleOf = async () => (await cat.db.select().from(outbox)).filter((e) => (e.payload as { event: string; job_id: string }).event === 'checkpoint.stale' && (e.payload as { job_id: string }).job_id === other.pipelineId);
    expect(await staleOf()).toHaveLength(1);
    writeCheckpoint(7, { root: join(home, 'objects', 'hanzo-ml-checkpoints', 'checkpoints', 'dev', other.runId) });
    const fourth = await pass(third);
    expect(fourth.alerted).toBe(false);
    expect(fourth.last_new_at).toBeGreaterThan(third.last_new_at);
    expect((await artifactsOf(cat.db, other.runId)).map((r) => r.path)).toEqual(['checkpoints/step-00000007']);
    expect(await staleOf()).toHaveLength(1);
  });
});

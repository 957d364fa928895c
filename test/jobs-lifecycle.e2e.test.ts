// A job's lifecycle end to end on the embedded stack (Temporal dev server, catalogue, worker, local executor, API),
// set up as test/jobs.e2e.test.ts is: the dry run's tokens are the tokens the job then trains; pause writes a
// checkpoint and stops the job, resume continues it (from the newest checkpoint, then from an older listed one) and
// the loss curve is the uninterrupted run's; the detail shows segments, attempts and checkpoints; who may pause
// what; a budget refusal names the estimate and the budget.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { callApi, type Answer } from './support/api-call.js';
import { DEV_TOKEN } from './support/config.js';
import { createApiToken, createOrganization } from '../db/repo/auth.js';
import { insertJob } from '../db/repo/jobs.js';
import { and, asc, eq } from 'drizzle-orm';
import { outbox } from '../db/schema/pipelines.js';
import { PIPELINE_TASK_QUEUE } from '../contracts/pipeline.js';
import { DEFAULT_BASE_MODEL } from '../lib/base-models.js';
import { JobSubmissionSchema, jobWorkflowId, type JobDetail, type JobDryRun, type JobWorkflowInput } from '../contracts/jobs.js';


const chat = (q: string, a: string) => JSON.stringify({ messages: [{ role: 'user', content: q }, { role: 'assistant', content: a }] });
/**
 * Long enough that a pause sent at step 3 arrives before the end on a fast, idle machine (the tiny model can run
 * 30 steps a second there): with 60 steps the job was already writing its last checkpoint when the pause came.
 */
const MAX_STEPS = 300;
/** A small LoRA job with a checkpoint every second, so that a pause finds several listed checkpoints. */
const recipeJob = (name: string, dataset = 'life-ds') => ({
  name,
  type: 'training',
  recipe: {
    base_model: DEFAULT_BASE_MODEL,
    method: 'lora',
    dataset: { name: dataset },
    hyperparameters: { learning_rate: 1e-3, max_steps: MAX_STEPS, batch_size: 8, max_seq_length: 128, seed: 7 },
  },
  schedule: { checkpoint_interval: '1s' },
});

describe('jobs: lifecycle, pause and resume, detail, dry run and budget (embedded stack, local executor)', () => {
  let stack: TestStack;
  let researcher: string;
  let otherResearcher: string;
  let otherOrgAdmin: string;
  let tightOrgAdmin: string;
  let queueOrgAdmin: string;

  const call = (method: string, path: string, token: string, body?: unknown, headers: Record<string, string> = {}): Promise<Answer> =>
    callApi(stack.runtime.apiUrl, method, path, token, body, headers);
  const detail = async (id: string, token = DEV_TOKEN): Promise<JobDetail> => (await call('GET', `/v1/jobs/${id}`, token)).body as unknown as JobDetail;

  async function waitFor(id: string, until: (j: JobDetail) => boolean, timeoutMs = 5 * 60_000, token = DEV_TOKEN): Promise<JobDetail> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const job = await detail(id, token);
      if (until(job)) return job;
      if (['succeeded', 'failed', 'cancelled'].includes(job.status)) throw new Error(`job ${id} ended ${job.status} (${job.message}) before the awaited state`);
      if (Date.now() > deadline) throw new Error(`job ${id} still ${job.status}: ${job.message}`);
      await new Promise((r) => setTimeout(r, 300));
    }
  }
  /** The jobs a token's organization submitted (not the preparation jobs of its dataset uploads). */
  const submittedJobs = async (token: string) => ((await call('GET', '/v1/jobs', token)).body.jobs as { type: string }[]).filter((j) => j.type !== 'data_preparation');
  const ended = (j: JobDetail) => ['succeeded', 'failed', 'cancelled'].includes(j.status);
  const succeeded = (id: string) => waitFor(id, ended, 10 * 60_000);

  /** train/loss by step; of several values at one step (re-trained after a resume), the last logged. */
  async function losses(runId: string): Promise<Map<number, number>> {
    const { body } = await call('GET', `/api/2.0/mlflow/metrics/get-history?run_id=${runId}&metric_key=train/loss&max_results=10000`, DEV_TOKEN);
    const points = (body.metrics as { step: number; value: number; timestamp: number }[]).sort((a, b) => a.timestamp - b.timestamp);
    return new Map(points.map((p) => [p.step, p.value]));
  }
  async function runTag(runId: string, key: string): Promise<string | undefined> {
    const { body } = await call('GET', `/api/2.0/mlflow/runs/get?run_id=${runId}`, DEV_TOKEN);
    return (body.run as { data: { tags: { key: string; value: string }[] } }).data.tags.find((t) => t.key === key)?.value;
  }

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobs-life-config-'));
    // tight-org may spend almost nothing: its recipe jobs are refused; dev has no budget. queue-org runs one job at a time.
    writeFileSync(join(dir, 'config.yaml'), JSON.stringify({ scheduler: { default_price_usd: 4, monthly_budgets_usd: { 'tight-org': 0.000001 }, quotas: { 'queue-org': { max_gpus: 0, max_concurrent_jobs: 1 } } } }));
    stack = await startTestStack({ HANZO_ML_CONFIG: join(dir, 'config.yaml') });
    const db = stack.runtime.catalogue.db;
    const token = (org: string, subject: string, role: 'developer' | 'admin') => db.transaction(async (tx) => (await createApiToken(tx, { organizationId: org, subject, role, expiresAt: null })).token);
    researcher = await token('dev', 'dev-researcher', 'developer');
    otherResearcher = await token('dev', 'dev-researcher-2', 'developer');
    await db.transaction((tx) => createOrganization(tx, 'other-org'));
    otherOrgAdmin = await token('other-org', 'other-admin', 'admin');
    await db.transaction((tx) => createOrganization(tx, 'tight-org'));
    tightOrgAdmin = await token('tight-org', 'tight-admin', 'admin');
    await db.transaction((tx) => createOrganization(tx, 'queue-org'));
    queueOrgAdmin = await token('queue-org', 'queue-admin', 'admin');
    const rows = Array.from({ length: 32 }, (_, i) => chat(`what is ${i} plus one? answer with the number only`, `${i + 1}`)).join('\n');
    for (const t of [DEV_TOKEN, tightOrgAdmin]) {
      const ds = await call('POST', '/v1/datasets?name=life-ds&format=jsonl&wait=true', t, rows, { 'content-type': 'application/octet-stream' });
      expect(ds.status, JSON.stringify(ds.body)).toBeLessThan(300);
    }
  }, 180_000);
  afterAll(async () => {
    await stack?.stop();
  });

  let reference: JobDetail;
  let dryRun: JobDryRun;

  it('answers a dry run with the tokens the job then trains, and queues nothing', async () => {
    const answer = await call('POST', '/v1/jobs?dry_run=true', DEV_TOKEN, recipeJob('reference'));
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    dryRun = answer.body as unknown as JobDryRun;
    expect(dryRun).toMatchObject({ dry_run: true, kind: 'recipe', budget: null, fits_budget: null, estimate: { steps: MAX_STEPS, gpu_type: 'cpu', price_per_gpu_hour_usd: 4 } });
    expect(dryRun.estimate!.tokens).toBeGreaterThan(0);
    expect(await submittedJobs(DEV_TOKEN)).toEqual([]);

    // The uninterrupted run: the loss curve the paused job must reproduce.
    const { status, body } = await call('POST', '/v1/jobs', DEV_TOKEN, recipeJob('reference'));
    expect(status, JSON.stringify(body)).toBe(201);
    expect(body.status).toBe('validating');
    reference = await succeeded(body.id as string);
    expect(reference.status, reference.message ?? '').toBe('succeeded');
    expect(Number(await runTag(reference.run_id!, 'hanzo_ml.job.tokens'))).toBe(dryRun.estimate!.tokens);
    expect(reference.segments).toHaveLength(1);
    expect(reference.attempts).toEqual([expect.objectContaining({ segment: 1, attempt: 1, step: MAX_STEPS, resumed_from_step: null })]);
    expect(reference.checkpoints.at(-1)).toMatchObject({ step: MAX_STEPS, metrics: { 'train/loss': expect.any(Number) } });
    expect(reference.usage.gpu_hours).toBeGreaterThan(0);
  }, 12 * 60_000);

  it('describes a command job dry run by what can be known before it runs', async () => {
    const { status, body } = await call('POST', '/v1/jobs?dry_run=true', DEV_TOKEN, { type: 'eval', image: 'trainer', command: ['true'], schedule: { max_duration: '30m' } });
    expect(status).toBe(200);
    expect(body).toMatchObject({ kind: 'command', estimate: null, known: { gpu_type: 'cpu', price_per_gpu_hour_usd: 4, max_gpu_hours: 0.5, max_usd: 2 } });
  });

  it('refuses a submit over what is left of the monthly budget, naming the estimate and the budget', async () => {
    const { status, body } = await call('POST', '/v1/jobs', tightOrgAdmin, recipeJob('too-dear'));
    expect(status, JSON.stringify(body)).toBe(402);
    expect(String(body.message)).toMatch(/the estimate of \$\d+\.\d+ \([\d.]+ GPU-hours\) exceeds what is left of organization tight-org's monthly budget: \$0\.0000 of \$0\.0000/);
    expect(await submittedJobs(tightOrgAdmin)).toEqual([]);
  });

  it('pauses and resumes a job (from its newest checkpoint, then from an older listed one) and its loss curve is the uninterrupted one', async () => {
    const { status, body } = await call('POST', '/v1/jobs', researcher, recipeJob('paused'));
    expect(status, JSON.stringify(body)).toBe(201);
    const id = body.id as string;
    // Running: its progress, the step rate measured from its logged steps, and the ETA they give.
    const running = await waitFor(id, (j) => j.status === 'running' && (j.progress?.step ?? 0) >= 3 && j.progress?.steps_per_second != null);
    const p = running.progress!;
    expect(p.max_steps).toBe(MAX_STEPS);
    expect(p.steps_per_second).toBeGreaterThan(0);
    expect(p.eta_seconds).toBeCloseTo((MAX_STEPS - p.step) / p.steps_per_second!, 6);

    // Only its submitter or an ml-admin pauses it; another organization finds no job.
    const notHers = await call('POST', `/v1/jobs/${id}/pause`, otherResearcher, {});
    expect(notHers.status).toBe(403);
    expect((await call('POST', `/v1/jobs/${id}/pause`, otherOrgAdmin, {})).status).toBe(404);
    expect((await call('POST', `/v1/jobs/${id}/resume`, otherOrgAdmin, {})).status).toBe(404);
    expect((await call('POST', `/v1/jobs/${id}/resume`, researcher, {})).status).toBe(409);

    expect((await call('POST', `/v1/jobs/${id}/pause`, researcher)).body).toEqual({ id, status: 'pause_requested' });
    const paused = await waitFor(id, (j) => j.status === 'paused');
    expect(paused.checkpoints.length).toBeGreaterThan(0);
    const pausedAt = paused.checkpoints.at(-1)!.step;
    expect(pausedAt).toBeLessThan(MAX_STEPS);
    expect(paused.attempts).toEqual([expect.objectContaining({ segment: 1, attempt: 1 })]);
    expect((await call('POST', `/v1/jobs/${id}/pause`, researcher, {})).status).toBe(409);
    const bad = await call('POST', `/v1/jobs/${id}/resume`, researcher, { from_checkpoint: 999_999 });
    expect(bad.status).toBe(400);
    expect(String(bad.body.message)).toMatch(/^from_checkpoint: /);

    // Resume from the newest: the second segment continues under the same checkpoint prefix.
    expect((await call('POST', `/v1/jobs/${id}/resume`, researcher, {})).status).toBe(202);
    await waitFor(id, (j) => j.status === 'running' && j.segments.length === 2 && (j.progress?.step ?? 0) > pausedAt + 2);
    expect((await call('POST', `/v1/jobs/${id}/pause`, DEV_TOKEN, {})).status).toBe(202); // an ml-admin may
    const again = await waitFor(id, (j) => j.status === 'paused' && j.segments.length === 2);
    expect(again.segments[1]).toMatchObject({ segment: 2, resumed_from: null, checkpoints_uri: again.segments[0]!.checkpoints_uri });
    const older = again.checkpoints.filter((c) => c.step < again.checkpoints.at(-1)!.step).at(-1);
    expect(older, JSON.stringify(again.checkpoints)).toBeDefined();
    expect(older!.metrics['train/loss']).toEqual(expect.any(Number));

    // Resume from an older listed checkpoint: a third segment from exactly that one, the newer ones still listed.
    expect((await call('POST', `/v1/jobs/${id}/resume`, researcher, { from_checkpoint: older!.uri })).status).toBe(202);
    const done = await succeeded(id);
    expect(done.status, done.message ?? '').toBe('succeeded');
    expect(done.segments[2]).toMatchObject({ segment: 3, resumed_from: { step: older!.step, uri: older!.uri } });
    expect(done.segments[2]!.checkpoints_uri).not.toBe(again.segments[1]!.checkpoints_uri);
    expect(done.checkpoints.map((c) => c.uri)).toEqual(expect.arrayContaining(again.checkpoints.map((c) => c.uri)));
    // The trainer's own word that each segment continued, and from where (a restart from scratch would log the
    // same losses, so the curve alone does not show a resume).
    expect(done.attempts.map((a) => [a.segment, a.resumed_from_step])).toEqual([[1, null], [2, pausedAt], [3, older!.step]]);
    // The event stream says so too: each pause and each resume once, in order.
    const published = await stack.runtime.catalogue.db
      .select({ payload: outbox.payload })
      .from(outbox)
      .where(and(eq(outbox.topic, 'jobs'), eq(outbox.key, id)))
      .orderBy(asc(outbox.id));
    const pauses = published.map((r) => (r.payload as { event: string }).event).filter((e) => e === 'job.paused' || e === 'job.resumed');
    expect(pauses).toEqual(['job.paused', 'job.resumed', 'job.paused', 'job.resumed']);

    // Same seed, same data: every step's (last) loss matches the uninterrupted run within 1e-3 relative.
    const [want, got] = [await losses(reference.run_id!), await losses(done.run_id!)];
    expect(want.size).toBe(MAX_STEPS);
    expect([...got.keys()].sort((a, b) => a - b)).toEqual([...want.keys()].sort((a, b) => a - b));
    for (const [step, loss] of want) expect(Math.abs(got.get(step)! - loss) / Math.abs(loss), `step ${step}`).toBeLessThan(1e-3);
  }, 15 * 60_000);

  it('shows a queued job its place and why it waits; paused, it leaves the queue', async () => {
    const sleeper = { type: 'training', image: 'trainer', command: ['python3', '-c', 'import time; time.sleep(600)'] };
    const first = (await call('POST', '/v1/jobs', queueOrgAdmin, { ...sleeper, name: 'holds-the-slot' })).body.id as string;
    await waitFor(first, (j) => j.status === 'running', 2 * 60_000, queueOrgAdmin);
    const second = (await call('POST', '/v1/jobs', queueOrgAdmin, { ...sleeper, name: 'waits' })).body.id as string;
    const queued = await waitFor(second, (j) => j.status === 'queued' && j.queue !== null, 2 * 60_000, queueOrgAdmin);
    expect(queued.queue).toEqual({ queue: 'queue-org', position: 1, reason: expect.stringMatching(/max_concurrent_jobs/) });
    const waiting = async () => ((await call('GET', '/v1/queues', queueOrgAdmin)).body.organizations as { organization: string; jobs: { job: string; stage: string }[] }[]).find((o) => o.organization === 'queue-org')!.jobs.filter((j) => j.stage === 'waiting_for_slot');
    expect(await waiting()).toHaveLength(1);

    expect((await call('POST', `/v1/jobs/${second}/pause`, queueOrgAdmin, {})).status).toBe(202);
    const paused = await waitFor(second, (j) => j.status === 'paused', 2 * 60_000, queueOrgAdmin);
    expect(paused.queue).toBeNull();
    expect(await waiting()).toEqual([]);
    for (const id of [first, second]) {
      expect((await call('POST', `/v1/jobs/${id}/cancel`, queueOrgAdmin, {})).status).toBe(202);
      expect((await waitFor(id, ended, 2 * 60_000, queueOrgAdmin)).status).toBe('cancelled');
    }
  }, 6 * 60_000);

  it('fails a job in validating when its dataset version is gone by the time it starts, before it queues', async () => {
    // Submitted as the API would have accepted it, naming a version that no longer exists when its workflow runs.
    const id = 'validating-gone-dataset';
    const spec = JobSubmissionSchema.parse({ ...recipeJob('gone'), recipe: { ...recipeJob('gone').recipe, dataset: { name: 'life-ds', version: 99 } } });
    await insertJob(stack.runtime.catalogue.db, { id, organizationId: 'dev', name: 'gone', submittedBy: 'dev', type: 'training', kind: 'recipe', spec, status: 'validating', workflowId: jobWorkflowId(id), idempotencyKey: null });
    const input: JobWorkflowInput = { job_id: id, organization_id: 'dev', submitted_by: 'dev', spec, runtime: { heartbeat_timeout: '10s' } };
    await stack.runtime.client.workflow.start('submittedJobWorkflow', { taskQueue: PIPELINE_TASK_QUEUE, workflowId: jobWorkflowId(id), args: [input] });
    const job = await waitFor(id, ended, 2 * 60_000);
    expect(job.status).toBe('failed');
    expect(job.message).toMatch(/^recipe\.dataset: "life-ds" has no version 99 any more/);
    expect(job.run_id).toBeNull();
    expect(job.segments).toEqual([]);
  }, 3 * 60_000);

  it('refuses to pause a job that has ended', async () => {
    const res = await call('POST', `/v1/jobs/${reference.id}/pause`, DEV_TOKEN, {});
    expect(res.status).toBe(409);
    expect(String(res.body.message)).toMatch(/is succeeded: only a validating, queued or running job can be paused/);
  });
});

// The reload hook after a promotion to production (promotion.webhook_url): a loopback receiver checks the HMAC
// and the body, and sees the hook only after the promotion and the archive of the previous version committed;
// refusals are retried with backoff; the retries outlive a worker killed with SIGKILL; a hook that never answers
// leaves the version in production and the pipeline completed with a warning. The workflow, the Temporal server,
// Postgres and the registry and hook activities are real; the stages before register are stand-ins
// (test/support/promotion-worker.ts).
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { mkdirSync, mkdtempSync, openSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { and, asc, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { startTemporalDevServer, type DevServer } from '../lib/temporal-dev-server.js';
import { startRuntime, type Runtime } from '../runtime/embedded.js';
import { bundleWorkflows } from '../workers/worker.js';
import { verifyReloadRequest } from '../lib/reload-hook.js';
import { RELOAD_HEADERS, ReloadHookBodySchema } from '../contracts/reload-hook.js';
import { PAYLOAD_SCHEMAS } from '../contracts/events.js';
import { PIPELINE_TASK_QUEUE, pipelineWorkflowId, type PipelineResult, type PipelineWorkflowInput } from '../contracts/pipeline.js';
import { DataOptionsSchema, HardwareSchema, RecoveryPolicySchema } from '../contracts/trainer-job.js';
import { getVersion, registerModelVersion, transitionStage } from '../db/repo/models.js';
import { outbox } from '../db/schema/index.js';
import { auth, testConfig } from './support/config.js';
import { freePort } from './support/ports.js';
import { startPostgres, type TestPostgres } from './support/postgres.js';
import { ARTIFACTS, PASSED_GATE, startPromotionWorker } from './support/promotion-worker.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const SECRET = 'reload-hook-test-secret-0123456789';
const ORG = 'dev';

let pg: TestPostgres;
let databaseUrl: string;
let temporal: DevServer;
let client: Client;
let runtime: Runtime;
let bundle: Awaited<ReturnType<typeof bundleWorkflows>>;

interface Received {
  headers: IncomingHttpHeaders;
  raw: string;
  answered: number;
  /** Stages of the model's versions when the request arrived: the promotion must have committed by then. */
  stages: Record<number, string>;
}

/** A serving layer's reload endpoint on loopback: answers with `answer(n)` for the n-th request (from 1). */
class Receiver {
  received: Received[] = [];
  private server: Server | null = null;
  constructor(
    private readonly model: string,
    private readonly answer: (n: number) => number,
  ) {}

  async listen(port = 0): Promise<number> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        void this.stagesNow().then((stages) => {
          const answered = this.answer(this.received.length + 1);
          this.received.push({ headers: req.headers, raw: Buffer.concat(chunks).toString('utf8'), answered, stages });
          res.writeHead(answered, { 'content-type': 'text/plain' }).end(answered < 300 ? 'reloading' : 'model server busy');
        });
      });
    });
    await new Promise<void>((r) => this.server!.listen(port, '127.0.0.1', r));
    return (this.server.address() as { port: number }).port;
  }

  private async stagesNow(): Promise<Record<number, string>> {
    const out: Record<number, string> = {};
    for (const v of [1, 2]) {
      const got = await getVersion(runtime.catalogue.db, ORG, this.model, v);
      if (got) out[v] = got.version.stage;
    }
    return out;
  }

  async close(): Promise<void> {
    if (this.server) await new Promise((r) => this.server!.close(r));
  }
}

function pipelineInput(model: string, reloadDeadline: string): PipelineWorkflowInput {
  return {
    model_name: model,
    base_model: 'b',
    dataset: { name: 'ds', version: 'latest' },
    method: 'lora',
    hyperparameters: { learning_rate: 0.001, max_steps: 10, batch_size: 2, gradient_accumulation_steps: 1, warmup_steps: 0, weight_decay: 0, max_grad_norm: 1, lora_rank: 4, lora_alpha: 8, lora_dropout: 0, target_modules: ['q_proj'], max_seq_length: 64, seed: 1, gradient_checkpointing: false },
    checkpoint: { every_steps: 5, keep_last: 2, every_seconds: null, keep_best: false },
    data: DataOptionsSchema.parse({}),
    recovery: RecoveryPolicySchema.parse({}),
    hardware: HardwareSchema.parse({}),
    eval: { max_new_tokens: 4, suite: 'support-desk@1' },
    validate: { quantization: 'q8_0', perplexity_tolerance: 0.01, max_perplexity: 15, max_general_perplexity: 20, quantized_max_perplexity: 20, test_prompts: ['hi'] },
    promotion: { auto_approve: true },
    organization_id: ORG,
    requested_by: 'tester',
    runtime: { heartbeat_timeout: '30s', approval_timeout: '1h', reload_deadline: reloadDeadline },
  };
}

/** Version 1 of the model is in production before the pipeline registers and promotes version 2. */
async function startPipeline(model: string, taskQueue: string, reloadDeadline: string): Promise<{ id: string; handle: WorkflowHandle }> {
  await registerModelVersion(runtime.catalogue.db, { organizationId: ORG, modelName: model, stage: 'staging', artifacts: ARTIFACTS, metrics: { gate: PASSED_GATE }, createdBy: 'tester' });
  await transitionStage(runtime.catalogue.db, { organizationId: ORG, modelName: model, version: 1, stage: 'production', actor: 'tester', reason: 'first version' });
  const id = randomUUID();
  const handle = await client.workflow.start('fineTunePipelineWorkflow', { taskQueue, workflowId: pipelineWorkflowId(id), args: [pipelineInput(model, reloadDeadline)], memo: { organization_id: ORG } });
  return { id, handle };
}

const hookEnv = (url: string, deadline: string): Record<string, string> => ({
  HANZO_ML_HOME: mkdtempSync(join(tmpdir(), 'hanzo-ml-reload-worker-')),
  HANZO_ML_DATABASE_URL: databaseUrl,
  HANZO_ML_PROMOTION_WEBHOOK_URL: url,
  HANZO_ML_PROMOTION_WEBHOOK_SECRET: SECRET,
  HANZO_ML_PROMOTION_WEBHOOK_DEADLINE: deadline,
});

async function withWorker<T>(env: Record<string, string>, taskQueue: string, body: () => Promise<T>): Promise<T> {
  const worker = await startPromotionWorker({ env, temporalAddress: temporal.address, taskQueue, bundle });
  try {
    return await body();
  } finally {
    await worker.stop();
  }
}

async function api(path: string): Promise<{ status: number; body: Json }> {
  const res = await runtime.app.request(path, { headers: auth });
  return { status: res.status, body: (await res.json()) as Json };
}

async function modelEvents(model: string): Promise<Json[]> {
  const rows = await runtime.catalogue.db.select().from(outbox).where(and(eq(outbox.topic, 'models'), eq(outbox.key, model))).orderBy(asc(outbox.id));
  return rows.map((r) => PAYLOAD_SCHEMAS.models.parse(r.payload) as Json);
}

async function until<T>(what: string, timeoutMs: number, fn: () => Promise<T | null | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** The retrying notifyReload activity as the server sees it: attempt number and the worker of the last attempt. */
async function pendingHook(handle: WorkflowHandle): Promise<{ attempt: number; started: boolean; worker: string; lastFailure: string; failedAttempt: number } | null> {
  const d = await handle.describe();
  const a = d.raw.pendingActivities?.find((p) => p.activityType?.name === 'notifyReload');
  if (!a || !a.lastFailure) return null;
  const lastFailure = a.lastFailure.message ?? '';
  return {
    attempt: a.attempt ?? 0,
    // PENDING_ACTIVITY_STATE_STARTED = 2: an attempt is running; otherwise the next one waits for its backoff.
    started: Number(a.state) === 2,
    worker: a.lastWorkerIdentity ?? '',
    lastFailure,
    failedAttempt: Number(/\(attempt (\d+)\)/.exec(lastFailure)?.[1] ?? 0),
  };
}

describe('the reload hook after a promotion to production', () => {
  beforeAll(async () => {
    pg = await startPostgres();
    databaseUrl = await pg.createDatabase('reload');
    const loaded = testConfig({ HANZO_ML_DATABASE_URL: databaseUrl });
    mkdirSync(join(loaded.home, 'logs'), { recursive: true });
    temporal = await startTemporalDevServer({ binary: loaded.bootstrap.temporal, home: loaded.home, port: 0, uiPort: null, namespace: 'default' });
    client = new Client({ connection: await Connection.connect({ address: temporal.address }) });
    runtime = await startRuntime({ ...loaded, temporalAddress: temporal.address, temporalUiUrl: null, worker: false, listen: false });
    bundle = await bundleWorkflows();
  }, 240_000);
  afterAll(async () => {
    await runtime?.stop();
    await client?.connection.close();
    await temporal?.stop();
    await pg?.stop();
  });

  it('POSTs a body signed with the secret, after the previous production version is archived, and records the delivery', async () => {
    const model = 'reload-signed';
    const receiver = new Receiver(model, () => 200);
    const url = `http://127.0.0.1:${await receiver.listen()}/reload`;
    const taskQueue = `reload-${randomUUID()}`;
    const { id, handle, got } = await withWorker(hookEnv(url, '1m'), taskQueue, async () => {
      const started = await startPipeline(model, taskQueue, '1m');
      await started.handle.result();
      return { ...started, got: await api(`/v1/pipelines/${started.id}`) };
    });
    await receiver.close();

    expect(receiver.received).toHaveLength(1);
    const [req] = receiver.received as [Received];
    const headers = { signature: req.headers[RELOAD_HEADERS.signature] as string, timestamp: req.headers[RELOAD_HEADERS.timestamp] as string };
    expect(headers.signature).toMatch(/^sha256=[0-9a-f]{64}$/);
    expect(verifyReloadRequest(SECRET, headers, req.raw)).toBeNull();
    // Any change to the body, the timestamp or the key breaks it; an old timestamp is refused as a replay.
    expect(verifyReloadRequest('another-secret-of-enough-length', headers, req.raw)).toBe('signature does not match');
    expect(verifyReloadRequest(SECRET, headers, req.raw.replace('"version":2', '"version":3'))).toBe('signature does not match');
    expect(verifyReloadRequest(SECRET, { ...headers, timestamp: String(Number(headers.timestamp) + 1) }, req.raw)).toBe('signature does not match');
    expect(verifyReloadRequest(SECRET, headers, req.raw, Number(headers.timestamp) + 600)).toMatch(/more than 300s from now/);

    const body = ReloadHookBodySchema.parse(JSON.parse(req.raw));
    expect(body).toMatchObject({ event: 'model.promoted', organization_id: ORG, model: { name: model, version: 2, stage: 'production', archived_versions: [1] }, pipeline_id: id, artifacts: ARTIFACTS });
    expect(req.headers[RELOAD_HEADERS.eventId]).toBe(body.event_id);
    expect(Date.parse(body.promoted_at)).not.toBeNaN();
    expect(req.stages).toEqual({ 1: 'archived', 2: 'production' });

    const result = (await handle.result()) as PipelineResult;
    expect(result.outcome).toBe('promoted');
    expect(result.warnings).toEqual([]);
    expect(got.body.progress.reload).toMatchObject({ status: 'delivered', event_id: body.event_id, attempts: 1, http_status: 200, error: null });
    const events = await modelEvents(model);
    expect(events.map((e) => e.event)).toEqual(['model.registered', 'model.promoted', 'model.registered', 'model.promoted', 'model.reload_notified']);
    expect(events.at(-1)).toMatchObject({ name: model, version: 2, pipeline_id: id, hook_event_id: body.event_id, attempts: 1 });
  });

  it('fires once for every manual change of production: a promotion, a rollback and a move of the production alias', async () => {
    const model = 'reload-manual';
    const receiver = new Receiver(model, () => 200);
    const url = `http://127.0.0.1:${await receiver.listen()}/reload`;
    // An API process with the hook configured; the worker runs the hook's workflow on the pipelines' queue.
    const loaded = testConfig({ HANZO_ML_DATABASE_URL: databaseUrl, HANZO_ML_PROMOTION_WEBHOOK_URL: url, HANZO_ML_PROMOTION_WEBHOOK_SECRET: SECRET });
    const hooked = await startRuntime({ ...loaded, temporalAddress: temporal.address, temporalUiUrl: null, worker: false, listen: false });
    const send = async (method: string, path: string, body: unknown) =>
      (await hooked.app.request(path, { method, headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify(body) })).status;
    const delivered = (n: number) => until(`${n} hook request(s)`, 60_000, async () => receiver.received.length >= n);
    try {
      await withWorker(hookEnv(url, '1m'), PIPELINE_TASK_QUEUE, async () => {
        // Versions that passed their suite: an ungated one never reaches production (test/model-gate.test.ts).
        for (let i = 0; i < 3; i++) await registerModelVersion(runtime.catalogue.db, { organizationId: ORG, modelName: model, stage: 'staging', artifacts: ARTIFACTS, metrics: { gate: PASSED_GATE }, createdBy: 'tester' });
        const toProduction = (v: number, reason: string) => send('PATCH', `/v1/models/${model}/versions/${v}/stage`, { stage: 'production', reason });
        expect(await toProduction(1, 'first release')).toBe(200);
        await delivered(1);
        expect(await toProduction(2, 'better on the task')).toBe(200);
        await delivered(2);
        expect(await toProduction(1, 'roll back: version 2 misroutes refunds')).toBe(200);
        await delivered(3);
        expect(await send('POST', '/api/2.0/mlflow/registered-models/alias', { name: model, alias: 'production', version: '3' })).toBe(200);
        await delivered(4);
        // Not a change of what is served: the same alias again, another alias, a move to staging.
        expect(await send('POST', '/api/2.0/mlflow/registered-models/alias', { name: model, alias: 'production', version: '3' })).toBe(200);
        expect(await send('POST', '/api/2.0/mlflow/registered-models/alias', { name: model, alias: 'canary', version: '2' })).toBe(200);
        expect(await send('PATCH', `/v1/models/${model}/versions/3/stage`, { stage: 'staging', reason: 'x' })).toBe(200);
        await new Promise((r) => setTimeout(r, 3000));
      });
    } finally {
      await hooked.stop();
      await receiver.close();
    }
    const bodies = receiver.received.map((r) => ReloadHookBodySchema.parse(JSON.parse(r.raw)));
    expect(bodies.map((b) => [b.model.version, b.model.archived_versions, b.rollback, b.pipeline_id])).toEqual([
      [1, [], false, null],
      [2, [1], false, null],
      [1, [2], true, null],
      [3, [], false, null],
    ]);
    for (const [i, r] of receiver.received.entries()) {
      expect(verifyReloadRequest(SECRET, { signature: r.headers[RELOAD_HEADERS.signature] as string, timestamp: r.headers[RELOAD_HEADERS.timestamp] as string }, r.raw)).toBeNull();
      expect(bodies[i]!.changed_by).not.toMatch(/^pipeline:/);
    }
    expect(new Set(bodies.map((b) => b.event_id)).size).toBe(4);
    // Each hook arrived after its change committed: the receiver read the new stages when it was called.
    expect(receiver.received.slice(0, 3).map((r) => r.stages)).toEqual([
      { 1: 'production', 2: 'staging' },
      { 1: 'archived', 2: 'production' },
      { 1: 'production', 2: 'archived' },
    ]);
    const notified = (await modelEvents(model)).filter((e) => e.event === 'model.reload_notified');
    expect(notified.map((e) => [e.version, e.pipeline_id, e.hook_event_id])).toEqual(bodies.map((b) => [b.model.version, null, b.event_id]));
  });

  it('retries a receiver that answers 500 until it answers 200, with the same event id, and delivers once', async () => {
    const model = 'reload-retried';
    const receiver = new Receiver(model, (n) => (n <= 3 ? 500 : 200));
    const url = `http://127.0.0.1:${await receiver.listen()}/reload`;
    const taskQueue = `reload-${randomUUID()}`;
    const { got } = await withWorker(hookEnv(url, '2m'), taskQueue, async () => {
      const started = await startPipeline(model, taskQueue, '2m');
      await started.handle.result();
      return { ...started, got: await api(`/v1/pipelines/${started.id}`) };
    });
    await receiver.close();

    expect(receiver.received.map((r) => r.answered)).toEqual([500, 500, 500, 200]);
    expect(new Set(receiver.received.map((r) => r.headers[RELOAD_HEADERS.eventId])).size).toBe(1);
    for (const r of receiver.received) expect(verifyReloadRequest(SECRET, { signature: r.headers[RELOAD_HEADERS.signature] as string, timestamp: r.headers[RELOAD_HEADERS.timestamp] as string }, r.raw)).toBeNull();
    expect(got.body.result.outcome).toBe('promoted');
    expect(got.body.progress.reload).toMatchObject({ status: 'delivered', attempts: 4, http_status: 200 });
    expect((await modelEvents(model)).filter((e) => e.event.startsWith('model.reload_'))).toMatchObject([{ event: 'model.reload_notified', attempts: 4 }]);
  });

  it('goes on retrying after the worker is killed mid-retry, and delivers once the receiver is up', { timeout: 240_000 }, async () => {
    const model = 'reload-restart';
    const port = await freePort(); // nothing listens on it yet: the serving layer is down
    const url = `http://127.0.0.1:${port}/reload`;
    const taskQueue = `reload-${randomUUID()}`;
    const env = hookEnv(url, '4m');
    const logFile = join(env.HANZO_ML_HOME!, 'worker.log');
    const main = fileURLToPath(new URL('./support/promotion-worker-main.ts', import.meta.url));
    const tsx = fileURLToPath(new URL('../node_modules/tsx/dist/esm/index.mjs', import.meta.url));
    const spawnWorker = (): ChildProcess => {
      const log = openSync(logFile, 'a');
      return spawn(process.execPath, ['--import', tsx, main], { env: { ...process.env, ...env, TEST_TEMPORAL_ADDRESS: temporal.address, TEST_TASK_QUEUE: taskQueue }, stdio: ['ignore', log, log] });
    };
    let worker = spawnWorker();
    const receiver = new Receiver(model, () => 200);
    try {
      const { id, handle } = await startPipeline(model, taskQueue, '4m');
      // Killed between attempts: attempts 1..failedAttempt failed on this worker, the next one waits for its backoff.
      const before = await until('the hook to fail twice', 120_000, async () => {
        const p = await pendingHook(handle);
        return p && p.failedAttempt >= 2 && !p.started ? p : null;
      });
      expect(before.lastFailure).toMatch(/unreachable.*ECONNREFUSED/);
      expect(before.worker).toContain(`${worker.pid}@`);
      expect((await api(`/v1/pipelines/${id}`)).body.progress.reload).toMatchObject({ status: 'pending' });

      worker.kill('SIGKILL');
      await new Promise((r) => worker.once('exit', r));
      worker = spawnWorker();
      // The new process takes the retries over where the killed one left them (the attempt count goes on).
      const after = await until('an attempt by the restarted worker', 120_000, async () => {
        const p = await pendingHook(handle);
        return p && p.worker.startsWith(`${worker.pid}@`) && p.failedAttempt > before.failedAttempt ? p : null;
      });
      expect(after.failedAttempt).toBe(before.failedAttempt + 1);
      expect(after.lastFailure).toMatch(/unreachable.*ECONNREFUSED/);

      await receiver.listen(port);
      const result = (await handle.result()) as PipelineResult;
      expect(result.outcome).toBe('promoted');
      expect(receiver.received.map((r) => r.answered)).toEqual([200]);
      expect(result.progress.reload).toMatchObject({ status: 'delivered', http_status: 200 });
      expect(result.progress.reload!.attempts).toBeGreaterThan(after.failedAttempt);
      expect(receiver.received[0]!.stages).toEqual({ 1: 'archived', 2: 'production' });
    } finally {
      worker.kill('SIGTERM');
      await receiver.close();
    }
  });

  it('gives up after the deadline: the version stays in production, the pipeline completes with the failure shown', async () => {
    const model = 'reload-deadline';
    const receiver = new Receiver(model, () => 503);
    const url = `http://127.0.0.1:${await receiver.listen()}/reload`;
    const taskQueue = `reload-${randomUUID()}`;
    const { id, got } = await withWorker(hookEnv(url, '6s'), taskQueue, async () => {
      const started = await startPipeline(model, taskQueue, '6s');
      await started.handle.result();
      return { ...started, got: await api(`/v1/pipelines/${started.id}`) };
    });
    await receiver.close();

    expect(receiver.received.length).toBeGreaterThanOrEqual(2);
    expect(receiver.received.every((r) => r.answered === 503)).toBe(true);
    expect(got.body.status).toBe('COMPLETED');
    expect(got.body.result.outcome).toBe('promoted');
    expect(got.body.result.warnings).toHaveLength(1);
    expect(got.body.result.warnings[0]).toMatch(/^reload hook failed: version 2 of reload-deadline is in production but serving was not told/);
    expect(got.body.progress.reload).toMatchObject({ status: 'failed', attempts: null });
    expect(got.body.progress.reload.error).toMatch(/no 2xx within promotion.webhook_deadline 6s; last: reload hook http:\/\/127.0.0.1:\d+\/reload answered 503/);
    expect(got.body.progress.model_version).toEqual({ name: model, version: 2, stage: 'production' });
    const version = await api(`/v1/models/${model}/versions/2`);
    expect(version.body.stage).toBe('production');
    expect((await api(`/v1/models/${model}/versions/1`)).body.stage).toBe('archived');
    const failed = (await modelEvents(model)).filter((e) => e.event.startsWith('model.reload_'));
    expect(failed).toMatchObject([{ event: 'model.reload_failed', version: 2, pipeline_id: id }]);
    expect(failed[0]!.error).toMatch(/503/);
  });
});

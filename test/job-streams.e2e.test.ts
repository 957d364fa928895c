// A job's events and log followed end to end across restarts, on one stack of separate parts sharing Postgres,
// Temporal and the object store: the worker (the job's activities, local executor) and the API (the streams) each
// run in a runtime of their own, so either can be stopped and started again while a recipe job trains. Followers
// are the CLI's own functions (cli/job-logs.ts) and the `hanzo-ml job logs --follow` binary: after both restarts
// what they received is exactly the final job.log and the job's events, nothing lost, nothing twice.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTemporalDevServer, type DevServer } from '../lib/temporal-dev-server.js';
import { startRuntime, type Runtime } from '../runtime/embedded.js';
import { bundleWorkflows } from '../workers/worker.js';
import { testConfig, DEV_TOKEN } from './support/config.js';
import { freePort } from './support/ports.js';
import { startPostgres, type TestPostgres } from './support/postgres.js';
import { createApiClient } from '../cli/api-client.js';
import { followJobEvents, followJobLog } from '../cli/job-logs.js';
import type { JobEventView } from '../contracts/jobs.js';
import { listJobEvents } from '../db/repo/job-events.js';
import { JobLog, submittedJobName } from '../lib/job-log.js';
import { DEFAULT_BASE_MODEL } from '../lib/base-models.js';
import type { LoadedConfig } from '../lib/config.js';

const bin = fileURLToPath(new URL('../bin/hanzo-ml', import.meta.url));
const chat = (q: string, a: string) => JSON.stringify({ messages: [{ role: 'user', content: q }, { role: 'assistant', content: a }] });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let pg: TestPostgres;
let temporal: DevServer;
let loaded: LoadedConfig;
let bundle: Awaited<ReturnType<typeof bundleWorkflows>>;
let worker: Runtime;
let api: Runtime;

const startWorker = () => startRuntime({ ...loaded, temporalAddress: temporal.address, temporalUiUrl: null, workflowBundle: bundle, worker: true, listen: false });
const startApi = () => startRuntime({ ...loaded, temporalAddress: temporal.address, temporalUiUrl: null, worker: false, listen: true });

async function until<T>(what: string, probe: () => Promise<T | null | undefined | false>, timeoutMs = 5 * 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const got = await probe().catch(() => null);
    if (got) return got;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(200);
  }
}

/** The whole of a stored log, read as a follower reads it (the job's attempts one after the other). */
async function wholeLog(log: JobLog): Promise<string> {
  const chunks: Buffer[] = [];
  let at = 0;
  for (let r = await log.readFrom(at); r; r = await log.readFrom(at)) {
    for await (const c of r.body) chunks.push(c as Buffer);
    at = r.end;
  }
  return Buffer.concat(chunks).toString('utf8');
}

beforeAll(async () => {
  pg = await startPostgres();
  const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-streams-'));
  const port = await freePort();
  // One home for both parts: the same object store and the local executor's job workspaces.
  loaded = testConfig({ HANZO_ML_HOME: home, HANZO_ML_DATABASE_URL: await pg.createDatabase('job_streams'), HANZO_ML_SERVER_PORT: String(port), HANZO_ML_TEMPORAL_HEARTBEAT_TIMEOUT: '5s' });
  mkdirSync(join(home, 'logs'), { recursive: true });
  temporal = await startTemporalDevServer({ binary: loaded.bootstrap.temporal, home, port: 0, uiPort: null, namespace: 'default' });
  bundle = await bundleWorkflows();
  worker = await startWorker();
  api = await startApi();
}, 240_000);

afterAll(async () => {
  await api?.stop();
  await worker?.stop({ stopJobs: true });
  await temporal?.stop();
  await pg?.stop();
});

/**
 * Enough steps that the job still trains through a worker restart and an API restart on an idle machine, where the
 * tiny model runs 120 steps in under 10 s.
 */
const STEPS = 400;

describe('job events and logs across a worker restart and an API restart', () => {
  it('delivers every event and every byte of the log exactly once to followers that reconnect, and the CLI exits with the outcome', { timeout: 12 * 60_000 }, async () => {
    const client = createApiClient(api.apiUrl, DEV_TOKEN);
    const rows = Array.from({ length: 24 }, (_, i) => chat(`what is ${i} plus one?`, `${i + 1}`)).join('\n');
    await client.post('/v1/datasets?name=streams-ds&format=jsonl&wait=true', undefined, { raw: rows, headers: { 'content-type': 'application/octet-stream' } });
    const submittedAt = Date.now();
    const job = await client.post<{ id: string; status: string }>('/v1/jobs', {
      name: 'followed',
      type: 'training',
      recipe: { base_model: DEFAULT_BASE_MODEL, method: 'lora', dataset: { name: 'streams-ds' }, hyperparameters: { learning_rate: 1e-3, max_steps: STEPS, batch_size: 2, max_seq_length: 64 } },
    });

    const events: JobEventView[] = [];
    let firstEventAt: number | null = null;
    let logText = '';
    const reconnects = { events: 0, logs: 0 };
    const eventsDone = followJobEvents(client, job.id, {
      print: (e) => {
        firstEventAt ??= Date.now();
        events.push(e);
      },
      onReconnect: () => reconnects.events++,
    });
    const logDone = followJobLog(client, job.id, { follow: true, write: (t) => (logText += t), onReconnect: () => reconnects.logs++ });
    const cli = spawn(bin, ['job', 'logs', job.id, '--follow'], { env: { ...process.env, HANZO_ML_API_URL: api.apiUrl, HANZO_ML_TOKEN: DEV_TOKEN }, stdio: ['ignore', 'pipe', 'pipe'] });
    let cliOut = '';
    let cliErr = '';
    cli.stdout.on('data', (d: Buffer) => (cliOut += d.toString()));
    cli.stderr.on('data', (d: Buffer) => (cliErr += d.toString()));
    const cliExit = new Promise<number | null>((r) => cli.once('exit', r));

    const stepOf = (e: JobEventView | undefined) => Number(e?.data.step ?? 0);
    const lastStep = () => stepOf(events.findLast((e) => e.type === 'metrics'));
    // The worker stops while the job trains (the job runs on, detached) and a new one re-attaches to it.
    await until('a few training steps as events', async () => lastStep() >= 3);
    const stepAtWorkerRestart = lastStep();
    await worker.stop();
    worker = await startWorker();
    // Then the API: every follower's connection drops, and each reconnects from the last id or offset it had.
    await until('training steps after the worker restart', async () => lastStep() >= stepAtWorkerRestart + 5);
    expect(lastStep(), 'the job must still be training when the API restarts (raise STEPS on a faster machine)').toBeLessThan(STEPS - 5);
    await api.stop();
    await sleep(1500);
    api = await startApi();

    const outcome = await eventsDone;
    expect(outcome.status, outcome.message ?? '').toBe('succeeded');
    expect(await logDone).toMatchObject({ status: 'succeeded' });
    expect(reconnects.events).toBeGreaterThan(0);
    expect(reconnects.logs).toBeGreaterThan(0);

    // Every event once, ascending: what the follower got is the job's event log as stored.
    const stored = await listJobEvents(api.catalogue.db, 'dev', job.id, { limit: 10_000 });
    expect(events.map((e) => e.id)).toEqual(stored.map((e) => e.seq));
    const steps = events.filter((e) => e.type === 'metrics').map(stepOf);
    expect(steps).toEqual([...new Set(steps)].sort((a, b) => a - b));
    expect(steps.at(-1)).toBe(STEPS);
    expect(events.filter((e) => e.type === 'checkpoint').length).toBeGreaterThan(0);
    expect(events.filter((e) => e.type === 'status').map((e) => e.data.status)).toEqual(expect.arrayContaining(['queued', 'running', 'succeeded']));
    expect(firstEventAt! - submittedAt).toBeLessThan(5000);

    // Every byte of the log once, in order.
    const final = await wholeLog(new JobLog(api.store, loaded.config, 'dev', submittedJobName(job.id, 'recipe')));
    expect(final).toContain(`step ${STEPS}/${STEPS}`);
    expect(logText).toBe(final);

    // The CLI printed the whole log through both restarts and exited 0 for a job that succeeded.
    expect(await cliExit, cliErr).toBe(0);
    expect(cliOut).toBe(final);
    expect(cliErr).toMatch(/job succeeded/);

    // The JSON pages: ascending, and a cursor that walks the whole log.
    const paged: number[] = [];
    for (let after: number | null = null; ; ) {
      const page: { data: JobEventView[]; has_more: boolean; next_cursor: number } = await client.get(`/v1/jobs/${job.id}/events?limit=7${after !== null ? `&after=${after}` : ''}`);
      paged.push(...page.data.map((e) => e.id));
      if (!page.has_more) break;
      after = page.next_cursor;
    }
    expect(paged).toEqual(stored.map((e) => e.seq));
  });

  it('ends a log follower of a failing job with its outcome, and the CLI exits 1; bad cursors are 400s naming them', { timeout: 5 * 60_000 }, async () => {
    const client = createApiClient(api.apiUrl, DEV_TOKEN);
    const job = await client.post<{ id: string }>('/v1/jobs', { type: 'training', image: 'trainer', command: ['python3', '-c', "import sys; print('before the failure'); sys.exit(7)"] });
    const cli = spawn(bin, ['job', 'logs', job.id, '--follow'], { env: { ...process.env, HANZO_ML_API_URL: api.apiUrl, HANZO_ML_TOKEN: DEV_TOKEN }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    cli.stdout.on('data', (d: Buffer) => (out += d.toString()));
    cli.stderr.on('data', (d: Buffer) => (err += d.toString()));
    expect(await new Promise((r) => cli.once('exit', r)), err).toBe(1);
    expect(out).toContain('before the failure');
    expect(err).toMatch(/job failed/);

    const bad = await fetch(`${api.apiUrl}/v1/jobs/${job.id}/logs?offset=-1`, { headers: { authorization: `Bearer ${DEV_TOKEN}` } });
    expect(bad.status).toBe(400);
    expect(await bad.text()).toMatch(/offset/);
    const badId = await fetch(`${api.apiUrl}/v1/jobs/${job.id}/events`, { headers: { authorization: `Bearer ${DEV_TOKEN}`, accept: 'text/event-stream', 'last-event-id': 'abc' } });
    expect(badId.status).toBe(400);
    expect(await badId.text()).toMatch(/Last-Event-ID/);
    expect((await fetch(`${api.apiUrl}/v1/jobs/no-such-job/logs`, { headers: { authorization: `Bearer ${DEV_TOKEN}` } })).status).toBe(404);
  });
});

// A job's tracking token, against a real embedded stack (Temporal dev server, PGlite, the listening API): it
// reaches only the run it was made for, wherever a request names the run; it stops working when its job ends
// (success, failure, cancellation), stays valid while a job left running by a worker shutdown goes on; an admin
// lists and revokes job tokens, each revocation an audit row. The jobs are node scripts run by the real local
// executor in place of the trainer (which these tests are not about): each reports a metric with the token it
// was given, as the trainer's tracking client does, and records the token for the test.
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MockActivityEnvironment } from '@temporalio/testing';
import { ActivityCancellationDetails } from '@temporalio/common';
import { startTestStack, type TestStack } from './support/stack.js';
import { DEV_TOKEN } from './support/config.js';
import { LocalExecutor } from '../jobs/executor/local.js';
import type { ActivityDeps } from '../activities/deps.js';
import { jobTokenSecrets } from '../jobs/deps.js';
import { runJobToCompletion } from '../activities/run-job.js';
import type { JobDefinition } from '../jobs/definition.js';
import { createJobToken, renewJobTokens } from '../db/repo/auth.js';
import { FileObjectStore } from '../lib/object-store.js';
import { createLogger } from '../lib/log.js';
import { JOB_FILES } from '../contracts/job-io.js';

let stack: TestStack;
const tokens: Record<string, string> = {};

async function call(method: string, path: string, token: string, body?: unknown) {
  const res = await fetch(stack.runtime.apiUrl + path, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
}

async function newRun(name: string): Promise<string> {
  const made = await call('POST', '/api/2.0/mlflow/runs/create', DEV_TOKEN, { experiment_id: '0', run_name: name });
  expect(made.status).toBe(200);
  return (made.body.run as { info: { run_id: string } }).info.run_id;
}

async function metricKeys(runId: string): Promise<string[]> {
  const got = await call('GET', `/api/2.0/mlflow/runs/get?run_id=${runId}`, DEV_TOKEN);
  return ((got.body.run as { data: { metrics?: { key: string }[] } }).data.metrics ?? []).map((m) => m.key);
}

const batch = (key: string) => ({ metrics: [{ key, value: 1, timestamp: Date.now(), step: 0 }] });

beforeAll(async () => {
  stack = await startTestStack({}, { worker: false });
  const orgB = await call('POST', '/v1/organizations', DEV_TOKEN, { name: 'org-b' });
  tokens.adminB = (orgB.body.admin_token as { token: string }).token;
  tokens.researcher = (await call('POST', '/v1/tokens', DEV_TOKEN, { subject: 'res', role: 'ml-researcher' })).body.token as string;
}, 180_000);

afterAll(async () => {
  await stack?.stop();
});

describe('a job token names its run in one place only', () => {
  it('logs to its own run, and a request naming another run in the query string or the body is refused as not found, writing nothing', async () => {
    const r = await newRun('own');
    const s = await newRun('other');
    const token = await createJobToken(stack.runtime.catalogue.db, { organizationId: 'dev', job: 'p-train', runId: r, ttlMs: 60_000 });
    const path = '/api/2.0/mlflow/runs/log-batch';
    expect((await call('POST', path, token, { run_id: r, ...batch('own') })).status).toBe(200);
    expect((await call('POST', `${path}?run_id=${r}`, token, { run_id: r, ...batch('own-query') })).status).toBe(200);
    const refused = [
      [`${path}?run_id=${r}`, { run_id: s, ...batch('body-s') }],
      [`${path}?run_id=${s}`, { run_id: r, ...batch('query-s') }],
      [`${path}?run_id=${r}&run_id=${s}`, { run_id: r, ...batch('query-r-then-s') }],
      [`${path}?run_id=${s}&run_id=${r}`, { run_id: r, ...batch('query-s-then-r') }],
      [`${path}?run_uuid=${s}`, { run_id: r, ...batch('uuid-query') }],
      [path, { run_id: r, run_uuid: s, ...batch('uuid-body') }],
      [path, { run_uuid: s, ...batch('uuid-only') }],
      [path, batch('no-run')],
    ] as const;
    for (const [url, body] of refused) {
      const res = await call('POST', url, token, body);
      const named = body.metrics[0]!.key;
      expect({ url, named, status: res.status }).toEqual({ url, named, status: 404 });
      expect(res.body.error_code).toBe('RESOURCE_DOES_NOT_EXIST');
    }
    for (const method of ['log-metric', 'set-tag', 'log-parameter', 'update'])
      expect((await call('POST', `/api/2.0/mlflow/runs/${method}?run_id=${r}`, token, { run_id: s, key: 'k', value: 'v', timestamp: 1, status: 'FAILED' })).status).toBe(404);
    expect((await call('GET', `/api/2.0/mlflow/runs/get?run_id=${r}&run_id=${s}`, token)).status).toBe(404);
    expect((await call('GET', `/api/2.0/mlflow/runs/get?run_id=${s}&run_id=${r}`, token)).status).toBe(404);
    expect((await call('GET', `/api/2.0/mlflow/runs/get?run_id=${r}`, token)).status).toBe(200);
    expect(await metricKeys(s)).toEqual([]);
    expect((await metricKeys(r)).sort()).toEqual(['own', 'own-query']);
    const other = await call('GET', `/api/2.0/mlflow/runs/get?run_id=${s}`, DEV_TOKEN);
    expect((other.body.run as { data: { tags?: { key: string }[] } }).data.tags?.map((t) => t.key)).not.toContain('k');
    expect((other.body.run as { info: { status: string } }).info.status).toBe('RUNNING');
  }, 60_000);
});

/** A job that reports one metric to its run with the token it was given, records the token and the answer, then does `then`. */
function reportingScript(then: 'exit0' | 'exit1' | 'wait'): string {
  const end =
    then === 'exit0'
      ? `fs.writeFileSync(d + '/${JOB_FILES.result}', JSON.stringify({ ok: true })); process.exit(0);`
      : then === 'exit1'
        ? 'process.exit(1);'
        : 'setInterval(() => {}, 1000);';
  return `const fs = require('fs'); const [d, marker] = process.argv.slice(1);
    (async () => {
      const res = await fetch(process.env.TRACKING_URL + '/api/2.0/mlflow/runs/log-batch', {
        method: 'POST',
        headers: { authorization: 'Bearer ' + process.env.HANZO_ML_TRACKING_TOKEN, 'content-type': 'application/json' },
        body: JSON.stringify({ run_id: process.env.RUN_ID, metrics: [{ key: 'from-job', value: 1, timestamp: Date.now(), step: 0 }] }),
      });
      fs.writeFileSync(marker, JSON.stringify({ token: process.env.HANZO_ML_TRACKING_TOKEN, status: res.status }));
      ${end}
    })();`;
}

function jobDeps(script: string, runId: string): { deps: ActivityDeps; marker: string } {
  const root = mkdtempSync(join(tmpdir(), 'hanzo-ml-job-tokens-'));
  const marker = join(root, 'marker');
  const executor = new LocalExecutor({
    workRoot: join(root, 'work'),
    python: 'unused',
    env: { TRACKING_URL: stack.runtime.apiUrl, RUN_ID: runId },
    // The scratch path names the job's workspace on its command line, which is how the executor finds its processes.
    command: (job, scratch) => [process.execPath, '-e', script, dirname(fileURLToPath(job.envelopeUri)), marker, scratch],
  });
  const db = stack.runtime.catalogue.db;
  const deps = {
    db,
    executor,
    store: new FileObjectStore(join(root, 'objects')),
    log: createLogger({ level: 'error', format: 'text' }),
    config: stack.loaded.config,
    jobSecrets: jobTokenSecrets(db),
  } as unknown as ActivityDeps;
  return { deps, marker };
}

const jobOf = (name: string, runId: string): JobDefinition => ({ name, kind: 'train', organizationId: 'dev', runId, envelope: { tool: 'trainer', spec: {} } });

async function reported(marker: string): Promise<{ token: string; status: number }> {
  for (let i = 0; i < 300 && !existsSync(marker); i++) await new Promise((r) => setTimeout(r, 100));
  return JSON.parse(readFileSync(marker, 'utf8')) as { token: string; status: number };
}

const logWith = (token: string, runId: string) => call('POST', '/api/2.0/mlflow/runs/log-batch', token, { run_id: runId, ...batch('after-end') });

describe('a job token ends with its job', () => {
  it('works while the job runs and is refused (401) once it has exited 0', async () => {
    const run = await newRun('success');
    const { deps, marker } = jobDeps(reportingScript('exit0'), run);
    await new MockActivityEnvironment().run(() => runJobToCompletion(deps, { job: jobOf('tok-ok', run), resultSchema: z.object({ ok: z.boolean() }), pollMs: 100 }));
    const { token, status } = await reported(marker);
    expect(status).toBe(200);
    expect(await metricKeys(run)).toContain('from-job');
    const after = await logWith(token, run);
    expect(after.status).toBe(401);
  }, 60_000);

  it('is refused once the job has failed', async () => {
    const run = await newRun('failure');
    const { deps, marker } = jobDeps(reportingScript('exit1'), run);
    await expect(new MockActivityEnvironment().run(() => runJobToCompletion(deps, { job: jobOf('tok-fail', run), resultSchema: z.object({ ok: z.boolean() }), pollMs: 100 }))).rejects.toThrow(/exited with code 1/);
    const { token, status } = await reported(marker);
    expect(status).toBe(200);
    expect((await logWith(token, run)).status).toBe(401);
  }, 60_000);

  it('is refused once the job was cancelled and stopped, and stays valid while a worker shutdown leaves its job running', async () => {
    const run = await newRun('cancel');
    const cancelled = jobDeps(reportingScript('wait'), run);
    const env = new MockActivityEnvironment();
    const driving = env.run(() => runJobToCompletion(cancelled.deps, { job: jobOf('tok-cancel', run), resultSchema: z.object({ ok: z.boolean() }), pollMs: 100 }));
    const first = await reported(cancelled.marker);
    expect(first.status).toBe(200);
    env.cancel();
    await expect(driving).rejects.toThrow();
    expect((await logWith(first.token, run)).status).toBe(401);

    const left = jobDeps(reportingScript('wait'), run);
    const shutdown = new MockActivityEnvironment();
    const job = jobOf('tok-shutdown', run);
    const still = shutdown.run(() => runJobToCompletion(left.deps, { job, resultSchema: z.object({ ok: z.boolean() }), pollMs: 100 }));
    const second = await reported(left.marker);
    shutdown.cancel('WORKER_SHUTDOWN', new ActivityCancellationDetails({ workerShutdown: true }));
    await expect(still).rejects.toThrow();
    expect((await logWith(second.token, run)).status).toBe(200);
    // The next attempt of the activity re-attaches to the running job and, once it is cancelled, revokes the
    // token the job started with too.
    const again = new MockActivityEnvironment();
    const resumed = again.run(() => runJobToCompletion(left.deps, { job, resultSchema: z.object({ ok: z.boolean() }), pollMs: 100 }));
    await new Promise((r) => setTimeout(r, 500));
    again.cancel();
    await expect(resumed).rejects.toThrow();
    expect((await logWith(second.token, run)).status).toBe(401);
  }, 90_000);

  it('expires at the end of its lease unless renewed, and an expired one is not revived', async () => {
    const db = stack.runtime.catalogue.db;
    const run = await newRun('lease');
    const token = await createJobToken(db, { organizationId: 'dev', job: 'tok-lease', runId: run, ttlMs: 1500 });
    expect(await renewJobTokens(db, { organizationId: 'dev', job: 'tok-lease', ttlMs: 60_000 })).toBe(1);
    await new Promise((r) => setTimeout(r, 1800));
    expect((await logWith(token, run)).status).toBe(200);
    const lapsed = await createJobToken(db, { organizationId: 'dev', job: 'tok-lapsed', runId: run, ttlMs: 300 });
    await new Promise((r) => setTimeout(r, 500));
    expect(await renewJobTokens(db, { organizationId: 'dev', job: 'tok-lapsed', ttlMs: 60_000 })).toBe(0);
    expect((await logWith(lapsed, run)).status).toBe(401);
  }, 30_000);
});

describe('admins list and revoke job tokens', () => {
  it("lists the organization's job tokens with their job and run, revokes one with an audit row, after which it is refused", async () => {
    const run = await newRun('listed');
    const token = await createJobToken(stack.runtime.catalogue.db, { organizationId: 'dev', job: 'p-listed-train', runId: run, ttlMs: 60_000 });
    expect((await logWith(token, run)).status).toBe(200);
    const list = await call('GET', '/v1/tokens?kind=job', DEV_TOKEN);
    expect(list.status).toBe(200);
    const listed = (list.body.tokens as { id: string; job: string; run_id: string; active: boolean }[]).find((t) => t.job === 'p-listed-train');
    expect(listed).toMatchObject({ run_id: run, active: true });
    // User tokens and job tokens are listed apart.
    expect((await call('GET', '/v1/tokens', DEV_TOKEN)).body.tokens).not.toEqual(expect.arrayContaining([expect.objectContaining({ id: listed!.id })]));
    expect((await call('GET', '/v1/tokens?kind=robots', DEV_TOKEN)).status).toBe(400);

    expect((await call('DELETE', `/v1/tokens/${listed!.id}`, tokens.adminB!)).status).toBe(404);
    expect((await call('DELETE', `/v1/tokens/${listed!.id}`, tokens.researcher!)).status).toBe(403);
    expect((await logWith(token, run)).status).toBe(200);
    const revoked = await call('DELETE', `/v1/tokens/${listed!.id}`, DEV_TOKEN);
    expect(revoked).toMatchObject({ status: 200, body: { id: listed!.id, kind: 'job', revoked: true } });
    expect((await logWith(token, run)).status).toBe(401);
    const after = (await call('GET', '/v1/tokens?kind=job', DEV_TOKEN)).body.tokens as { id: string; active: boolean; revoked_at: string | null }[];
    expect(after.find((t) => t.id === listed!.id)).toMatchObject({ active: false, revoked_at: expect.any(String) });
    const audit = await call('GET', '/v1/audit?action=token.revoke', DEV_TOKEN);
    expect(audit.body.entries).toEqual(expect.arrayContaining([expect.objectContaining({ resource: listed!.id, actor: 'dev', detail: { kind: 'job', job: 'p-listed-train', run_id: run } })]));
  }, 60_000);

  it('refuses a non-admin the list, and another organization sees none of these tokens', async () => {
    expect((await call('GET', '/v1/tokens?kind=job', tokens.researcher!)).status).toBe(403);
    const other = await call('GET', '/v1/tokens?kind=job', tokens.adminB!);
    expect(other.status).toBe(200);
    expect(other.body.tokens).toEqual([]);
  });
});

// The stock `openai` Python client (pinned in test/openai-client.lock, in its own venv made by
// scripts/bootstrap.sh --tests) against one embedded stack with a worker and the local executor: with only base_url
// and api_key changed (a hanzo-ml token), it uploads a training file, creates a fine-tuning job, lists jobs, follows
// the job's events until some appear, retrieves and cancels it; the cancel's end reaches a registered webhook.
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { DEV_TOKEN } from './support/config.js';
import { createApiToken } from '../db/repo/auth.js';
import { DEFAULT_BASE_MODEL } from '../lib/base-models.js';
import { verifyWebhook } from '../lib/webhook-signature.js';

const run = promisify(execFile);
const chat = (q: string, a: string) => JSON.stringify({ messages: [{ role: 'user', content: q }, { role: 'assistant', content: a }] });

describe('the stock openai Python client against /v1/files and /v1/fine_tuning/jobs', () => {
  let stack: TestStack;
  let token: string;
  let hook: Server;
  const deliveries: { headers: Record<string, string>; body: string }[] = [];

  beforeAll(async () => {
    stack = await startTestStack({ HANZO_ML_WEBHOOKS_ALLOW_PRIVATE_TARGETS: 'true' });
    token = (await stack.runtime.catalogue.db.transaction((tx) => createApiToken(tx, { organizationId: 'dev', subject: 'openai-user', role: 'developer', expiresAt: null }))).token;
    hook = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        deliveries.push({ headers: req.headers as Record<string, string>, body });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((r) => hook.listen(0, '127.0.0.1', r));
  }, 120_000);
  afterAll(async () => {
    hook?.close();
    await stack?.stop();
  });

  it('uploads, creates, lists, follows events of, retrieves and cancels a fine-tuning job', async () => {
    const python = stack.loaded.bootstrap.openai_python;
    if (!python) throw new Error('.bootstrap.json has no openai_python: run scripts/bootstrap.sh --tests');
    const endpoint = await fetch(`${stack.runtime.apiUrl}/v1/webhooks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${DEV_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url: `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hook`, events: ['fine_tuning.job.cancelled'] }),
    }).then((r) => r.json() as Promise<{ secret: string }>);

    const dir = mkdtempSync(join(tmpdir(), 'hanzo-ml-openai-'));
    const training = join(dir, 'support.jsonl');
    writeFileSync(training, Array.from({ length: 24 }, (_, i) => chat(`How do I reset password ${i}?`, `Open settings, step ${i}.`)).join('\n') + '\n');
    const { stdout } = await run(python, [join(import.meta.dirname, 'openai-client', 'fine_tuning_flow.py'), training, DEFAULT_BASE_MODEL], {
      env: { PATH: process.env.PATH ?? '', HOME: dir, HANZO_ML_BASE_URL: `${stack.runtime.apiUrl}/v1`, HANZO_ML_TOKEN: token },
      timeout: 300_000,
      maxBuffer: 16 * 1024 * 1024,
    });
    const out = JSON.parse(stdout) as Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

    expect(out.file).toMatchObject({ object: 'file', purpose: 'fine-tune', filename: 'support.jsonl', status: 'processed' });
    expect(out.files_listed).toContain(out.file.id);
    expect(out.created).toMatchObject({
      object: 'fine_tuning.job',
      model: DEFAULT_BASE_MODEL,
      training_file: out.file.id,
      seed: 3,
      hyperparameters: { n_epochs: 1, batch_size: 2, learning_rate_multiplier: 1 },
      metadata: { client: 'openai-python' },
      user_provided_suffix: 'from-openai-client',
    });
    expect(['validating_files', 'queued', 'running']).toContain(out.created.status);
    expect(out.listed[0]).toBe(out.created.id);
    expect(out.events.length).toBeGreaterThan(0);
    expect(out.events[0]).toMatchObject({ object: 'fine_tuning.job.event', level: 'info' });
    expect(out.retrieved.id).toBe(out.created.id);
    expect(Array.isArray(out.checkpoints)).toBe(true);
    expect(out.cancel_answer.id).toBe(out.created.id);
    expect(out.final_status).toBe('cancelled');
    // The cancellation is an event after the ones first followed, in order.
    const later = out.events_after_cancel as { id: string; message: string }[];
    expect(later.map((e) => Number(e.id))).toEqual(later.map((e) => Number(e.id)).sort((a, b) => a - b));
    expect(Number(later[0]?.id)).toBeGreaterThan(Number(out.events.at(-1).id));
    expect(later.some((e) => /cancel/i.test(e.message))).toBe(true);

    // The same job through /v1/jobs: one job, two views.
    const job = await fetch(`${stack.runtime.apiUrl}/v1/jobs/${out.created.id}`, { headers: { authorization: `Bearer ${token}` } }).then((r) => r.json() as Promise<{ status: string; kind: string }>);
    expect(job).toMatchObject({ status: 'cancelled', kind: 'recipe' });

    const deadline = Date.now() + 30_000;
    while (!deliveries.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    expect(deliveries).toHaveLength(1);
    const { headers, body } = deliveries[0]!;
    expect(verifyWebhook(endpoint.secret, { id: headers['webhook-id']!, timestamp: headers['webhook-timestamp']!, signature: headers['webhook-signature']! }, body)).toBe(true);
    expect(JSON.parse(body)).toMatchObject({ type: 'fine_tuning.job.cancelled', data: { id: out.created.id, status: 'cancelled' } });
  }, 420_000);
});

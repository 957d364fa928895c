// The OpenAI-compatible routes on one embedded stack with no worker (jobs stay queued): /v1/files ingests a
// training file as a dataset version (a worker runs only while a file is uploaded, for its preparation job), /v1/fine_tuning/jobs maps onto recipe jobs, bad input is a 400 naming the
// field; webhooks are signed (Standard Webhooks), retried with the same webhook-id until a 2xx, never sent to a
// private address unless webhooks.allow_private_targets, and never redirected. Jobs end through setJobStatus, the
// function the job workflow's status activity calls (no worker runs here).
import { existsSync, readdirSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, withWorker, type TestStack } from './support/stack.js';
import { DEV_TOKEN, testConfig } from './support/config.js';
import { createApiToken } from '../db/repo/auth.js';
import { setJobStatus } from '../db/repo/jobs.js';
import { eq } from 'drizzle-orm';
import { claimDueDeliveries, deleteWebhookEndpoint, enqueueWebhookDeliveries, insertWebhookEndpoint, recordDeliveryAttempt } from '../db/repo/webhooks.js';
import { webhookDeliveries, webhookEndpoints } from '../db/schema/index.js';
import { deliverOne, isPrivateAddress, postWebhook } from '../events/webhooks.js';
import { ConfigError } from '../lib/config.js';
import { signWebhook, verifyWebhook } from '../lib/webhook-signature.js';

type Answer = { status: number; body: Record<string, any> }; // eslint-disable-line @typescript-eslint/no-explicit-any

const chat = (q: string, a: string) => JSON.stringify({ messages: [{ role: 'user', content: q }, { role: 'assistant', content: a }] });
const TRAINING = Array.from({ length: 20 }, (_, i) => chat(`question ${i}?`, `answer ${i}.`)).join('\n') + '\n';
const PAIRS = Array.from({ length: 12 }, (_, i) => JSON.stringify({ prompt: [{ role: 'user', content: `question ${i}?` }], chosen: `good answer ${i}.`, rejected: `bad ${i}` })).join('\n') + '\n';

interface Received {
  path: string;
  headers: IncomingMessage['headers'];
  body: string;
}

/** A loopback receiver answering each request with the next status of `statuses` (then the last one). */
async function receiver(statuses: number[], extra: Record<string, string> = {}): Promise<{ url: string; got: Received[]; server: Server }> {
  const got: Received[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      got.push({ path: req.url ?? '', headers: req.headers, body });
      const status = statuses[Math.min(got.length - 1, statuses.length - 1)]!;
      res.writeHead(status, extra).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, got, server };
}

describe('OpenAI-compatible API: files, fine-tuning jobs, webhooks', () => {
  let stack: TestStack;
  let developer: string;
  const servers: Server[] = [];

  async function call(method: string, path: string, body?: unknown, token = DEV_TOKEN, headers: Record<string, string> = {}): Promise<Answer> {
    const form = body instanceof FormData;
    const res = await fetch(stack.runtime.apiUrl + path, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body !== undefined && !form ? { 'content-type': 'application/json' } : {}), ...headers },
      body: body === undefined ? undefined : form ? body : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : {} };
  }
  const upload = (content: string, filename = 'support-chats.jsonl', purpose: string | null = 'fine-tune') => {
    const form = new FormData();
    if (purpose !== null) form.set('purpose', purpose);
    form.set('file', new Blob([content], { type: 'application/jsonl' }), filename);
    return withWorker(stack, () => call('POST', '/v1/files', form));
  };

  beforeAll(async () => {
    stack = await startTestStack({ HANZO_ML_WEBHOOKS_ALLOW_PRIVATE_TARGETS: 'true', HANZO_ML_WEBHOOKS_INITIAL_BACKOFF: '1s', HANZO_ML_WEBHOOKS_MAX_ATTEMPTS: '3' }, { worker: false });
    developer = (await stack.runtime.catalogue.db.transaction((tx) => createApiToken(tx, { organizationId: 'dev', subject: 'dev-researcher', role: 'developer', expiresAt: null }))).token;
  }, 120_000);
  afterAll(async () => {
    for (const s of servers) s.close();
    await stack?.stop();
  });

  describe('/v1/files', () => {
    it('ingests a JSONL training file as a dataset version and answers an OpenAI file object', async () => {
      const { status, body } = await upload(TRAINING);
      expect(status).toBe(200);
      expect(body).toMatchObject({ object: 'file', purpose: 'fine-tune', filename: 'support-chats.jsonl', status: 'processed', dataset: { name: 'support-chats', version: 1, num_records: 20 } });
      expect(body.bytes).toBeGreaterThan(0);
      const dataset = await call('GET', `/v1/datasets/${body.id}`);
      expect(dataset.status).toBe(200);
      expect(dataset.body).toMatchObject({ name: 'support-chats', num_records: 20 });
      expect((await call('GET', `/v1/files/${body.id}`)).body).toMatchObject({ id: body.id, object: 'file' });
      const list = await call('GET', '/v1/files?limit=100');
      expect(list.body.object).toBe('list');
      expect(list.body.data.map((f: { id: string }) => f.id)).toContain(body.id);
    });

    it('pages the file list with after, the id of the last file seen', async () => {
      for (let i = 0; i < 2; i++) expect((await upload(TRAINING, `paged-${i}.jsonl`)).status).toBe(200);
      const first = await call('GET', '/v1/files?limit=1');
      expect(first.body.has_more).toBe(true);
      const second = await call('GET', `/v1/files?limit=1&after=${first.body.data[0].id}`);
      expect(second.body.data[0].id).not.toBe(first.body.data[0].id);
      expect(second.body.data[0].created_at).toBeLessThanOrEqual(first.body.data[0].created_at);
    });

    it('refuses a bad upload with a 400 naming the field, or the line and field of the file', async () => {
      const cases: [Promise<Answer>, RegExp][] = [
        [upload(TRAINING, 'x.jsonl', 'batch'), /^purpose: "batch" is not supported/],
        [upload(TRAINING, 'x.jsonl', null), /^purpose: required/],
        [upload(TRAINING, 'x.csv'), /^file: "x\.csv" is not a \.jsonl file/],
        [upload(`${chat('q?', 'a.')}\n{"messages": [{"role": "bot", "content": "hi"}]}\n`, 'broken.jsonl'), /^file: broken\.jsonl:2: .*messages\[0\]\.role/],
        [call('POST', '/v1/files', { purpose: 'fine-tune' }), /expected multipart\/form-data/],
      ];
      for (const [answer, message] of cases) {
        const { status, body } = await answer;
        expect(status, JSON.stringify(body)).toBe(400);
        expect(body.message).toMatch(message);
      }
    });

    it('takes the file part before or after the purpose field, streaming it when the fields come first, and leaves no temporary file', async () => {
      const fileFirst = new FormData();
      fileFirst.set('file', new Blob([TRAINING], { type: 'application/jsonl' }), 'file-first.jsonl');
      fileFirst.set('purpose', 'fine-tune');
      const late = await withWorker(stack, () => call('POST', '/v1/files', fileFirst));
      expect(late.status, JSON.stringify(late.body)).toBe(200);
      const early = await upload(TRAINING, 'fields-first.jsonl');
      expect(early.status).toBe(200);
      for (const f of [late.body, early.body]) expect(f).toMatchObject({ status: 'processed', dataset: { num_records: 20 } });
      const [a, b] = await Promise.all([late.body.id, early.body.id].map((id: string) => call('GET', `/v1/datasets/${id}`)));
      expect(a!.body.metadata.source.sha256).toBe(b!.body.metadata.source.sha256);
      // A bad line streamed from the form: refused, and no version is left behind.
      const bad = await upload(`${chat('q?', 'a.')}\n{"messages": 7}\n`, 'streamed-bad.jsonl');
      expect(bad.status).toBe(400);
      expect(bad.body.message).toMatch(/^file: streamed-bad\.jsonl:2: /);
      const all = await call('GET', '/v1/files?limit=100');
      expect(all.body.data.filter((f: { filename: string }) => f.filename === 'streamed-bad.jsonl')).toEqual([]);
      const uploads = join(stack.home, 'tmp', 'uploads');
      expect(existsSync(uploads) ? readdirSync(uploads) : []).toEqual([]);
    });

    it('tells a file still being prepared as uploaded, and refuses a fine-tuning job on it until it is processed', async () => {
      // Uploaded as a dataset without waiting, with no worker to prepare it: it stays preparing.
      const res = await fetch(`${stack.runtime.apiUrl}/v1/datasets?name=still-preparing&format=jsonl`, { method: 'POST', headers: { authorization: `Bearer ${DEV_TOKEN}` }, body: TRAINING });
      const { id } = (await res.json()) as { id: string };
      expect((await call('GET', `/v1/files/${id}`)).body).toMatchObject({ id, status: 'uploaded', status_details: null });
      expect((await call('GET', '/v1/files?limit=100')).body.data.map((f: { id: string }) => f.id)).toContain(id);
      const job = await call('POST', '/v1/fine_tuning/jobs', { model: 'hanzo-tiny-llama', training_file: id });
      expect(job.status).toBe(400);
      expect(job.body.message).toMatch(new RegExp(`^training_file: file "${id}" is still being processed`));
    });

    it('refuses to delete a file: dataset versions are immutable', async () => {
      const { body } = await upload(TRAINING, 'kept.jsonl');
      const del = await call('DELETE', `/v1/files/${body.id}`);
      expect(del.status).toBe(409);
      expect(del.body.message).toMatch(/immutable/);
      expect((await call('GET', `/v1/files/${body.id}`)).status).toBe(200);
    });
  });

  describe('/v1/fine_tuning/jobs', () => {
    let fileId: string;
    let pairsId: string;
    beforeAll(async () => {
      fileId = (await upload(TRAINING, 'ft.jsonl')).body.id;
      pairsId = (await upload(PAIRS, 'pairs.jsonl')).body.id;
    });

    it('refuses bad input with a 400 naming the field, and queues nothing', async () => {
      const before = (await call('GET', '/v1/jobs?limit=500')).body.jobs.length;
      const ok = { model: 'hanzo-tiny-llama', training_file: () => fileId };
      const base = () => ({ model: ok.model, training_file: ok.training_file() });
      const cases: [unknown, RegExp][] = [
        [{ training_file: fileId }, /model: /],
        [{ model: 'hanzo-tiny-llama' }, /training_file: /],
        [{ ...base(), training_file: 'file-nope' }, /training_file: file "file-nope" does not exist/],
        [{ ...base(), model: 'gpt-4o-mini' }, /^model: /],
        [{ ...base(), hyperparameters: { n_epochs: 0 } }, /hyperparameters\.n_epochs/],
        [{ ...base(), hyperparameters: { batch_size: 'big' } }, /hyperparameters\.batch_size/],
        [{ ...base(), method: { type: 'supervised', supervised: { hyperparameters: { learning_rate_multiplier: -1 } } } }, /method\.supervised\.hyperparameters\.learning_rate_multiplier/],
        [{ ...base(), method: { type: 'reinforcement' } }, /method\.type: reinforcement fine-tuning is not supported/],
        [{ ...base(), method: { type: 'dpo', dpo: { hyperparameters: { beta: 0.5 } } } }, /method\.dpo\.hyperparameters\.beta/],
        [{ ...base(), method: { type: 'dpo' } }, /method\.type: dpo needs a preference file .* holds messages records/],
        [{ ...base(), suffix: 'has spaces' }, /suffix/],
        [{ ...base(), seed: -1 }, /seed/],
        [{ ...base(), validation_file: 'file-other' }, /validation_file: a separate validation file is not supported/],
        [{ ...base(), integrations: [{ type: 'wandb', wandb: { project: 'p' } }] }, /integrations/],
        [{ ...base(), metadata: { k: 'x'.repeat(513) } }, /metadata\.k/],
      ];
      for (const [body, message] of cases) {
        const res = await call('POST', '/v1/fine_tuning/jobs', body);
        expect(res.status, JSON.stringify(body)).toBe(400);
        expect(res.body.message).toMatch(message);
      }
      expect((await call('GET', '/v1/jobs?limit=500')).body.jobs.length).toBe(before);
    });

    it('creates a recipe job: epochs become steps over the training split, the multiplier scales the base learning rate', async () => {
      const created = await call(
        'POST',
        '/v1/fine_tuning/jobs',
        { model: 'hanzo-tiny-llama', training_file: fileId, method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 2, batch_size: 4, learning_rate_multiplier: 0.5 } } }, suffix: 'support', seed: 7, metadata: { team: 'care' } },
        developer,
      );
      expect(created.status, JSON.stringify(created.body)).toBe(200);
      const ft = created.body;
      expect(ft).toMatchObject({
        object: 'fine_tuning.job',
        model: 'hanzo-tiny-llama',
        training_file: fileId,
        status: 'validating_files',
        seed: 7,
        hyperparameters: { n_epochs: 2, batch_size: 4, learning_rate_multiplier: 0.5 },
        method: { type: 'supervised' },
        metadata: { team: 'care' },
        user_provided_suffix: 'support',
        organization_id: 'dev',
        error: null,
        finished_at: null,
      });
      const job = (await call('GET', `/v1/jobs/${ft.id}`)).body;
      const train = (await call('GET', `/v1/files/${fileId}`)).body;
      const trainRecords = (await call('GET', `/v1/datasets/${fileId}`)).body.splits.train.num_records as number;
      expect(train.id).toBe(fileId);
      expect(job).toMatchObject({ kind: 'recipe', name: 'support', submitted_by: 'dev-researcher' });
      expect(job.spec.recipe).toMatchObject({ base_model: 'hanzo-tiny-llama', method: 'lora', dataset: { name: 'ft', version: 1 } });
      expect(job.spec.recipe.hyperparameters).toMatchObject({ batch_size: 4, seed: 7, max_steps: Math.ceil((2 * trainRecords) / 4) });
      expect(job.spec.recipe.hyperparameters.learning_rate).toBeCloseTo(1e-4, 12);
    });

    it('lists newest first with has_more and after, retrieves, lists events ascending, and cancels', async () => {
      const ids: string[] = [];
      for (let i = 0; i < 2; i++) ids.push((await call('POST', '/v1/fine_tuning/jobs', { model: 'hanzo-tiny-llama', training_file: pairsId, method: { type: 'dpo' } })).body.id);
      const page = await call('GET', '/v1/fine_tuning/jobs?limit=1');
      expect(page.body).toMatchObject({ object: 'list', has_more: true });
      expect(page.body.data[0].id).toBe(ids[1]);
      const next = await call('GET', `/v1/fine_tuning/jobs?limit=1&after=${ids[1]}`);
      expect(next.body.data[0].id).toBe(ids[0]);
      const one = await call('GET', `/v1/fine_tuning/jobs/${ids[0]}`);
      expect(one.body).toMatchObject({ id: ids[0], method: { type: 'dpo' }, job: { method: 'dpo' }, estimated_finish: null, usage: { gpu_hours: 0 } });

      const events = await call('GET', `/v1/fine_tuning/jobs/${ids[0]}/events`);
      expect(events.status).toBe(200);
      expect(events.body.data.length).toBeGreaterThan(0);
      expect(events.body.data[0]).toMatchObject({ object: 'fine_tuning.job.event', level: 'info', type: 'message', event_type: 'status' });
      const seqs = events.body.data.map((e: { id: string }) => Number(e.id));
      expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
      const after = await call('GET', `/v1/fine_tuning/jobs/${ids[0]}/events?after=${seqs.at(-1)}`);
      expect(after.body.data).toEqual([]);

      expect((await call('GET', `/v1/fine_tuning/jobs/${ids[0]}/checkpoints`)).body).toMatchObject({ object: 'list', data: [], has_more: false });
      const cancelled = await call('POST', `/v1/fine_tuning/jobs/${ids[0]}/cancel`);
      expect(cancelled.status).toBe(200);
      expect(cancelled.body).toMatchObject({ id: ids[0], object: 'fine_tuning.job' });
      expect((await call('GET', '/v1/fine_tuning/jobs/no-such-job')).status).toBe(404);
      expect((await call('GET', `/v1/fine_tuning/jobs/${ids[1]}/events?after=abc`)).body.message).toMatch(/after/);
    });

    it('answers a command job of /v1/jobs as no fine-tuning job', async () => {
      const job = await call('POST', '/v1/jobs', { type: 'training', image: 'trainer', command: ['true'] });
      expect(job.status).toBe(201);
      expect((await call('GET', `/v1/fine_tuning/jobs/${job.body.id}`)).status).toBe(404);
    });

    it('answers a 409 naming the key when an Idempotency-Key was already used by a /v1/jobs job', async () => {
      const key = { 'idempotency-key': 'ft-key-of-a-command-job' };
      const job = await call('POST', '/v1/jobs', { type: 'training', image: 'trainer', command: ['true'] }, DEV_TOKEN, key);
      expect(job.status).toBe(201);
      const replay = await call('POST', '/v1/fine_tuning/jobs', { model: 'hanzo-tiny-llama', training_file: fileId }, DEV_TOKEN, key);
      expect(replay.status).toBe(409);
      expect(replay.body).toMatchObject({ error_code: 'INVALID_STATE' });
      expect(replay.body.message).toMatch(/ft-key-of-a-command-job/);
      expect(replay.body.message).toContain(job.body.id);
    });
  });

  describe('webhooks', () => {
    it('signs as the Standard Webhooks specification\'s example does', () => {
      const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
      const sig = signWebhook(secret, 'msg_p5jXN8AQM9LWM0D4loKWxJek', 1614265330, '{"test": 2432232314}');
      expect(sig).toBe('v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=');
      expect(verifyWebhook(secret, { id: 'msg_p5jXN8AQM9LWM0D4loKWxJek', timestamp: '1614265330', signature: `v1,bogus ${sig}` }, '{"test": 2432232314}')).toBe(true);
      expect(verifyWebhook(secret, { id: 'msg_p5jXN8AQM9LWM0D4loKWxJek', timestamp: '1614265331', signature: sig }, '{"test": 2432232314}')).toBe(false);
    });

    it('lets only an admin register an endpoint, shows its secret once, and refuses a bad one naming the field', async () => {
      expect((await call('POST', '/v1/webhooks', { url: 'https://example.com/hook' }, developer)).status).toBe(403);
      const bad: [unknown, RegExp][] = [
        [{ url: 'ftp://example.com/x' }, /url/],
        [{ url: 'https://user:pw@example.com/x' }, /url: credentials/],
        [{ url: 'https://example.com/x', events: ['fine_tuning.job.started'] }, /events\.0/],
        [{ url: 'https://example.com/x', events: [] }, /events/],
      ];
      for (const [body, message] of bad) {
        const res = await call('POST', '/v1/webhooks', body);
        expect(res.status).toBe(400);
        expect(res.body.message).toMatch(message);
      }
      const created = await call('POST', '/v1/webhooks', { url: 'https://example.com/hook', events: ['job.failed'] });
      expect(created.status).toBe(201);
      expect(created.body.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
      const list = await call('GET', '/v1/webhooks');
      const listed = list.body.data.find((e: { id: string }) => e.id === created.body.id);
      expect(listed).toMatchObject({ url: 'https://example.com/hook', events: ['job.failed'] });
      expect(JSON.stringify(list.body)).not.toContain(created.body.secret);
      expect((await call('DELETE', `/v1/webhooks/${created.body.id}`)).body).toMatchObject({ deleted: true });
      expect((await call('GET', '/v1/webhooks')).body.data.map((e: { id: string }) => e.id)).not.toContain(created.body.id);
    });

    it('delivers a job\'s end signed, retrying a failed attempt with backoff under the same webhook-id until a 2xx', async () => {
      const hook = await receiver([500, 204]);
      servers.push(hook.server);
      const endpoint = await call('POST', '/v1/webhooks', { url: `${hook.url}/hook`, events: ['job.cancelled'] });
      const job = await call('POST', '/v1/jobs', { type: 'training', image: 'trainer', command: ['true'] });
      await setJobStatus(stack.runtime.catalogue.db, job.body.id, 'cancelled', { message: 'cancelled on request' });
      const deadline = Date.now() + 30_000;
      while (hook.got.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
      expect(hook.got).toHaveLength(2);
      const [first, second] = hook.got as [Received, Received];
      expect(first.headers['webhook-id']).toBe(second.headers['webhook-id']);
      for (const got of hook.got) {
        const headers = { id: String(got.headers['webhook-id']), timestamp: String(got.headers['webhook-timestamp']), signature: String(got.headers['webhook-signature']) };
        expect(verifyWebhook(endpoint.body.secret, headers, got.body)).toBe(true);
        expect(Math.abs(Number(headers.timestamp) - Date.now() / 1000)).toBeLessThan(60);
      }
      expect(Number(second.headers['webhook-timestamp']) - Number(first.headers['webhook-timestamp'])).toBeGreaterThanOrEqual(1);
      expect(JSON.parse(second.body)).toMatchObject({ object: 'event', type: 'job.cancelled', data: { id: job.body.id, status: 'cancelled' } });
      await new Promise((r) => setTimeout(r, 300));
      const deliveries = await call('GET', `/v1/webhooks/${endpoint.body.id}/deliveries`);
      expect(deliveries.body.data[0]).toMatchObject({ id: first.headers['webhook-id'], state: 'delivered', attempts: 2, event_type: 'job.cancelled' });
    });

    it('gives up after webhooks.max_attempts and says why', async () => {
      const hook = await receiver([503]);
      servers.push(hook.server);
      const endpoint = await call('POST', '/v1/webhooks', { url: hook.url, events: ['job.failed'] });
      const job = await call('POST', '/v1/jobs', { type: 'training', image: 'trainer', command: ['true'] });
      await setJobStatus(stack.runtime.catalogue.db, job.body.id, 'failed', { message: 'exit 1' });
      const deadline = Date.now() + 30_000;
      let last: Answer | null = null;
      while (Date.now() < deadline) {
        last = await call('GET', `/v1/webhooks/${endpoint.body.id}/deliveries`);
        if (last.body.data[0]?.state === 'failed') break;
        await new Promise((r) => setTimeout(r, 300));
      }
      expect(last!.body.data[0]).toMatchObject({ state: 'failed', attempts: 3, last_error: 'answered HTTP 503' });
      expect(hook.got).toHaveLength(3);
    });

    it('sends a delivery whose sender died mid-attempt again, with the same id, once its claim lapses', async () => {
      const db = stack.runtime.catalogue.db;
      const hook = await receiver([200]);
      servers.push(hook.server);
      const secret = 'whsec_' + Buffer.alloc(32, 7).toString('base64');
      await insertWebhookEndpoint(db, { id: 'we_restart', organizationId: 'dev', url: hook.url, events: ['fine_tuning.job.succeeded'], secret, createdBy: 'test' });
      // A relay claims the row, then its process dies before sending: the row stays pending, claimed for 1 s.
      // Queued and claimed in one transaction, so the stack's own relay never sees it unclaimed.
      const claimed = (
        await db.transaction(async (tx) => {
          await enqueueWebhookDeliveries(tx, 'dev', 'fine_tuning.job.succeeded', { id: 'job-x' });
          return claimDueDeliveries(tx as unknown as typeof db, 100, 1000);
        })
      ).find((d) => d.endpoint.id === 'we_restart')!;
      expect(claimed).toBeDefined();
      const deadline = Date.now() + 20_000;
      while (hook.got.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
      expect(hook.got).toHaveLength(1);
      expect(hook.got[0]!.headers['webhook-id']).toBe(claimed.delivery.id);
    });

    it('never sends to a private, loopback or link-local address unless allowed, and follows no redirect', async () => {
      for (const a of ['127.0.0.1', '10.1.2.3', '172.16.0.1', '192.168.1.1', '169.254.169.254', '100.64.0.1', '0.0.0.0', '::1', 'fe80::1', 'fd00::1', '::ffff:127.0.0.1', '::ffff:7f00:1'])
        expect(isPrivateAddress(a), a).toBe(true);
      // IPv6 forms that embed an IPv4 address (NAT64, 6to4, IPv4-compatible), and site-local.
      for (const a of ['64:ff9b::a9fe:a9fe', '64:ff9b::127.0.0.1', '64:ff9b:1::a00:1', '2002:7f00:1::1', '2002:a9fe:a9fe::', '::127.0.0.1', '::a9fe:a9fe', 'fec0::1', 'feff::1'])
        expect(isPrivateAddress(a), a).toBe(true);
      for (const a of ['93.184.216.34', '8.8.8.8', '2606:4700::1111', '::ffff:8.8.8.8', '2001:db9::1', '64:ff9c::1']) expect(isPrivateAddress(a), a).toBe(false);

      const hook = await receiver([200]);
      servers.push(hook.server);
      const port = new URL(hook.url).port;
      const refuse = { allowPrivate: false, timeoutMs: 5000 };
      const literal = await postWebhook(`http://127.0.0.1:${port}/x`, {}, '{}', refuse);
      expect(literal).toMatchObject({ ok: false, status: null });
      expect(literal.error).toMatch(/127\.0\.0\.1 is a private address/);
      // A name is checked on the addresses the connection resolves it to.
      const named = await postWebhook(`http://localhost:${port}/x`, {}, '{}', refuse);
      expect(named.ok).toBe(false);
      expect(named.error).toMatch(/localhost resolves to .* a private address/);
      expect(hook.got).toHaveLength(0);
      // Allowed, the same name resolves and connects through the same lookup.
      expect(await postWebhook(`http://localhost:${port}/allowed`, {}, '{}', { allowPrivate: true, timeoutMs: 5000 })).toMatchObject({ ok: true, status: 200 });
      expect(hook.got.map((g) => g.path)).toEqual(['/allowed']);
      hook.got.length = 0;

      // The same refusal through the relay: the delivery fails for good, nothing reaches the receiver.
      const db = stack.runtime.catalogue.db;
      const strict = { ...stack.loaded.config, webhooks: { ...stack.loaded.config.webhooks, allow_private_targets: false, max_attempts: 1 } };
      await insertWebhookEndpoint(db, { id: 'we_private', organizationId: 'dev', url: `http://localhost:${port}/p`, events: ['job.succeeded'], secret: 'whsec_' + Buffer.alloc(32, 1).toString('base64'), createdBy: 'test' });
      const mine = (
        await db.transaction(async (tx) => {
          await enqueueWebhookDeliveries(tx, 'dev', 'job.succeeded', { id: 'job-y' });
          return claimDueDeliveries(tx as unknown as typeof db, 100, 60_000);
        })
      ).filter((d) => d.endpoint.id === 'we_private');
      expect(mine).toHaveLength(1);
      expect((await deliverOne(db, strict, mine[0]!)).ok).toBe(false);
      expect(hook.got).toHaveLength(0);

      const redirect = await receiver([302], { location: `${hook.url}/followed` });
      servers.push(redirect.server);
      const answered = await postWebhook(`${redirect.url}/hook`, {}, '{}', { allowPrivate: true, timeoutMs: 5000 });
      expect(answered).toMatchObject({ ok: false, status: 302, error: 'answered HTTP 302' });
      expect(hook.got.filter((g) => g.path === '/followed')).toHaveLength(0);
    });

    it('cuts an attempt off at webhooks.timeout even while the receiver keeps trickling bytes', async () => {
      const trickle = createServer((req, res) => {
        req.resume();
        res.writeHead(200, { 'content-type': 'text/plain' });
        const drip = setInterval(() => res.write('.'), 50);
        res.on('close', () => clearInterval(drip));
      });
      await new Promise<void>((r) => trickle.listen(0, '127.0.0.1', r));
      servers.push(trickle);
      const started = Date.now();
      const result = await postWebhook(`http://127.0.0.1:${(trickle.address() as AddressInfo).port}/slow`, {}, '{}', { allowPrivate: true, timeoutMs: 400 });
      expect(result).toMatchObject({ ok: false, status: null, error: 'no complete answer within 400 ms' });
      expect(Date.now() - started).toBeLessThan(2000);
    });

    it('records an attempt only under the claim it was made on, and never claims a deleted endpoint\'s deliveries', async () => {
      const db = stack.runtime.catalogue.db;
      const secret = 'whsec_' + Buffer.alloc(32, 9).toString('base64');
      const endpoint = (id: string) => ({ id, organizationId: 'dev', url: 'http://127.0.0.1:9/never', events: [`test.${id}`], secret, createdBy: 'test' });
      // Queued and claimed in one transaction, so the stack's own relay never sees the rows unclaimed.
      const claimOne = (id: string) =>
        db.transaction(async (tx) => {
          await insertWebhookEndpoint(tx, endpoint(id));
          await enqueueWebhookDeliveries(tx, 'dev', `test.${id}`, { id: 'job-z' });
          return (await claimDueDeliveries(tx as unknown as typeof db, 100, 60_000)).find((d) => d.endpoint.id === id)!;
        });
      const row = async (id: string) => (await db.select().from(webhookDeliveries).where(eq(webhookDeliveries.id, id)))[0]!;

      // Another relay's claim (the row was reclaimed after this one's lapsed): the late result is dropped.
      const reclaimed = await claimOne('we_reclaimed');
      const stale = new Date(reclaimed.delivery.claimedUntil!.getTime() - 60_000);
      expect(await recordDeliveryAttempt(db, reclaimed.delivery.id, stale, { ok: true })).toBe(false);
      expect(await row(reclaimed.delivery.id)).toMatchObject({ state: 'pending', attempts: 0 });
      expect(await recordDeliveryAttempt(db, reclaimed.delivery.id, reclaimed.delivery.claimedUntil!, { ok: false, error: 'answered HTTP 503', retryAt: null })).toBe(true);
      expect(await row(reclaimed.delivery.id)).toMatchObject({ state: 'failed', attempts: 1, lastError: 'answered HTTP 503', claimedUntil: null });

      // The endpoint was deleted while the attempt was in flight: its failed row stays failed.
      const deleted = await claimOne('we_deleted_mid_attempt');
      expect(await deleteWebhookEndpoint(db, 'dev', 'we_deleted_mid_attempt')).toBe(true);
      expect(await recordDeliveryAttempt(db, deleted.delivery.id, deleted.delivery.claimedUntil!, { ok: true })).toBe(false);
      expect(await row(deleted.delivery.id)).toMatchObject({ state: 'failed', attempts: 0, lastError: 'endpoint deleted', deliveredAt: null });

      // A pending row of an endpoint deleted concurrently with its queueing is never claimed.
      const skipped = await db.transaction(async (tx) => {
        await insertWebhookEndpoint(tx, endpoint('we_deleted'));
        await enqueueWebhookDeliveries(tx, 'dev', 'test.we_deleted', { id: 'job-z' });
        await tx.update(webhookEndpoints).set({ deletedAt: new Date() }).where(eq(webhookEndpoints.id, 'we_deleted'));
        return (await claimDueDeliveries(tx as unknown as typeof db, 100, 1000)).filter((d) => d.endpoint.id === 'we_deleted');
      });
      expect(skipped).toEqual([]);
    });

    it('refuses webhooks.allow_private_targets on a server reachable from other machines', () => {
      expect(() => testConfig({ HANZO_ML_WEBHOOKS_ALLOW_PRIVATE_TARGETS: 'true', HANZO_ML_SERVER_HOST: '0.0.0.0' })).toThrow(ConfigError);
      expect(() => testConfig({ HANZO_ML_WEBHOOKS_ALLOW_PRIVATE_TARGETS: 'true', HANZO_ML_SERVER_HOST: '0.0.0.0' })).toThrow(/webhooks\.allow_private_targets/);
      expect(testConfig({ HANZO_ML_WEBHOOKS_ALLOW_PRIVATE_TARGETS: 'true' }).config.webhooks.allow_private_targets).toBe(true);
    });
  });
});

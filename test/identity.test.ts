// Identity and the holes it closes, against a real embedded stack (Temporal dev server, PGlite, the listening
// API): tokens made through the API (shown once, stored hashed, expiring, revocable), IAM JWTs verified against a
// JWKS this test serves on loopback with keys it makes, the spec's roles against every route family with 404s
// across organizations, the audit trail, and each hole a user could have been hurt by.
import { createServer, request as httpRequest, type Server } from 'node:http';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { eq } from 'drizzle-orm';
import { exportJWK, generateKeyPair, SignJWT, type JWK } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, withWorker, type TestStack } from './support/stack.js';
import { freePort } from './support/ports.js';
import { DEV_TOKEN } from './support/config.js';
import { apiTokens, organizations } from '../db/schema/index.js';
import { sha256Text } from '../lib/hash.js';
import { shortestCronGapMinutes } from '../lib/cron-gap.js';

let stack: TestStack;
let jwks: Server;
let issuer: string;
const keys: { kid: string; privateKey: CryptoKey; jwk: JWK }[] = [];
let stranger: { privateKey: CryptoKey };

async function call(method: string, path: string, token: string | null, body?: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(stack.runtime.apiUrl + path, {
    method,
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  const json = res.headers.get('content-type')?.includes('json') ?? false;
  return { status: res.status, body: (json && text ? JSON.parse(text) : { text }) as Record<string, unknown> };
}

async function jwt(claims: Record<string, unknown>, o: { key?: CryptoKey; kid?: string; exp?: string | number; iss?: string } = {}): Promise<string> {
  return new SignJWT(claims)
    .setProtectedHeader({ alg: 'ES256', kid: o.kid ?? keys[0]!.kid })
    .setIssuer(o.iss ?? issuer)
    .setIssuedAt()
    .setExpirationTime(o.exp ?? '10m')
    .sign(o.key ?? keys[0]!.privateKey);
}

const tokens: Record<string, string> = {};

beforeAll(async () => {
  for (const kid of ['k1']) {
    const { privateKey, publicKey } = await generateKeyPair('ES256');
    keys.push({ kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg: 'ES256', use: 'sig' } });
  }
  stranger = await generateKeyPair('ES256');
  const port = await freePort();
  issuer = `http://127.0.0.1:${port}/iam`;
  jwks = createServer((req, res) => {
    if (req.url !== '/iam/.well-known/jwks') return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: keys.map((k) => k.jwk) }));
  });
  await new Promise<void>((r) => jwks.listen(port, '127.0.0.1', () => r()));
  stack = await startTestStack({ HANZO_ML_AUTH_IAM_URL: issuer, HANZO_ML_AUTH_ORGANIZATIONS: 'iam-org=iam-tenant', HANZO_ML_LIMITS_MAX_BODY_BYTES: String(64 * 1024), HANZO_ML_LIMITS_MIN_SCHEDULE_INTERVAL: '1h' }, { worker: false });
  // Organization B and the principals of organization A, all through the API.
  const orgB = await call('POST', '/v1/organizations', DEV_TOKEN, { name: 'org-b' });
  expect(orgB.status).toBe(201);
  tokens.adminB = (orgB.body.admin_token as { token: string }).token;
  tokens.adminA = DEV_TOKEN;
  for (const [who, role, approver] of [
    ['viewerA', 'ml-viewer', false],
    ['researcherA', 'ml-researcher', false],
    ['approverA', 'ml-researcher', true],
  ] as const) {
    const made = await call('POST', '/v1/tokens', DEV_TOKEN, { subject: who, role, approver });
    expect(made.status).toBe(201);
    tokens[who] = made.body.token as string;
  }
}, 180_000);

afterAll(async () => {
  await stack?.stop();
  await new Promise((r) => jwks?.close(r));
});

describe('API tokens', () => {
  it('are random, shown once, stored only as a hash, listed without their value', async () => {
    const made = await call('POST', '/v1/tokens', DEV_TOKEN, { subject: 'ci', role: 'ml-researcher', expires: '30d' });
    expect(made.body).toMatchObject({ subject: 'ci', role: 'ml-researcher', approver: false });
    const token = made.body.token as string;
    expect(token).toMatch(/^hml_[\w-]{40,}$/);
    const [row] = await stack.runtime.catalogue.db.select().from(apiTokens).where(eq(apiTokens.id, made.body.id as string));
    expect(row!.tokenSha256).toBe(sha256Text(token));
    expect(JSON.stringify(row)).not.toContain(token);
    const list = await call('GET', '/v1/tokens', DEV_TOKEN);
    expect(JSON.stringify(list.body)).not.toContain(token);
    expect((list.body.tokens as { id: string; expires_at: string | null }[]).find((t) => t.id === made.body.id)?.expires_at).toEqual(expect.any(String));
  });

  it('stop working on the next request once revoked, and once expired', async () => {
    const made = await call('POST', '/v1/tokens', DEV_TOKEN, { subject: 'temp', role: 'ml-viewer' });
    const token = made.body.token as string;
    expect((await call('GET', '/v1/models', token)).status).toBe(200);
    expect((await call('DELETE', `/v1/tokens/${made.body.id as string}`, DEV_TOKEN)).status).toBe(200);
    expect((await call('GET', '/v1/models', token)).status).toBe(401);
    // Another organization's admin cannot revoke (or see) organization A's tokens.
    expect((await call('DELETE', `/v1/tokens/${made.body.id as string}`, tokens.adminB!)).status).toBe(404);
    const soon = await call('POST', '/v1/tokens', DEV_TOKEN, { subject: 'short', role: 'ml-viewer', expires: '1m' });
    expect((await call('GET', '/v1/models', soon.body.token as string)).status).toBe(200);
    await stack.runtime.catalogue.db.update(apiTokens).set({ expiresAt: new Date(Date.now() - 1000) }).where(eq(apiTokens.id, soon.body.id as string));
    expect((await call('GET', '/v1/models', soon.body.token as string)).status).toBe(401);
  });

  it('cannot be made by a non-admin, and organizations only by the operator organization', async () => {
    expect((await call('POST', '/v1/tokens', tokens.researcherA!, { subject: 'x', role: 'ml-admin' })).status).toBe(403);
    expect((await call('POST', '/v1/organizations', tokens.adminB!, { name: 'org-c' })).status).toBe(403);
    expect((await call('POST', '/v1/tokens', DEV_TOKEN, { subject: 'x', role: 'ml-viewer', approver: true })).status).toBe(400);
  });
});

describe('IAM bearer tokens (JWT against the issuer JWKS)', () => {
  it('map org and roles claims to a principal', async () => {
    const t = await jwt({ sub: 'alice', org: 'iam-org', roles: ['ml-researcher'] });
    const made = await call('POST', '/v1/models', t, { name: 'from-iam' });
    expect(made.status).toBe(201);
    expect((await call('GET', '/v1/models', tokens.adminA!)).body.models).not.toEqual(expect.arrayContaining([expect.objectContaining({ name: 'from-iam' })]));
    const viewer = await jwt({ sub: 'bob', owner: 'iam-org', roles: [{ name: 'ml-viewer' }] });
    expect((await call('GET', '/v1/models', viewer)).body.models).toEqual([expect.objectContaining({ name: 'from-iam' })]);
    expect((await call('POST', '/v1/models', viewer, { name: 'nope' })).status).toBe(403);
  });

  it('refuses a token whose organization claim names the operator organization, or any organization not mapped', async () => {
    for (const claims of [{ org: 'dev' }, { owner: 'dev' }, { org: 'iam-tenant' }, { org: 'org-b' }]) {
      const t = await jwt({ sub: 'mallory', roles: ['ml-admin'], ...claims });
      const r = await call('POST', '/v1/organizations', t, { name: 'org-evil' });
      expect([claims, r.status, r.body.message]).toEqual([claims, 403, expect.stringMatching(/is not mapped to a tenant .*auth\.organizations/)]);
    }
    expect(await stack.runtime.catalogue.db.select().from(organizations).where(eq(organizations.id, 'org-evil'))).toEqual([]);
  });

  it('refuses an expired token, one signed by an unknown key, and one of another issuer with 401', async () => {
    const expired = await jwt({ sub: 'alice', org: 'iam-org', roles: ['ml-admin'] }, { exp: Math.floor(Date.now() / 1000) - 120 });
    const r1 = await call('GET', '/v1/models', expired);
    expect(r1.status).toBe(401);
    expect(r1.body.message).toMatch(/expired/);
    const forged = await jwt({ sub: 'mallory', org: 'iam-org', roles: ['ml-admin'] }, { key: stranger.privateKey });
    expect((await call('GET', '/v1/models', forged)).status).toBe(401);
    const unknownKid = await jwt({ sub: 'mallory', org: 'iam-org', roles: ['ml-admin'] }, { key: stranger.privateKey, kid: 'k-unknown' });
    expect((await call('GET', '/v1/models', unknownKid)).status).toBe(401);
    const otherIssuer = await jwt({ sub: 'mallory', org: 'iam-org', roles: ['ml-admin'] }, { iss: 'http://127.0.0.1:1/other' });
    expect((await call('GET', '/v1/models', otherIssuer)).status).toBe(401);
  });
});

describe('roles of spec 000 against every route family', () => {
  const chat = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }] });
  const sweep = (n: string) => ({
    experiment: `hpo-${n}`,
    base_config: { method: 'synthetic', function: 'branin', max_steps: 20, eval_steps: 5 },
    search_space: { x1: { type: 'uniform', min: -5, max: 10 }, x2: { type: 'uniform', min: 0, max: 15 } },
    objective: { metric: 'eval/loss', direction: 'minimize' },
    max_trials: 2,
    max_concurrent_trials: 1,
  });
  const pipelineOf = (n: string) => ({ model_name: `pipe-${n}`, base_model: 'hanzo-tiny-llama', dataset: { name: `ds-${n}`, version: 'latest' } });
  let runA = '';
  beforeAll(async () => {
    const run = await call('POST', '/v1/runs', DEV_TOKEN, { experiment_name: 'matrix-artifacts' });
    expect(run.status).toBe(201);
    runA = run.body.id as string;
  });
  const reads = ['/v1/datasets', '/v1/pipelines', '/v1/experiments', '/v1/models', '/v1/schedules', '/v1/hpo', '/api/2.0/mlflow/experiments/search?max_results=10', '/api/2.0/mlflow/registered-models/search'];

  it('viewer reads only; researcher reads and writes; only admin manages tokens and reads the audit trail', async () => {
    const writes = (n: string) => [
      ['POST', `/v1/datasets?name=ds-${n}&format=jsonl&wait=true`, chat + '\n' + chat + '\n', { 'content-type': 'application/x-ndjson' }],
      ['POST', '/v1/models', { name: `model-${n}` }],
      ['POST', '/v1/experiments', { name: `exp-${n}` }],
      ['POST', '/api/2.0/mlflow/experiments/create', { name: `mlflow-exp-${n}` }],
      ['POST', '/api/2.0/mlflow/registered-models/create', { name: `mlflow-model-${n}` }],
      ['POST', '/v1/schedules', { name: `sched-${n}`, every: '24h', paused: true, pipeline: pipelineOf(n) }],
      ['POST', '/v1/hpo', sweep(n)],
      ['POST', `/v1/runs/${runA}/artifacts?path=${n}.txt`, `artifact of ${n}`, { 'content-type': 'application/octet-stream' }],
    ] as const;
    // An upload waits for its preparation job (the sweep below needs its version ready): a worker runs it meanwhile.
    const status = async (who: string, [m, p, b, h]: readonly [string, string, unknown, Record<string, string>?]) => {
      const send = () => call(m, p, tokens[who]!, b, h ?? {});
      return (await (p.startsWith('/v1/datasets?') ? withWorker(stack, send) : send())).status;
    };
    for (const who of ['viewerA', 'researcherA', 'adminA', 'adminB']) for (const p of reads) expect([who, p, (await call('GET', p, tokens[who]!)).status]).toEqual([who, p, 200]);
    for (const w of writes('v')) expect(['viewerA', w[1], await status('viewerA', w)]).toEqual(['viewerA', w[1], 403]);
    // The uploads first: the worker that prepares them must not find a sweep or pipeline to run (they stay queued).
    const writers = [['researcherA', writes('r')], ['adminA', writes('a')]] as const;
    for (const first of [true, false])
      for (const [who, ws] of writers)
        for (const w of ws.filter((x) => x[1].startsWith('/v1/datasets?') === first)) expect([who, w[1], await status(who, w)]).toEqual([who, w[1], expect.toSatisfy((s: number) => s === 200 || s === 201)]);
    for (const who of ['viewerA', 'researcherA', 'adminA']) for (const p of [`/v1/runs/${runA}/artifacts`, `/v1/runs/${runA}/artifacts/a.txt`, '/v1/schedules/sched-a']) expect([who, p, (await call('GET', p, tokens[who]!)).status]).toEqual([who, p, 200]);
    for (const p of ['/v1/tokens', '/v1/audit'])
      for (const [who, want] of [['viewerA', 403], ['researcherA', 403], ['approverA', 403], ['adminA', 200], ['adminB', 200]] as const) expect([who, p, (await call('GET', p, tokens[who]!)).status]).toEqual([who, p, want]);
  });

  it("answers 404 for every read of organization A's objects by organization B's admin", async () => {
    const ds = await call('GET', '/v1/datasets', tokens.adminA!);
    const dsId = (ds.body.datasets as { id: string }[])[0]!.id;
    const exp = await call('GET', '/api/2.0/mlflow/experiments/get-by-name?experiment_name=mlflow-exp-a', tokens.adminA!);
    const expId = (exp.body.experiment as { experiment_id: string }).experiment_id;
    const sweepA = ((await call('GET', '/v1/hpo', tokens.adminA!)).body.sweeps as { id: string; experiment: string }[]).find((s) => s.experiment === 'hpo-a')!.id;
    const probes = [
      `/v1/datasets/${dsId}`,
      '/v1/models/model-a/versions',
      `/api/2.0/mlflow/experiments/get?experiment_id=${expId}`,
      '/api/2.0/mlflow/registered-models/get?name=mlflow-model-a',
      '/v1/pipelines/00000000-0000-0000-0000-000000000000',
      '/v1/schedules/sched-a',
      `/v1/hpo/${sweepA}/trials`,
      `/v1/runs/${runA}/artifacts`,
      `/v1/runs/${runA}/artifacts/a.txt`,
    ];
    for (const p of probes) expect([p, (await call('GET', p, tokens.adminA!)).status]).toEqual([p, p.includes('0000-0000') ? 404 : 200]);
    // (GET /v1/hpo/:id queries the workflow, which no worker runs here: only the other organization's read.)
    for (const p of [...probes, `/v1/hpo/${sweepA}`]) expect([p, (await call('GET', p, tokens.adminB!)).status]).toEqual([p, 404]);
    expect((await call('GET', '/v1/datasets', tokens.adminB!)).body.datasets).toEqual([]);
    // Changes to organization A's objects by organization B's admin find nothing either.
    for (const [m, p, b] of [
      ['POST', `/v1/hpo/${sweepA}/cancel`, {}],
      ['POST', '/v1/schedules/sched-a/pause', {}],
      ['DELETE', '/v1/schedules/sched-a', undefined],
      ['POST', `/v1/runs/${runA}/artifacts?path=b.txt`, 'x'],
      // metrics alone are one statement that checks the run's organization itself (db/repo/metrics.ts)
      ['POST', '/api/2.0/mlflow/runs/log-batch', { run_id: runA, metrics: [{ key: 'from-b', value: 1, timestamp: 1, step: 0 }] }],
    ] as const)
      expect([m, p, (await call(m, p, tokens.adminB!, b, typeof b === 'string' ? { 'content-type': 'application/octet-stream' } : {})).status]).toEqual([m, p, 404]);
    const history = await call('GET', `/api/2.0/mlflow/metrics/get-history?run_id=${runA}&metric_key=from-b`, tokens.adminA!);
    expect([history.status, history.body.metrics]).toEqual([200, []]);
  });

  it('a researcher cancels only the jobs they submitted (pipelines and sweeps); an admin cancels any', async () => {
    const sweeps = (await call('GET', '/v1/hpo', tokens.adminA!)).body.sweeps as { id: string; experiment: string }[];
    const [ofAdmin, ofResearcher] = ['hpo-a', 'hpo-r'].map((e) => sweeps.find((s) => s.experiment === e)!.id);
    const refused = await call('POST', `/v1/hpo/${ofAdmin}/cancel`, tokens.researcherA!, {});
    expect([refused.status, refused.body.message]).toEqual([403, expect.stringMatching(/only jobs they submitted/)]);
    expect((await call('POST', `/v1/hpo/${ofResearcher}/cancel`, tokens.researcherA!, {})).status).toBe(200);
    expect((await call('POST', `/v1/hpo/${ofAdmin}/cancel`, tokens.adminA!, {})).status).toBe(200);
    const mine = await call('POST', '/v1/pipelines', tokens.researcherA!, pipelineOf('r'));
    expect(mine.status).toBe(201);
    expect((await call('POST', `/v1/pipelines/${mine.body.id as string}/cancel`, tokens.approverA!, {})).status).toBe(403);
    expect((await call('POST', `/v1/pipelines/${mine.body.id as string}/cancel`, tokens.viewerA!, {})).status).toBe(403);
    expect((await call('POST', `/v1/pipelines/${mine.body.id as string}/cancel`, tokens.researcherA!, {})).status).toBe(202);
    const theirs = await call('POST', '/v1/pipelines', tokens.approverA!, pipelineOf('r'));
    expect((await call('POST', `/v1/pipelines/${theirs.body.id as string}/cancel`, tokens.adminA!, {})).status).toBe(202);
  });
});

describe('audit trail', () => {
  it('records changes with actor, request id and source, and denials, readable by the admin only for their organization', async () => {
    const rid = `audit-probe-${Date.now()}`;
    expect((await call('POST', '/v1/models', tokens.researcherA!, { name: 'audited-model' }, { 'x-request-id': rid })).status).toBe(201);
    const denied = `audit-denied-${Date.now()}`;
    expect((await call('POST', '/v1/models', tokens.viewerA!, { name: 'never' }, { 'x-request-id': denied })).status).toBe(403);
    const entries = (await call('GET', '/v1/audit?limit=500', DEV_TOKEN)).body.entries as Record<string, unknown>[];
    expect(entries.find((e) => e.request_id === rid)).toMatchObject({ actor: 'researcherA', organization: 'dev', action: 'POST /v1/models', outcome: 'ok', source_address: expect.stringMatching(/127\.0\.0\.1/) });
    expect(entries.find((e) => e.request_id === denied)).toMatchObject({ actor: 'viewerA', outcome: 'denied' });
    expect(entries.find((e) => e.action === 'token.create')).toMatchObject({ actor: 'dev', outcome: 'ok' });
    const b = (await call('GET', '/v1/audit?limit=500', tokens.adminB!)).body.entries as Record<string, unknown>[];
    expect(b.every((e) => e.organization === 'org-b')).toBe(true);
  });
});

describe('GET /v1/events (server-sent events without brokers)', () => {
  async function readEvents(token: string, query: string): Promise<{ status: number; events: { id: string; event: string; data: Record<string, unknown> }[] }> {
    const res = await fetch(`${stack.runtime.apiUrl}/v1/events?${query}`, { headers: { authorization: `Bearer ${token}` } });
    if (res.status !== 200) return { status: res.status, events: [] };
    const text = await res.text();
    const events = text
      .split('\n\n')
      .filter((b) => b.trim())
      .map((block) => {
        const field = (name: string) => block.split('\n').find((l) => l.startsWith(`${name}:`))?.slice(name.length + 1).trim() ?? '';
        return { id: field('id'), event: field('event'), data: JSON.parse(field('data')) as Record<string, unknown> };
      });
    return { status: 200, events };
  }

  it("streams the organization's committed events as the contract's envelopes, resumable by id", async () => {
    const { EventEnvelopeSchema, PAYLOAD_SCHEMAS } = await import('../contracts/events.js');
    const all = await readEvents(DEV_TOKEN, 'topics=audit&limit=5');
    expect(all.events).toHaveLength(5);
    for (const e of all.events) {
      const env = EventEnvelopeSchema.parse(e.data);
      PAYLOAD_SCHEMAS[env.topic].parse(env.data);
      expect([env.organization_id, env.topic, env.event_id]).toEqual(['dev', 'audit', e.id]);
    }
    const ids = all.events.map((e) => Number(e.id));
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    const next = await readEvents(DEV_TOKEN, `topics=audit&limit=2&after=${ids[2]}`);
    expect(next.events.map((e) => Number(e.id))).toEqual(ids.slice(3, 5));
    // Organization B sees only its own; a viewer may not read the audit topic.
    const b = await readEvents(tokens.adminB!, 'topics=audit&limit=1');
    expect((b.events[0]!.data as { organization_id: string }).organization_id).toBe('org-b');
    expect((await readEvents(tokens.viewerA!, 'topics=audit&limit=1')).status).toBe(403);
  });
});

describe('metric events', () => {
  it('are committed with the metrics they describe, one per step', async () => {
    const run = await call('POST', '/v1/runs', DEV_TOKEN, { experiment_name: 'events-exp' });
    expect(run.status).toBe(201);
    const runId = (run.body.id ?? (run.body.run as { id: string } | undefined)?.id) as string;
    const logged = await call('POST', `/v1/runs/${runId}/metrics`, DEV_TOKEN, { metrics: [{ key: 'train/loss', value: 0.5, step: 1 }, { key: 'lr', value: 0.1, step: 1 }, { key: 'train/loss', value: 0.25, step: 2 }] });
    expect(logged.status).toBeLessThan(300);
    const { eventsAfter } = await import('../db/repo/outbox.js');
    const rows = (await eventsAfter(stack.runtime.catalogue.db, 'dev', 0, 10_000, ['metrics'])).filter((r) => r.key === runId);
    expect(rows.map((r) => r.payload)).toEqual([
      { run_id: runId, step: 1, metrics: { 'train/loss': 0.5, lr: 0.1 }, timestamp: expect.any(String) },
      { run_id: runId, step: 2, metrics: { 'train/loss': 0.25 }, timestamp: expect.any(String) },
    ]);
  });
});

describe('the holes', () => {
  const base = (extra: Record<string, unknown>) => ({ model_name: 'hole', base_model: 'hanzo-tiny-llama', dataset: { name: 'ds-a', version: 'latest' }, ...extra });

  it('auto-approval needs the approver permission', async () => {
    const r = await call('POST', '/v1/pipelines', tokens.researcherA!, base({ promotion: { auto_approve: true } }));
    expect(r.status).toBe(403);
    expect(r.body.message).toMatch(/promotion\.auto_approve/);
    expect((await call('POST', '/v1/pipelines', tokens.approverA!, base({ promotion: { auto_approve: true } }))).status).toBe(201);
  });

  it('the approver is the authenticated principal, never a name in the body', async () => {
    const r = await call('POST', '/v1/pipelines/x/approve', tokens.approverA!, { reason: 'ok', approver: 'someone-else' });
    expect(r.status).toBe(400);
    expect(r.body.message).toMatch(/approver/);
  });

  it("source_uri and base_model are limited to the organization's prefix or the allow-list", async () => {
    const file = join(stack.home, 'secret.jsonl');
    writeFileSync(file, '{"text":"secret"}\n');
    const asB = (ds: Record<string, unknown>, extra: Record<string, unknown> = {}) => call('POST', '/v1/pipelines', tokens.adminB!, base({ dataset: ds, ...extra }));
    for (const uri of [pathToFileURL(file).href, 'file:///etc/passwd', 's3://hanzo-ml-datasets/dev/data.jsonl', 's3://another-bucket/x.jsonl']) {
      const r = await asB({ name: 'x', source_uri: uri });
      expect([uri, r.status, r.body.message]).toEqual([uri, 403, expect.stringMatching(/dataset\.source_uri/)]);
    }
    // A climb out of the organization's own prefix is refused as a location before any policy applies.
    const climb = await asB({ name: 'x', source_uri: 's3://hanzo-ml-datasets/org-b/../dev/x.jsonl' });
    expect([climb.status, climb.body.message]).toEqual([400, expect.stringMatching(/dataset\.source_uri: .* escapes/)]);
    const own = await asB({ name: 'x', source_uri: 's3://hanzo-ml-datasets/org-b/data.jsonl' });
    expect(own.status).not.toBe(403);
    const bm = await asB({ name: 'ds', version: 'latest' }, { base_model: '/etc' });
    expect([bm.status, bm.body.message]).toEqual([403, expect.stringMatching(/base_model/)]);
  });

  it('resource fields are bounded by the configuration', async () => {
    const r = await call('POST', '/v1/pipelines', tokens.researcherA!, base({ hardware: { processes: 4096 } }));
    expect([r.status, r.body.message]).toEqual([400, expect.stringMatching(/hardware\.processes: 4096 exceeds limits\.max_processes/)]);
  });

  it('schedules have a minimum interval, for "every" and for cron', async () => {
    const pipe = base({});
    const every = await call('POST', '/v1/schedules', tokens.researcherA!, { name: 'fast', every: '1s', pipeline: pipe });
    expect([every.status, every.body.message]).toEqual([400, expect.stringMatching(/every: 1s is shorter than limits\.min_schedule_interval/)]);
    const cron = await call('POST', '/v1/schedules', tokens.researcherA!, { name: 'fast', cron: '*/5 * * * *', pipeline: pipe });
    expect([cron.status, cron.body.message]).toEqual([400, expect.stringMatching(/fires 5 minute/)]);
    expect(shortestCronGapMinutes('0 3 * * 1')).toBe(7 * 24 * 60);
    expect(shortestCronGapMinutes('0,59 * * * *')).toBe(1);
  });

  it('request bodies are limited while they stream, chunked or not', async () => {
    const big = JSON.stringify({ name: 'x', description: 'a'.repeat(100 * 1024) });
    expect((await call('POST', '/v1/models', DEV_TOKEN, big)).status).toBe(413);
    // A chunked body has no Content-Length to trust: it is counted as it arrives.
    const status = await new Promise<number>((resolve, reject) => {
      const url = new URL(stack.runtime.apiUrl + '/v1/models');
      const req = httpRequest({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { authorization: `Bearer ${DEV_TOKEN}`, 'content-type': 'application/json', 'transfer-encoding': 'chunked' } }, (res) => {
        res.resume();
        resolve(res.statusCode!);
      });
      req.on('error', reject);
      req.write('{"name":"x","description":"');
      for (let i = 0; i < 20; i++) req.write('b'.repeat(8192));
      req.end('"}');
    });
    expect(status).toBe(413);
  });
});

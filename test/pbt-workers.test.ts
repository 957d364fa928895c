// Population-based training across two worker processes: two `hanzo-ml worker` processes, each with its own
// HANZO_ML_HOME (no disk shared between them), one catalogue (PostgreSQL), one object store (moto_server) and one
// Temporal server. The first worker trains round 0 of every member and is killed; the second trains the rounds
// after it, in which the bottom member exploits a checkpoint the first worker wrote: member checkpoints live in
// the object store (checkpoints/{org}/{member run}/{step}/, manifest last), not on a worker's disk.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTemporalDevServer, type DevServer } from '../lib/temporal-dev-server.js';
import { startRuntime, type Runtime } from '../runtime/embedded.js';
import { repoRoot } from '../lib/config.js';
import { sha256Text } from '../lib/hash.js';
import { apiTokens } from '../db/schema/index.js';
import type { SweepRequest } from '../contracts/hpo.js';
import { testConfig } from './support/config.js';
import { startMoto, type Moto } from './support/moto.js';
import { startPostgres, type TestPostgres } from './support/postgres.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
interface Lineage {
  member: number;
  round: number;
  action: string;
  parent_member: number | null;
  step: number;
  value: number;
  checkpoint: string;
}
interface PbtManifest {
  step: number;
  files: { path: string; sha256: string }[];
  pbt: { member: number; round: number; started_from: string | null; start: { step: number; loss: number }; writer: string };
}

const TOKEN = 'pbt-workers-token';
let pg: TestPostgres;
let temporal: DevServer;
let moto: Moto;
let api: Runtime;
let shared: Record<string, string>;
const workers: ChildProcess[] = [];

/** `hanzo-ml worker` on a home of its own; resolves once it polls. */
async function startWorker(): Promise<ChildProcess> {
  const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-pbt-worker-'));
  const child = spawn(join(repoRoot, 'bin', 'hanzo-ml'), ['worker'], { env: { ...process.env, ...shared, HANZO_ML_HOME: home }, stdio: ['ignore', 'ignore', 'pipe'] });
  workers.push(child);
  let stderr = '';
  await new Promise<void>((ready, failed) => {
    child.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString();
      if (stderr.includes('hanzo-ml worker: ready')) ready();
    });
    child.once('exit', (code) => failed(new Error(`hanzo-ml worker exited ${code}: ${stderr}`)));
  });
  return child;
}

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: Json }> {
  const res = await api.app.request(path, { method, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  return { status: res.status, body: (await res.json()) as Json };
}

async function waitFor<T>(what: string, probe: () => Promise<T | null>, timeoutMs = 120_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const got = await probe().catch(() => null);
    if (got !== null) return got;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const manifestOf = async (checkpoint: string): Promise<PbtManifest> => JSON.parse((await api.store.readText(`${checkpoint}/manifest.json`))!) as PbtManifest;

beforeAll(async () => {
  pg = await startPostgres();
  const databaseUrl = await pg.createDatabase('pbt_workers');
  const probe = testConfig();
  mkdirSync(join(probe.home, 'logs'), { recursive: true });
  temporal = await startTemporalDevServer({ binary: probe.bootstrap.temporal, home: probe.home, port: 0, uiPort: null, namespace: 'default' });
  moto = await startMoto(probe.bootstrap.moto_server);
  shared = {
    ...moto.env,
    HANZO_ML_DATABASE_URL: databaseUrl,
    HANZO_ML_TEMPORAL_ADDRESS: temporal.address,
    // A killed worker's round is retried on the other after this long without a heartbeat.
    HANZO_ML_TEMPORAL_HEARTBEAT_TIMEOUT: '5s',
    HANZO_ML_LOGGING_LEVEL: 'warn',
    HANZO_ML_METRICS_PORT: '0',
  };
  // The API alone in this process (it starts the sweep and reads the lineage); the workers are processes of their own.
  const loaded = testConfig(shared);
  mkdirSync(join(loaded.home, 'logs'), { recursive: true });
  api = await startRuntime({ ...loaded, temporalAddress: temporal.address, temporalUiUrl: null, worker: false, listen: false });
  // A worker process revokes the development token when it starts (as `hanzo-ml worker` does on a shared catalogue).
  await api.catalogue.db.insert(apiTokens).values({ id: randomUUID(), organizationId: 'dev', subject: 'pbt-tester', role: 'developer', tokenSha256: sha256Text(TOKEN) });
}, 180_000);

afterAll(async () => {
  for (const w of workers) if (w.exitCode === null) w.kill('SIGKILL');
  await api?.stop();
  moto?.stop();
  await temporal?.stop();
  await pg?.stop();
});

describe('population-based training on two worker processes', () => {
  it('has a member exploit the checkpoint another worker process wrote, through the object store', { timeout: 300_000 }, async () => {
    const first = await startWorker();
    const sweep: SweepRequest = {
      experiment: 'pbt-two-workers',
      base_config: { method: 'synthetic', function: 'learning-curve', max_steps: 60, eval_steps: 10, step_ms: 100 },
      search_space: { learning_rate: { type: 'log_uniform', min: 1e-5, max: 0.5 }, width: { type: 'int', min: 16, max: 1024 } },
      strategy: 'pbt',
      objective: { metric: 'eval/loss', direction: 'minimize' },
      pbt: { population_size: 4, interval_steps: 20, quantile: 0.25 },
      seed: 5,
    } as SweepRequest;
    const started = await call('POST', '/v1/hpo', sweep);
    expect(started.status, JSON.stringify(started.body)).toBe(201);
    const id = started.body.id as string;
    const lineage = async () => (await call('GET', `/v1/hpo/${id}/lineage`)).body.lineage as Lineage[];

    // Round 0 of every member done on the first worker (round 1 takes it 2 s a member): it dies without clean-up.
    await waitFor('round 0 of every member', async () => ((await lineage()).filter((l) => l.round === 0).length === 4 ? true : null));
    first.kill('SIGKILL');
    await startWorker();
    await waitFor('the sweep to finish', async () => ((await call('GET', `/v1/hpo/${id}`)).body.status === 'completed' ? true : null), 180_000);

    const rows = await lineage();
    expect(rows).toHaveLength(4 * 3);
    const at = (m: number, r: number) => rows.find((l) => l.member === m && l.round === r)!;
    const round0 = await Promise.all([0, 1, 2, 3].map((m) => manifestOf(at(m, 0).checkpoint)));
    const firstWriter = round0[0]!.pbt.writer;
    expect(round0.every((m) => m.pbt.writer === firstWriter)).toBe(true);
    for (const l of rows) expect(l.checkpoint).toMatch(/^s3:\/\/hanzo-ml-checkpoints\/checkpoints\/dev\/[0-9a-f-]{36}\/\d+$/);

    const exploit = rows.find((l) => l.action === 'exploit' && l.round === 1)!;
    expect(exploit).toBeDefined();
    const source = at(exploit.parent_member!, 0);
    const own = await manifestOf(exploit.checkpoint);
    const from = await manifestOf(source.checkpoint);
    // The exploiting round ran on the second worker and started from the source's round-0 checkpoint, which the
    // first worker wrote: its state continues from the source's loss at the source's step.
    expect(from.pbt.writer).toBe(firstWriter);
    expect(own.pbt.writer).not.toBe(firstWriter);
    expect(own.pbt.started_from).toBe(source.checkpoint);
    expect(own.pbt.start).toEqual({ step: source.step, loss: source.value });
    expect(own).toMatchObject({ step: exploit.step, pbt: { member: exploit.member, round: 1 } });
    expect(exploit.step).toBe(40);
  });
});

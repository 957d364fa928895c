// The world the tenancy probes run in: one API (createApp over a PGlite catalogue, file objects, a real Temporal
// dev server; no worker runs, as under `hanzo-ml serve`, but while an upload waits for its preparation job), two
// organizations, and every kind of resource of org B
// created through the API by B's own admin. Org A gets a viewer, a researcher and an admin token and a few
// resources of its own (the targets of cross-organization references in create requests).
//
// Stand-ins, named: no worker polls the task queues, so B's pipeline, sweep and model-version registration stay
// queued (the probes are about the API's answers, not about what the workflows do); B's queue entry is written
// by the admission repository the worker itself calls.
import { mkdirSync, mkdtempSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { sql } from 'drizzle-orm';
import { createApp } from '../../api/app.js';
import { openCatalogue, type Catalogue } from '../../db/client.js';
import { createApiToken, createOrganization, type Role } from '../../db/repo/auth.js';
import { requestAdmission } from '../../db/repo/admissions.js';
import { setRunTags } from '../../db/repo/params-tags.js';
import { jobTotalTags } from '../../db/repo/usage.js';
import { createLogger } from '../../lib/log.js';
import { createObjectStore } from '../../lib/object-store.js';
import { startTemporalDevServer, type DevServer } from '../../lib/temporal-dev-server.js';
import { testConfig } from './config.js';
import { withWorker } from './stack.js';

export const ORG_A = 'tenant-a';
export const ORG_B = 'tenant-b';
/** The roles of org A that probe: spec 000's ml-viewer, ml-researcher and ml-admin. */
export const PROBE_ROLES = ['viewer', 'researcher', 'admin'] as const;
export type ProbeRole = (typeof PROBE_ROLES)[number];
export const STORED_ROLE: Record<ProbeRole, Role> = { viewer: 'viewer', researcher: 'developer', admin: 'admin' };

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** What org B owns, by the ids and names the routes address them with. */
export interface OrgB {
  datasetId: string;
  datasetName: string;
  /** B's own eval suite (version 1), whose test set is a split of B's dataset */
  evalSuiteName: string;
  experimentId: string;
  experimentName: string;
  runId: string;
  /** a file of B's run, as the run's artifact path and as the proxy's path */
  artifactPath: string;
  proxyPath: string;
  /** a file B put through the artifact proxy outside any experiment (the proxy's namespace is shared) */
  freeProxyPath: string;
  modelName: string;
  version: string;
  alias: string;
  loggedModelId: string;
  pipelineId: string;
  /** a command job of B's (no worker runs it: it stays queued) */
  jobId: string;
  /** a recipe job of B's created through /v1/fine_tuning/jobs on B's dataset (a file), also queued */
  fineTuningJobId: string;
  /** one of B's webhook endpoints */
  webhookId: string;
  scheduleId: string;
  scheduleName: string;
  sweepId: string;
  /** one of B's API tokens (its viewer's) */
  tokenId: string;
  metricKey: string;
  tagKey: string;
}

/** What org A owns: the targets a cross-organization reference is aimed from. */
export interface OrgA {
  modelName: string;
  runId: string;
  loggedModelId: string;
}

export interface TenancyWorld {
  app: ReturnType<typeof createApp>;
  catalogue: Catalogue;
  home: string;
  b: OrgB;
  a: OrgA;
  /** bearer headers of org A's roles, and of B's admin (for the controls) */
  tokenOf: Record<ProbeRole, string>;
  bAdmin: string;
  /** every string of B's that must never reach A: ids, names, keys, values, file contents */
  secrets: string[];
  request(method: string, path: string, token: string, body?: unknown): Promise<{ status: number; text: string; json: Json | null }>;
  stop(): Promise<void>;
}

const chat = (q: string, a: string) => JSON.stringify({ messages: [{ role: 'user', content: q }, { role: 'assistant', content: a }] });

async function call(app: TenancyWorld['app'], method: string, path: string, token: string, body?: unknown) {
  const headers: Record<string, string> = { authorization: `Bearer ${token}` };
  let payload: BodyInit | undefined;
  if (typeof body === 'string' || body instanceof Uint8Array) {
    headers['content-type'] = 'application/octet-stream';
    payload = body as BodyInit;
  } else if (body !== undefined) {
    headers['content-type'] = 'application/json';
    payload = JSON.stringify(body);
  }
  const res = await app.request(path, { method, headers, ...(payload !== undefined ? { body: payload } : {}) });
  const text = await res.text();
  let json: Json | null = null;
  try {
    json = text ? (JSON.parse(text) as Json) : null;
  } catch {
    json = null;
  }
  return { status: res.status, text, json };
}

async function orgWithTokens(catalogue: Catalogue, org: string): Promise<Record<ProbeRole, { id: string; token: string }>> {
  return catalogue.db.transaction(async (tx) => {
    await createOrganization(tx, org);
    const out = {} as Record<ProbeRole, { id: string; token: string }>;
    for (const role of PROBE_ROLES) out[role] = await createApiToken(tx, { organizationId: org, subject: `${org}-${role}`, role: STORED_ROLE[role], expiresAt: null });
    return out;
  });
}

export async function startTenancyWorld(): Promise<TenancyWorld> {
  // B has a quota on the cluster, so a queue listing that shows other organizations shows B.
  const configDir = mkdtempSync(join(tmpdir(), 'hanzo-ml-tenancy-'));
  const quota = { max_gpus: 1, max_concurrent_jobs: 1 };
  writeFileSync(join(configDir, 'config.yaml'), JSON.stringify({ scheduler: { quotas: { [ORG_A]: quota, [ORG_B]: quota } } }));
  const loaded = testConfig({ HANZO_ML_CONFIG: join(configDir, 'config.yaml') });
  for (const dir of ['logs', 'work', 'tmp', 'objects']) mkdirSync(join(loaded.home, dir), { recursive: true });
  const temporal: DevServer = await startTemporalDevServer({ binary: loaded.bootstrap.temporal, home: loaded.home, port: 0, uiPort: null, namespace: 'default' });
  const catalogue = await openCatalogue({ pgliteDir: join(loaded.home, 'pg') });
  const store = await createObjectStore(loaded.config.storage, loaded.home);
  const connection = await Connection.connect({ address: temporal.address });
  const client = new Client({ connection, namespace: loaded.config.temporal.namespace });
  const log = createLogger({ level: 'error', format: 'text' });
  const app = createApp({ db: catalogue.db, store, config: loaded.config, home: loaded.home, bootstrap: loaded.bootstrap, temporal: client, log, temporalUiUrl: null });

  const tokensA = await orgWithTokens(catalogue, ORG_A);
  const tokensB = await orgWithTokens(catalogue, ORG_B);
  const bAdmin = tokensB.admin.token;
  // The probes read ready versions: both datasets are uploaded first, each waiting (wait=true) for its preparation
  // job, which a worker runs meanwhile; it stops before anything else of B's exists, which so stays queued.
  const datasets = await withWorker({ ...loaded, log, catalogue, store, temporalAddress: temporal.address }, async () => ({
    b: created('a dataset', await call(app, 'POST', '/v1/datasets?name=b-secret-ds&format=jsonl&wait=true', bAdmin, [chat('b q1?', 'a1'), chat('b q2?', 'a2'), chat('b q3?', 'a3')].join('\n'))),
    a: created('A\'s dataset', await call(app, 'POST', '/v1/datasets?name=a-own-ds&format=jsonl&wait=true', tokensA.admin.token, [chat('a q1?', 'a1'), chat('a q2?', 'a2'), chat('a q3?', 'a3')].join('\n'))),
  }));
  const b = await populateOrgB(app, bAdmin, tokensB.viewer.id, datasets.b);
  // B's run as a finished train job: its spending is B's (GET /v1/usage).
  await setRunTags(catalogue.db, b.runId, jobTotalTags({ seconds: 60, deviceHours: 0.0123457, costUsd: 7.6543219, tokens: 1000, gpuType: 'cpu', method: 'lora', baseModel: 'b-secret-base' }));
  await requestAdmission(catalogue.db, { name: 'b-secret-job', organizationId: ORG_B, priority: 1, gpus: 1, alreadyRunning: false }, { maxJobs: 0, maxGpus: 1, machineGpus: null }, 60_000);
  // A's own resources come after B's, so A's event stream has events after B's first one.
  const a = await populateOrgA(app, tokensA.admin.token);
  const secrets = [
    ...Object.entries(b)
      .filter(([k]) => !['version', 'alias'].includes(k))
      .map(([, v]) => v),
    'b-secret-param-value',
    'b-secret-tag-value',
    'b secret file content',
    'b-secret-dir',
    'b-secret-free',
    'b-secret-run',
    'b-secret-logged',
    'b_secret_param',
    'b-secret-job',
    'b-secret-input',
    '7.6543219',
    '0.0123457',
    `${ORG_B}-viewer`,
    `${ORG_B}-admin`,
  ];
  return {
    app,
    catalogue,
    home: loaded.home,
    b,
    a,
    tokenOf: { viewer: tokensA.viewer.token, researcher: tokensA.researcher.token, admin: tokensA.admin.token },
    bAdmin,
    secrets: [...new Set(secrets)],
    request: (method, path, token, body) => call(app, method, path, token, body),
    async stop() {
      await connection.close();
      await catalogue.close();
      await temporal.stop();
    },
  };
}

/** Fails setup with the answer when B's own request to create something is refused. */
function created(what: string, res: { status: number; text: string; json: Json | null }): Json {
  if (res.status >= 300 || !res.json) throw new Error(`creating ${what} as B's admin answered ${res.status}: ${res.text}`);
  return res.json;
}

async function populateOrgB(app: TenancyWorld['app'], token: string, viewerTokenId: string, dataset: Json): Promise<OrgB> {
  const req = (method: string, path: string, body?: unknown) => call(app, method, path, token, body);
  const mlflow = (rpc: string, body: unknown) => req('POST', `/api/2.0/mlflow/${rpc}`, body);
  const evalSuite = { name: 'b-secret-suite', version: 1, test: { dataset: 'b-secret-ds@1', split: 'train' }, metrics: [{ task: 'test', metric: 'exact_match', direction: 'higher', max_regression: 0.05 }] };
  created('an eval suite', await req('POST', '/v1/eval-suites', evalSuite));
  const experimentId = created('an experiment', await mlflow('experiments/create', { name: 'b-secret-exp', tags: [{ key: 'b_secret_tag', value: 'b-secret-tag-value' }] })).experiment_id as string;
  const run = created('a run', await mlflow('runs/create', { experiment_id: experimentId, run_name: 'b-secret-run', start_time: 1_700_000_000_000, tags: [] })).run as Json;
  const runId = run.info.run_id as string;
  created(
    'run data',
    await mlflow('runs/log-batch', {
      run_id: runId,
      metrics: [{ key: 'b_secret_metric', value: 0.5, timestamp: 1_700_000_000_001, step: 1 }],
      params: [{ key: 'b_secret_param', value: 'b-secret-param-value' }],
      tags: [{ key: 'b_secret_tag', value: 'b-secret-tag-value' }],
    }),
  );
  const artifactPath = 'b-secret-dir/b-secret.txt';
  created('a run artifact', await req('POST', `/v1/runs/${runId}/artifacts?path=${artifactPath}`, 'b secret file content'));
  const proxyPath = `${experimentId}/${runId}/artifacts/${artifactPath}`;
  const freeProxyPath = 'b-secret-free/b-secret.txt';
  created('a proxied file outside experiments', await req('PUT', `/api/2.0/mlflow-artifacts/artifacts/${freeProxyPath}`, 'b secret file content'));
  created('run inputs', await mlflow('runs/log-inputs', { run_id: runId, datasets: [{ tags: [], dataset: { name: 'b-secret-input', digest: 'b1', source_type: 'local', source: '{}' } }] }));
  const modelName = 'b-secret-model';
  created('a registered model', await mlflow('registered-models/create', { name: modelName, tags: [{ key: 'b_secret_tag', value: 'b-secret-tag-value' }] }));
  const version = created('a model version', await mlflow('model-versions/create', { name: modelName, source: `runs:/${runId}/b-secret-dir`, run_id: runId })).model_version as Json;
  created('an alias', await mlflow('registered-models/alias', { name: modelName, alias: 'b-champion', version: version.version }));
  const logged = created('a logged model', await mlflow('logged-models', { experiment_id: experimentId, name: 'b-secret-logged', source_run_id: runId, params: [{ key: 'b_secret_param', value: 'b-secret-param-value' }] })).model as Json;
  created('run outputs', await mlflow('runs/outputs', { run_id: runId, models: [{ model_id: logged.info.model_id, step: 1 }] }));
  const pipeline = { model_name: 'b-secret-pipeline-model', base_model: 'hanzo-tiny-llama', dataset: { name: 'b-secret-ds', version: 'latest' } };
  const pipelineId = created('a pipeline', await req('POST', '/v1/pipelines', pipeline)).id as string;
  const jobId = created('a job', await req('POST', '/v1/jobs', { name: 'b-secret-job', type: 'training', image: 'trainer', command: ['true'] })).id as string;
  const fineTuningJobId = created('a fine-tuning job', await req('POST', '/v1/fine_tuning/jobs', { model: 'hanzo-tiny-llama', training_file: dataset.id, suffix: 'b-secret-ft' })).id as string;
  const webhookId = created('a webhook endpoint', await req('POST', '/v1/webhooks', { url: 'https://b-secret-hook.example/hook' })).id as string;
  const schedule = created('a schedule', await req('POST', '/v1/schedules', { name: 'b-secret-schedule', every: '1d', paused: true, pipeline }));
  const sweep = created(
    'an HPO sweep',
    await req('POST', '/v1/hpo', {
      experiment: 'b-secret-sweep',
      base_config: { method: 'synthetic', function: 'branin', max_steps: 20, eval_steps: 5, step_ms: 25 },
      search_space: { x1: { type: 'uniform', min: -5, max: 10 }, x2: { type: 'uniform', min: 0, max: 15 } },
      strategy: 'random',
      objective: { metric: 'eval/loss', direction: 'minimize' },
      max_trials: 2,
      seed: 3,
    }),
  );
  return {
    datasetId: dataset.id as string,
    datasetName: 'b-secret-ds',
    evalSuiteName: 'b-secret-suite',
    experimentId,
    experimentName: 'b-secret-exp',
    runId,
    artifactPath,
    proxyPath,
    freeProxyPath,
    modelName,
    version: String(version.version),
    alias: 'b-champion',
    loggedModelId: logged.info.model_id as string,
    pipelineId,
    jobId,
    fineTuningJobId,
    webhookId,
    scheduleId: schedule.id as string,
    scheduleName: 'b-secret-schedule',
    sweepId: sweep.id as string,
    tokenId: viewerTokenId,
    metricKey: 'b_secret_metric',
    tagKey: 'b_secret_tag',
  };
}

async function populateOrgA(app: TenancyWorld['app'], token: string): Promise<OrgA> {
  const mlflow = (rpc: string, body: unknown) => call(app, 'POST', `/api/2.0/mlflow/${rpc}`, token, body);
  created('A\'s model', await mlflow('registered-models/create', { name: 'a-own-model' }));
  const run = created('A\'s run', await mlflow('runs/create', { experiment_id: '0', run_name: 'a-own-run' })).run as Json;
  const logged = created('A\'s logged model', await mlflow('logged-models', { experiment_id: '0', name: 'a-own-logged' })).model as Json;
  return { modelName: 'a-own-model', runId: run.info.run_id as string, loggedModelId: logged.info.model_id as string };
}

// ---- what "nothing was written" means ----

/**
 * The catalogue and the object store as one comparable value: each table's row count and an md5 of its rows, and
 * every object's path, size and modification time. The one change a request of A's may make is to A's own audit
 * trail (its audit rows and their `audit` events): api/audit.ts records every 403 as a denial, and records a
 * POST it counts as a change even when it only reads. Any other row of A's, and anything of B's, is a write.
 */
export interface Snapshot {
  tables: Record<string, string>;
  objects: string[];
}

const ALLOWED_TRAIL: Record<string, string> = {
  audit_log: `organization_id <> '${ORG_A}'`,
  outbox: `not (organization_id = '${ORG_A}' and topic = 'audit')`,
};

let checksumQuery: string | null = null;

async function tableChecksumQuery(catalogue: Catalogue): Promise<string> {
  const rows = (await catalogue.db.execute(sql`select table_name from information_schema.tables where table_schema = 'public' and table_type = 'BASE TABLE' order by table_name`)) as unknown as
    | { rows: { table_name: string }[] }
    | { table_name: string }[];
  const names = (Array.isArray(rows) ? rows : rows.rows).map((r) => r.table_name);
  return names
    .map((t) => `select '${t}' as t, count(*) || ':' || md5(coalesce(string_agg(x::text, '|' order by x::text), '')) as h from "${t}" x${ALLOWED_TRAIL[t] ? ` where ${ALLOWED_TRAIL[t]}` : ''}`)
    .join(' union all ');
}

function listObjects(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else {
        const s = statSync(p);
        out.push(`${relative(root, p)} ${s.size} ${s.mtimeMs}`);
      }
    }
  };
  walk(root);
  return out.sort();
}

export async function snapshot(world: Pick<TenancyWorld, 'catalogue' | 'home'>): Promise<Snapshot> {
  checksumQuery ??= await tableChecksumQuery(world.catalogue);
  const res = (await world.catalogue.db.execute(sql.raw(checksumQuery))) as unknown as { rows: { t: string; h: string }[] } | { t: string; h: string }[];
  const rows = Array.isArray(res) ? res : res.rows;
  return { tables: Object.fromEntries(rows.map((r) => [r.t, r.h])), objects: listObjects(join(world.home, 'objects')) };
}

/** What changed between two snapshots: table names and object lines, empty when nothing was written. */
export function changes(before: Snapshot, after: Snapshot): string[] {
  const tables = Object.keys({ ...before.tables, ...after.tables }).filter((t) => before.tables[t] !== after.tables[t]);
  const gone = before.objects.filter((o) => !after.objects.includes(o)).map((o) => `object removed or changed: ${o}`);
  const added = after.objects.filter((o) => !before.objects.includes(o)).map((o) => `object added or changed: ${o}`);
  return [...tables.map((t) => `table ${t}`), ...gone, ...added];
}

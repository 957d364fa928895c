// Every location a caller can hand the API, fuzzed with the encodings that once led out of the file store
// (`%2e%2e`, `%252e%252e`, `%2f`, backslashes, look-alike dots, absolute paths, file:// URIs) and with symbolic
// links planted inside the store: each answer is a refusal naming the field, and afterwards no model version,
// dataset, pipeline or sweep exists that the fuzz created, and no object in the store holds a byte from outside it.
// A real stack (Temporal dev server, worker, PGlite, file:// objects); the caller is an organization other than the
// loopback development one, which may by design read its own machine's files.
import { randomUUID } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { seedDevOrganization } from '../db/repo/auth.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const ORG = 'fuzz-org';
const TOKEN = 'fuzz-org-token';
const headers = { authorization: `Bearer ${TOKEN}` };
const SENTINEL = `outside the store ${randomUUID()}`;

let stack: TestStack;
let run = '';
let wireRoot = '';
let artifactDir = '';

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: Json }> {
  const json = body !== undefined && typeof body !== 'string';
  const res = await stack.runtime.app.request(path, {
    method,
    headers: { ...headers, ...(json ? { 'content-type': 'application/json' } : {}) },
    body: json ? JSON.stringify(body) : (body as string | undefined),
  });
  const text = await res.text();
  return { status: res.status, body: text.startsWith('{') ? (JSON.parse(text) as Json) : {} };
}

/** A request to the listening server with the target exactly as written: no URL parser folds `%2e%2e` first. */
function rawRequest(method: string, target: string, body = ''): Promise<{ status: number; body: Json }> {
  const url = new URL(stack.runtime.apiUrl);
  const path = target.replace(/[^\x21-\x7e]|\\/gu, (ch) => encodeURIComponent(ch));
  return new Promise((resolve, reject) => {
    const r = httpRequest({ host: url.hostname, port: url.port, method, path, headers }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text.startsWith('{') ? (JSON.parse(text) as Json) : {} }));
    });
    r.on('error', reject);
    r.end(body);
  });
}

/**
 * Hostile locations. A relative one is anchored where each field is (inside the run's artifacts, the
 * organization's dataset prefix); six climbs from a run's artifact directory reach the data dir, where the sentinel
 * file lies, nine reach the file system's root. A whole one is the field's entire value.
 */
const RELATIVE: [string, string][] = [
  ['literal ..', `${'../'.repeat(6)}secret.txt`],
  ['%2e%2e to the host', `${'%2e%2e/'.repeat(9)}etc/hostname`],
  ['%2E%2E to the data dir', `${'%2E%2E/'.repeat(6)}secret.txt`],
  ['%252e%252e', `${'%252e%252e/'.repeat(6)}secret.txt`],
  ['.%2e', `${'.%2e/'.repeat(6)}secret.txt`],
  ['%2f inside a segment', `${'..%2f'.repeat(6)}secret.txt`],
  ['%252f inside a segment', `model%252f${'..%252f'.repeat(7)}secret.txt`],
  ['backslashes', `${'..\\'.repeat(6)}secret.txt`],
  ['%5c', `${'..%5c'.repeat(6)}secret.txt`],
  ['U+2024 ONE DOT LEADER', `${'\u2024\u2024/'.repeat(6)}secret.txt`],
  ['U+2025 TWO DOT LEADER', `${'\u2025/'.repeat(6)}secret.txt`],
  ['U+FF0E and U+FF0F', `${'\uff0e\uff0e\uff0f'.repeat(6)}secret.txt`],
  ['U+2024 percent-encoded', `${'%E2%80%A4%E2%80%A4/'.repeat(6)}secret.txt`],
  ['NUL', 'model/weights.safetensors%00.txt'],
];
const WHOLE = (home: string): [string, string][] => [
  ['absolute path', '/etc/hostname'],
  ['absolute path to the data dir', join(home, 'secret.txt')],
  ['file URI', 'file:///etc/hostname'],
  ['file URI to the data dir', pathToFileURL(join(home, 'secret.txt')).href],
];

/**
 * Deep enough that a server folding `..` in the request line before routing would still land on the same route:
 * the handler then sees the raw target and must refuse it itself.
 */
const DEEP = 'a/b/c/d/e/f/g/h/i/j/';

/** One location input of the API: how to send a value in it, and what names the field in the refusal. */
interface Input {
  name: string;
  field: RegExp;
  send: (value: string) => Promise<{ status: number; body: Json }>;
  /** How a relative payload is anchored in this field (left out: sent as it is). */
  anchor?: () => string;
  /** Whether the field takes absolute paths, so that one outside the caller's storage is a 403 of policy. */
  takesAbsolute?: boolean;
  /** Whether whole payloads (absolute paths, URIs) are meaningless in this field (a URL path segment). */
  relativeOnly?: boolean;
}

const jsonl = '{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]}\n';
const inputs: Input[] = [
  { name: 'artifact_path of POST /v1/models/{name}/versions', field: /artifact_path/, send: (v) => call('POST', '/v1/models/fuzz-model/versions', { run_id: run, artifact_path: v }) },
  {
    name: 'source (runs:/) of MLflow model-versions/create',
    field: /model version source/,
    anchor: () => `runs:/${run}/`,
    send: (v) => call('POST', '/api/2.0/mlflow/model-versions/create', { name: 'fuzz-model', source: v, run_id: run }),
  },
  {
    name: 'source (mlflow-artifacts:) of MLflow model-versions/create',
    field: /model version source/,
    anchor: () => `${wireRoot}/`,
    send: (v) => call('POST', '/api/2.0/mlflow/model-versions/create', { name: 'fuzz-model', source: v, run_id: run }),
  },
  {
    name: 'source (file:// in the store) of MLflow model-versions/create',
    field: /model version source/,
    anchor: () => `${pathToFileURL(artifactDir).href}/`,
    send: (v) => call('POST', '/api/2.0/mlflow/model-versions/create', { name: 'fuzz-model', source: v, run_id: run }),
  },
  {
    name: 'source (models:/) of MLflow model-versions/create',
    field: /model version source/,
    anchor: () => 'models:/fuzz-model/',
    send: (v) => call('POST', '/api/2.0/mlflow/model-versions/create', { name: 'fuzz-model', source: v }),
  },
  { name: 'path of POST /v1/runs/{id}/artifacts', field: /path/, send: (v) => call('POST', `/v1/runs/${run}/artifacts?path=${encodeURIComponent(v)}`, 'x') },
  { name: 'path of GET /v1/runs/{id}/artifacts', field: /path/, send: (v) => call('GET', `/v1/runs/${run}/artifacts?path=${encodeURIComponent(v)}`) },
  { name: 'path of MLflow artifacts/list', field: /path/, send: (v) => call('GET', `/api/2.0/mlflow/artifacts/list?run_id=${run}&path=${encodeURIComponent(v)}`) },
  { name: 'path of the mlflow-artifacts proxy listing', field: /path/, send: (v) => call('GET', `/api/2.0/mlflow-artifacts/artifacts?path=${encodeURIComponent(v)}`) },
  {
    name: 'path in the URL of a mlflow-artifacts proxy upload',
    field: /path/,
    relativeOnly: true,
    anchor: () => DEEP,
    send: (v) => rawRequest('PUT', `/api/2.0/mlflow-artifacts/artifacts/${wireRoot.replace('mlflow-artifacts:/', '')}/${v}`, 'x'),
  },
  { name: 'path in the URL of a /v1 run artifact download', field: /path/, relativeOnly: true, anchor: () => DEEP, send: (v) => rawRequest('GET', `/v1/runs/${run}/artifacts/${v}`) },
  {
    name: 'base_model of POST /v1/pipelines',
    field: /base_model/,
    takesAbsolute: true,
    send: (v) => call('POST', '/v1/pipelines', { model_name: 'fuzz', base_model: v, dataset: { name: 'fuzz-ds', version: 'latest' } }),
  },
  {
    name: 'dataset.source_uri of POST /v1/pipelines',
    field: /dataset\.source_uri/,
    takesAbsolute: true,
    anchor: () => `s3://${stack.loaded.config.storage.buckets.datasets}/${ORG}/`,
    send: (v) => call('POST', '/v1/pipelines', { model_name: 'fuzz', base_model: 'hanzo-tiny-llama', dataset: { name: 'fuzz-ds', source_uri: v } }),
  },
  {
    name: 'base_config.model of POST /v1/hpo',
    field: /base_config\.model/,
    takesAbsolute: true,
    send: (v) =>
      call('POST', '/v1/hpo', {
        experiment: 'fuzz-sweep',
        base_config: { method: 'lora', model: v, dataset: 'fuzz-ds', max_steps: 4, eval_steps: 2 },
        search_space: { learning_rate: { type: 'log_uniform', min: 1e-5, max: 1e-3 } },
        strategy: 'random',
        objective: { metric: 'eval/loss', direction: 'minimize' },
        max_trials: 1,
        max_concurrent_trials: 1,
      }),
  },
  {
    // Any absolute location is an MLflow experiment's to name (its runs' artifacts are refused at use outside the
    // store); a climb inside one is not.
    name: 'artifact_location of MLflow experiments/create',
    field: /artifact_location/,
    relativeOnly: true,
    anchor: () => `s3://${stack.loaded.config.storage.buckets.models}/${ORG}/${DEEP}`,
    send: (v) => call('POST', '/api/2.0/mlflow/experiments/create', { name: `fuzz-exp-${randomUUID()}`, artifact_location: v }),
  },
  { name: 'tokenizer of POST /v1/datasets', field: /tokenizer/, takesAbsolute: true, send: (v) => call('POST', `/v1/datasets?name=fuzz-ds&format=jsonl&tokenizer=${encodeURIComponent(v)}`, jsonl) },
];

/** Every regular file under a directory (symbolic links are not followed: they are what the store refuses). */
function filesIn(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name));
}

/** The paths a ready version's manifests list, per format. */
async function manifestPaths(name: string, version: number): Promise<string[]> {
  for (let i = 0; ; i++) {
    const v = await call('GET', `/v1/models/${name}/versions/${version}`);
    if (v.body.status !== 'pending_registration') {
      expect(v.body.status, JSON.stringify(v.body)).toBe('ready');
      break;
    }
    if (i > 600) throw new Error(`${name} v${version} is still pending`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const paths: string[] = [];
  const v = await call('GET', `/v1/models/${name}/versions/${version}`);
  for (const format of Object.keys(v.body.artifacts as Json)) {
    const manifest = await call('GET', `/v1/models/${name}/versions/${version}/artifacts/${format}/manifest.json`);
    paths.push(...(manifest.body.files as { path: string }[]).map((f) => f.path));
  }
  return paths;
}

beforeAll(async () => {
  stack = await startTestStack();
  await seedDevOrganization(stack.runtime.catalogue.db, ORG, TOKEN);
  writeFileSync(join(stack.home, 'secret.txt'), SENTINEL);
  // A directory that looks like a base model (config.json, tokenizer.json), outside the base-models directory.
  mkdirSync(join(stack.home, 'outside-model'), { recursive: true });
  for (const file of ['config.json', 'tokenizer.json']) writeFileSync(join(stack.home, 'outside-model', file), '{}');
  mkdirSync(join(stack.home, 'outside'), { recursive: true });
  writeFileSync(join(stack.home, 'outside', 'hostname'), SENTINEL);
  const created = await call('POST', '/api/2.0/mlflow/runs/create', { experiment_id: '0', run_name: 'fuzzed' });
  expect(created.status, JSON.stringify(created.body)).toBe(200);
  run = created.body.run.info.run_id as string;
  expect((await call('POST', '/api/2.0/mlflow/registered-models/create', { name: 'fuzz-model' })).status).toBe(200);
  wireRoot = created.body.run.info.artifact_uri as string;
  expect(wireRoot).toMatch(/^mlflow-artifacts:\//);
  const up = await call('POST', `/v1/runs/${run}/artifacts?path=model/weights.safetensors`, 'weights of record');
  expect(up.status, JSON.stringify(up.body)).toBe(201);
  // Links an intruder (a job sharing the volume, say) could plant in the run's artifact directory.
  artifactDir = join(stack.home, 'objects', stack.loaded.config.storage.buckets.checkpoints, 'experiments', wireRoot.slice('mlflow-artifacts:/'.length));
  symlinkSync(join(stack.home, 'secret.txt'), join(artifactDir, 'model', 'leak.safetensors'));
  symlinkSync(join(stack.home, 'secret.txt'), join(artifactDir, 'leak.txt'));
  symlinkSync(join(stack.home, 'outside'), join(artifactDir, 'linked'));
}, 180_000);

afterAll(async () => {
  await stack?.stop();
});

describe('the path fuzzer', () => {
  it('refuses every hostile location in every location input with a 400 that names the field', async () => {
    const failures: string[] = [];
    for (const input of inputs) {
      const payloads = [...RELATIVE.map(([what, p]) => [what, (input.anchor?.() ?? '') + p] as const), ...(input.relativeOnly ? [] : WHOLE(stack.home))];
      for (const [what, value] of payloads) {
        const res = await input.send(value);
        const absolute = WHOLE(stack.home).some(([, w]) => w === value) && input.takesAbsolute;
        const statusOk = absolute ? [400, 403].includes(res.status) : res.status === 400;
        const message = String(res.body.message ?? '');
        // A lookup that found nothing is no refusal: the location was taken, and a file there would have been read.
        const lookedUp = /not found|does not exist|no artifacts at/.test(message);
        if (!statusOk || !input.field.test(message) || lookedUp) failures.push(`${input.name} / ${what} (${value}): ${res.status} ${message}`);
      }
    }
    expect(failures).toEqual([]);
  }, 300_000);

  it('does not let a base model, tokenizer or HPO model climb out of the base-models directory, even to a real model', async () => {
    const { config, bootstrap } = stack.loaded;
    const modelsDir = config.trainer.base_models_dir ?? bootstrap.base_models_dir;
    const climb = relative(modelsDir, join(stack.home, 'outside-model'));
    expect(climb.startsWith('..')).toBe(true);
    const forms = [climb, climb.replaceAll('..', '%2e%2e'), climb.replaceAll('..', '%252e%252e'), climb.replaceAll('..', '\u2024\u2024'), climb.replaceAll('/', '\\')];
    const fields = inputs.filter((i) => /base_model|base_config|tokenizer/.test(i.field.source));
    expect(fields).toHaveLength(3);
    for (const input of fields)
      for (const value of forms) {
        const res = await input.send(value);
        expect([input.name, value, res.status, res.body.message]).toEqual([input.name, value, 400, expect.stringMatching(new RegExp(`^${input.field.source}: .*(escapes|reads as|backslash)`))]);
      }
  }, 120_000);

  it('refuses symbolic links planted in the store that lead outside it, naming the field', async () => {
    for (const path of ['leak.txt', 'linked', 'linked/hostname']) {
      const v1 = await call('POST', '/v1/models/fuzz-model/versions', { run_id: run, artifact_path: path });
      expect([path, v1.status, v1.body.message]).toEqual([path, 400, expect.stringMatching(/^artifact_path: .*(symbolic link|outside)/)]);
      const mlflow = await call('POST', '/api/2.0/mlflow/model-versions/create', { name: 'fuzz-model', source: `runs:/${run}/${path}`, run_id: run });
      expect([path, mlflow.status, mlflow.body.message]).toEqual([path, 400, expect.stringMatching(/^source: .*(symbolic link|outside)/)]);
    }
  }, 120_000);

  it('afterwards holds no version, dataset, pipeline or sweep the fuzz made, and no byte from outside the store', async () => {
    // Control: a directory holding a planted link registers with its real file only, through both APIs.
    const v1 = await call('POST', '/v1/models/fuzz-model/versions', { run_id: run, artifact_path: 'model' });
    expect(v1.status, JSON.stringify(v1.body)).toBe(202);
    const mlflow = await call('POST', '/api/2.0/mlflow/model-versions/create', { name: 'fuzz-model', source: `runs:/${run}/model`, run_id: run });
    expect(mlflow.status, JSON.stringify(mlflow.body)).toBe(200);
    expect(await manifestPaths('fuzz-model', 1)).toEqual(['weights.safetensors']);
    expect(await manifestPaths('fuzz-model', 2)).toEqual(['weights.safetensors']);
    // Only the two control versions exist: every fuzzed registration was refused before a row was written.
    const versions = await call('GET', '/v1/models/fuzz-model/versions');
    expect((versions.body.versions as Json[]).map((v) => v.version as number).sort()).toEqual([1, 2]);
    expect((await call('GET', '/v1/datasets')).body.datasets).toEqual([]);
    expect((await call('GET', '/v1/pipelines')).body.pipelines).toEqual([]);
    expect((await call('GET', '/v1/hpo')).body.sweeps).toEqual([]);
    // The run's artifacts are the one uploaded file: no fuzzed upload landed anywhere in its tree.
    const listed = await call('GET', `/api/2.0/mlflow/artifacts/list?run_id=${run}&path=model`);
    expect(listed.body.files).toEqual([{ path: 'model/weights.safetensors', is_dir: false, file_size: 17 }]);
    // No object in the store holds the sentinel, which lies only outside it.
    const leaked = filesIn(join(stack.home, 'objects')).filter((f) => readFileSync(f).includes(SENTINEL));
    expect(leaked).toEqual([]);
  }, 180_000);
});

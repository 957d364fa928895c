// The two shipped images, built by scripts/images.sh (deploy/Dockerfile, deploy/trainer.Dockerfile) and run with
// podman as a cluster runs them. The control-plane image serves the API and runs the worker against a real Temporal
// server and PostgreSQL, as uid 1000 on a read-only root (deploy/kubernetes/40-api.yaml), and counts tokens and
// suggests HPO trials with its own Python; the trainer image imports its libraries, runs the Candle tool and trains
// a small LoRA job on the bootstrap's base model. Everything listens on 127.0.0.1 (--network=host).
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigSchema, CONTROL_PLANE_IMAGE, TRAINER_IMAGE } from '../contracts/config.js';
import { repoRoot } from '../lib/config.js';
import { startTemporalDevServer, type DevServer } from '../lib/temporal-dev-server.js';
import { testConfig } from './support/config.js';
import { freePort } from './support/ports.js';
import { startPostgres, type TestPostgres } from './support/postgres.js';

const podmanInstalled = (() => {
  try {
    execFileSync('podman', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
if (!podmanInstalled) console.warn('test/images.test.ts skipped: podman is not installed (scripts/bootstrap.sh --tests installs it from Debian)');

interface Images {
  version: string;
  control_plane: string;
  trainer: string;
  podman_args: string[];
}

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

const RUN = ['run', '--rm', '--network=host', '--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=1024:1024'];
/** As the deployment runs the control plane: uid 1000, read-only root, a writable /tmp. */
const AS_DEPLOYED = ['--user', '1000:1000', '--read-only', '--tmpfs', '/tmp:rw,mode=1777'];

let images: Images;

/** `podman run` of an image, to completion (stdin from `input`). */
function podmanRun(args: string[], opts: { input?: string; timeoutMs?: number } = {}): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn('podman', [...images.podman_args, ...RUN, ...(opts.input !== undefined ? ['-i'] : []), ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => void (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => void (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 120_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.end(opts.input ?? '');
  });
}

/** A long-running container (named, so it can be stopped), with what it wrote so far. */
function podmanStart(name: string, args: string[]): { output: () => string; exited: Promise<number | null>; stop: () => Promise<void> } {
  const child = spawn('podman', [...images.podman_args, ...RUN, '--name', name, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (d: Buffer) => void (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => void (output += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
  return {
    output: () => output,
    exited,
    async stop() {
      try {
        execFileSync('podman', [...images.podman_args, 'stop', '-t', '10', name], { stdio: 'ignore' });
      } catch {
        // already gone
      }
      await exited;
    },
  };
}

async function until<T>(what: string, probe: () => Promise<T | null>, timeoutMs: number, context: () => string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => null);
    if (value !== null) return value;
    if (Date.now() > deadline) throw new Error(`${what} within ${timeoutMs / 1000} s; container output:\n${context().slice(-3000)}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** Every TypeScript module the runtime is made of, imported in the image (cli/index.ts runs the CLI, so not it). */
const IMPORT_EVERY_MODULE = `
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
const root = '/opt/hanzo-ml';
const files = [];
const walk = (d) => { for (const e of readdirSync(d)) { const p = join(d, e); if (statSync(p).isDirectory()) walk(p); else if (p.endsWith('.ts') && p !== root + '/cli/index.ts') files.push(p); } };
for (const d of ['contracts', 'lib', 'db', 'api', 'activities', 'jobs', 'workflows', 'workers', 'cli']) walk(join(root, d));
const failed = [];
for (const f of files) await import(f).catch((e) => failed.push(f + ': ' + e.message.split('\\n')[0]));
console.log(JSON.stringify({ imported: files.length - failed.length, failed }));
`;

describe.skipIf(!podmanInstalled)('the shipped images', () => {
  const loaded = testConfig();
  const work = mkdtempSync(join(tmpdir(), 'hanzo-ml-images-'));
  chmodSync(work, 0o777); // the control-plane image runs as uid 1000
  const baseModel = loaded.bootstrap.base_model;
  const demo = readFileSync(join(repoRoot, 'examples/data/demo-task.jsonl'), 'utf8').split('\n').filter(Boolean);
  writeFileSync(join(work, 'train.jsonl'), demo.slice(0, 24).join('\n') + '\n');
  writeFileSync(join(work, 'validation.jsonl'), demo.slice(24, 32).join('\n') + '\n');

  beforeAll(() => {
    // Idempotent: a second or two when both images are built from the current sources, else it builds them.
    images = JSON.parse(execFileSync(join(repoRoot, 'scripts/images.sh'), { cwd: repoRoot, stdio: ['ignore', 'pipe', 'inherit'] }).toString()) as Images;
  }, 60 * 60_000);
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  it('tags the images with the names the configuration and the manifests use', () => {
    expect(images.version).toBe((JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { version: string }).version);
    expect(ConfigSchema.parse({}).scheduler.images.trainer).toBe(TRAINER_IMAGE);
    expect(TRAINER_IMAGE).toBe(`hanzoai/ml-trainer:${images.version}`);
    expect(CONTROL_PLANE_IMAGE).toBe(`hanzoai/ml:${images.version}`);
    for (const image of [TRAINER_IMAGE, CONTROL_PLANE_IMAGE]) {
      // The short name a pod names resolves to the local build, and it is the build of the current sources.
      const id = (ref: string) => execFileSync('podman', [...images.podman_args, 'image', 'inspect', '--format', '{{.Id}}', ref]).toString().trim();
      expect(id(image)).toBe(id(image === TRAINER_IMAGE ? images.trainer : images.control_plane));
    }
  });

  it('the control-plane image answers --help and imports every runtime module, as uid 1000 on a read-only root', async () => {
    const help = await podmanRun([...AS_DEPLOYED, images.control_plane, '--help']);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/serve +run the API only/);
    expect(help.stdout).toMatch(/worker +run the Temporal worker only/);
    const tsx = '/opt/hanzo-ml/node_modules/tsx/dist/esm/index.mjs';
    const imports = await podmanRun([...AS_DEPLOYED, '--entrypoint', 'node', images.control_plane, '--import', tsx, '--input-type=module', '-e', IMPORT_EVERY_MODULE]);
    expect(imports.code, imports.stderr).toBe(0);
    const report = JSON.parse(imports.stdout.trim().split('\n').at(-1)!) as { imported: number; failed: string[] };
    expect(report.failed).toEqual([]);
    expect(report.imported).toBeGreaterThan(100);
  });

  describe('against Temporal and PostgreSQL', () => {
    let temporal: DevServer;
    let postgres: TestPostgres;
    let env: string[];
    beforeAll(async () => {
      mkdirSync(join(loaded.home, 'logs'), { recursive: true });
      temporal = await startTemporalDevServer({ binary: loaded.bootstrap.temporal, home: loaded.home, port: 0, uiPort: null, namespace: 'default' });
      postgres = await startPostgres();
      const database = await postgres.createDatabase('images');
      env = ['-e', `HANZO_ML_TEMPORAL_ADDRESS=${temporal.address}`, '-e', `HANZO_ML_DATABASE_URL=${database}`, '-e', 'HANZO_ML_HOME=/tmp/home', '-e', 'HANZO_ML_METRICS_PORT=0'];
    });
    afterAll(async () => {
      await postgres?.stop();
      await temporal?.stop();
    });

    it('`hanzo-ml serve` answers /health and /ready and serves the MLflow UI at /mlflow/', async () => {
      const port = await freePort();
      const api = podmanStart(`hanzo-ml-api-${process.pid}`, [...AS_DEPLOYED, ...env, '-e', `HANZO_ML_SERVER_PORT=${port}`, images.control_plane, 'serve']);
      try {
        const base = `http://127.0.0.1:${port}`;
        await until('the API did not answer /health', async () => ((await fetch(`${base}/health`)).ok ? true : null), 120_000, api.output);
        const ready = await fetch(`${base}/ready`);
        expect(ready.status, api.output()).toBe(200);
        expect(await ready.json()).toMatchObject({ status: 'ready', checks: { catalogue: 'ok', temporal: 'ok' } });
        const ui = await fetch(`${base}/mlflow/`);
        expect(ui.status).toBe(200);
        expect(await ui.text()).toMatch(/<html/i);
        expect(api.output()).toMatch(/hanzo-ml serve: ready/);
      } finally {
        await api.stop();
      }
    }, 180_000);

    it('`hanzo-ml worker` bundles its workflows and polls the cluster', async () => {
      const worker = podmanStart(`hanzo-ml-worker-${process.pid}`, [...AS_DEPLOYED, ...env, images.control_plane, 'worker']);
      try {
        await until('the worker did not get ready', async () => (/hanzo-ml worker: ready/.test(worker.output()) ? true : null), 150_000, worker.output);
        expect(worker.output()).toMatch(/hanzo-ml worker: executor local/);
      } finally {
        await worker.stop();
      }
    }, 180_000);
  });

  it('the control-plane image counts tokens and suggests HPO trials with its own Python, without torch', async () => {
    const python = ['--entrypoint', '/opt/hanzo-ml/venv/bin/python', '-e', 'PYTHONPATH=/opt/hanzo-ml/trainer'];
    const suggest = await podmanRun([...AS_DEPLOYED, ...python, images.control_plane, '-m', 'hanzo_ml', 'hpo-suggest'], {
      input: JSON.stringify({ space: { lr: { type: 'log_uniform', min: 1e-5, max: 1e-2 } }, strategy: 'bayesian', directions: ['minimize'], seed: 1, history: [], numbers: [0, 1] }),
    });
    expect(suggest.code, suggest.stderr).toBe(0);
    expect((JSON.parse(suggest.stdout) as { suggestions: unknown[] }).suggestions).toHaveLength(2);

    const spec = { kind: 'count-tokens', job_name: 'count', tokenizer_path: '/model', inputs: { train: '/work/train.jsonl', validation: '/work/validation.jsonl' }, output_path: '/work/counts.json' };
    writeFileSync(join(work, 'count.json'), JSON.stringify(spec));
    const probe = "import sys; from hanzo_ml.cli import main; code = main(['count-tokens', '--spec', '/work/count.json']); print(code, 'torch' in sys.modules)";
    const count = await podmanRun(['-v', `${work}:/work`, '-v', `${baseModel}:/model:ro`, ...python, images.control_plane, '-c', probe]);
    expect(count.code, count.stderr).toBe(0);
    expect(count.stdout.trim()).toBe('0 False');
    const report = JSON.parse(readFileSync(join(work, 'counts.json'), 'utf8')) as { splits: Record<string, { records: number; tokens: number }> };
    expect(report.splits.train!.records).toBe(24);
    expect(report.splits.validation!.records).toBe(8);
    expect(report.splits.train!.tokens).toBeGreaterThan(24 * 10);
  });

  it('the trainer image runs the trainer and the Candle tool, with the lock\'s torch, transformers and peft', async () => {
    const help = await podmanRun([images.trainer, '--help']);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/hanzo-ml trainer/);
    expect(help.stdout).toMatch(/job +run one job from its envelope/);

    const versions = await podmanRun(['--entrypoint', 'python', images.trainer, '-c', 'import torch, transformers, peft, boto3; print(torch.__version__.split("+")[0], transformers.__version__, peft.__version__)']);
    expect(versions.code, versions.stderr).toBe(0);
    const lock = readFileSync(join(repoRoot, 'trainer/requirements.lock'), 'utf8');
    const pinned = (name: string) => new RegExp(`^${name}==(.+)$`, 'm').exec(lock)![1];
    expect(versions.stdout.trim()).toBe(`${pinned('torch')} ${pinned('transformers')} ${pinned('peft')}`);

    const candle = await podmanRun(['--entrypoint', 'hanzo-ml-candle', images.trainer, '--help']);
    expect(candle.code, candle.stderr).toBe(0);
    expect(candle.stdout).toMatch(/validate/);
  });

  it('the trainer image runs as uid 1000, not root, and needs nothing of its root filesystem writable', async () => {
    const id = await podmanRun(['--entrypoint', 'sh', images.trainer, '-c', 'id -u; id -g; echo $HOME']);
    expect(id.stdout.trim().split('\n')).toEqual(['1000', '1000', '/home/hanzo']);
    const readOnly = await podmanRun(['--read-only', '--tmpfs', '/tmp:rw,mode=1777', images.trainer, '--help']);
    expect(readOnly.stdout).toMatch(/hanzo-ml trainer/);
  });

  it('the trainer image trains a small LoRA job on the base model', async () => {
    const spec = {
      kind: 'train', job_name: 'image-lora', run_id: '0123456789abcdef0123456789abcdef', tracking_uri: null,
      base_model_path: '/model', train_path: '/work/train.jsonl', validation_path: '/work/validation.jsonl',
      output_dir: '/work/output', checkpoint_dir: '/work/checkpoints', method: 'lora', threads: 2,
      hyperparameters: { learning_rate: 5e-3, max_steps: 2, batch_size: 4, gradient_accumulation_steps: 1, warmup_steps: 1, lora_rank: 4, lora_alpha: 8, max_seq_length: 192, seed: 7 },
      checkpoint: { every_steps: 2, keep_last: 1 },
    };
    writeFileSync(join(work, 'train.json'), JSON.stringify(spec));
    const train = await podmanRun(['-v', `${work}:/work`, '-v', `${baseModel}:/model:ro`, images.trainer, 'train', '--spec', '/work/train.json', '--workdir', '/work/run'], { timeoutMs: 300_000 });
    expect(train.code, train.stderr.slice(-3000)).toBe(0);
    const result = JSON.parse(readFileSync(join(work, 'run', 'result.json'), 'utf8')) as { steps: number };
    expect(result.steps).toBe(2);
  }, 360_000);
});

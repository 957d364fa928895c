// The product in its production shape for a test: `hanzo-ml serve` and `hanzo-ml worker` as separate processes,
// Postgres for the catalogue they share, a real S3 server (moto_server), a Temporal dev server, and the test
// Kubernetes cluster (real API server, scheduler, controller-manager; KWOK nodes; the kubelet stand-in runs every
// job pod from the trainer image with podman, or as a local process in the fallback without podman). Jobs are
// batch/v1 Jobs that read and write only through S3.
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { parse, stringify } from 'yaml';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { BatchV1Api, CoreV1Api } from '@kubernetes/client-node';
import { startTemporalDevServer, type DevServer } from '../../lib/temporal-dev-server.js';
import { loadConfig, repoRoot, type LoadedConfig } from '../../lib/config.js';
import { ConfigSchema, CONTROL_PLANE_IMAGE } from '../../contracts/config.js';
import { applyClusterObjects } from '../../jobs/queue/kueue-apply.js';
import { detectContainerRuntime } from './cluster/container-runtime.js';
import { startTestCluster, type TestCluster, type TestNodeSpec } from './cluster/control-plane.js';
import { startPostgres, type TestPostgres } from './postgres.js';
import { freePort } from './ports.js';

/**
 * The trainer image of the process fallback (the stand-in gives its processes this image's environment), pinned by a
 * digest of its own as scheduler.images requires.
 */
const FAKE_TRAINER_IMAGE = `hanzoai/ml-trainer@sha256:${'0'.repeat(64)}`;
/** scheduler.namespace, and the namespace of organization dev (the operator's, whose admin the stack bootstraps). */
const NAMESPACE_PREFIX = 'hanzo-ml-jobs';
export const JOBS_NAMESPACE = `${NAMESPACE_PREFIX}-dev`;

/** What GET /v1/pipelines/:id answers, as far as the helpers below read it. */
export interface PipelineStatus {
  status: string;
  progress: { stage: string; error?: string | null } | null;
  result?: unknown;
}

export interface ClusterStack {
  cluster: TestCluster;
  batch: BatchV1Api;
  core: CoreV1Api;
  apiUrl: string;
  home: string;
  s3Endpoint: string;
  loaded: LoadedConfig;
  /** the bearer token api() sends (the operator's first admin), for requests api() cannot make (an upload) */
  token: string;
  api<T = Record<string, unknown>>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }>;
  /** POST /v1/pipelines; throws unless it answers 201; resolves to the pipeline id. */
  startPipeline(req: unknown): Promise<string>;
  /** Polls GET /v1/pipelines/:id until `pred` holds; throws if the pipeline ends first or after timeoutMs. */
  untilPipeline<S extends PipelineStatus>(id: string, pred: (s: S) => boolean, what: string, timeoutMs?: number): Promise<S>;
  /** kill -9 the worker (its container, or its process in the fallback); its jobs keep running in the cluster. */
  killWorker(): void;
  /** Starts a new worker (after killWorker). */
  startWorker(): Promise<void>;
  stop(): Promise<void>;
}

function startMoto(bin: string, port: number, logFile: string): ChildProcess {
  const out = openSync(logFile, 'a');
  try {
    return spawn(bin, ['-H', '127.0.0.1', '-p', String(port)], { stdio: ['ignore', out, out] });
  } finally {
    closeSync(out);
  }
}

async function waitHttp(url: string, timeoutMs: number, what: string, logFile: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ok = await fetch(url).then((r) => r.status < 500, () => false);
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`${what} did not answer at ${url} within ${timeoutMs / 1000} s; its log: ${logFile}\n${existsSync(logFile) ? readFileSync(logFile, 'utf8').slice(-3000) : ''}`);
    await new Promise((r) => setTimeout(r, 300));
  }
}

export interface ClusterStackOptions {
  nodes?: TestNodeSpec[];
  env?: Record<string, string>;
  /** Start Kueue on the cluster too. */
  kueue?: boolean;
  /** A config file for serve and worker (what env cannot say: scheduler.quotas). */
  config?: Record<string, unknown>;
  /** scheduler.images beside the trainer image the stack runs. */
  images?: Record<string, string>;
}

export async function startClusterStack(opts: ClusterStackOptions = {}): Promise<ClusterStack> {
  const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-cluster-stack-'));
  mkdirSync(join(home, 'logs'), { recursive: true });
  const bootstrap = loadConfig({ HANZO_ML_HOME: home }).bootstrap;
  if (!bootstrap.moto_server) throw new Error('moto_server is missing: run scripts/bootstrap.sh --tests');
  const stops: (() => Promise<void>)[] = [];
  const stopAll = async (): Promise<void> => {
    for (const stop of stops.reverse()) await stop().catch(() => undefined);
  };
  try {
    const runtime = detectContainerRuntime();
    let trainerImage = FAKE_TRAINER_IMAGE;
    let controlPlaneImage = CONTROL_PLANE_IMAGE;
    let imageEnv: Record<string, Record<string, string>> = {
      // The fallback's "image": its python runs our trainer package, its PATH has the Candle tool.
      [FAKE_TRAINER_IMAGE]: {
        PATH: `${join(bootstrap.python, '..')}:${process.env.PATH ?? '/usr/bin:/bin'}`,
        PYTHONPATH: join(repoRoot, 'trainer'),
        HANZO_ML_CANDLE: bootstrap.candle,
      },
    };
    if (runtime.kind === 'podman') {
      // The shipped trainer image, built from the current sources (a second or two when it is).
      const built = JSON.parse(execFileSync(join(repoRoot, 'scripts/images.sh'), { cwd: repoRoot, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] })) as { trainer: string; control_plane: string };
      // By digest, as an operator lists them: what runs is what was just built from these sources, whatever moves
      // the version tag; held by a tag of this stack's own, so that a build of other sources (which removes older
      // builds) cannot remove them, and the containers running them, while the stack runs.
      // The tag names this process, so that the holds of a run that was killed before its stop are released by
      // the next stack (each hold keeps a whole trainer build, 6-7 GB, alive).
      releaseOrphanHolds(runtime.podmanArgs);
      const hold = `hold-${process.pid}-${basename(home)}`;
      trainerImage = holdImage(runtime.podmanArgs, built.trainer, hold);
      controlPlaneImage = holdImage(runtime.podmanArgs, built.control_plane, hold);
      stops.push(async () => {
        for (const image of [built.trainer, built.control_plane]) untag(runtime.podmanArgs, `${repositoryOf(image)}:${hold}`);
      });
      imageEnv = {};
    }
    const cluster = await startTestCluster({
      nodes: opts.nodes ?? [
        { name: 'gpu-node-a', gpus: 8, gpuType: 'a100' },
        { name: 'gpu-node-b', gpus: 8, gpuType: 'a100' },
      ],
      images: [FAKE_TRAINER_IMAGE, 'busybox'],
      ...(opts.kueue ? { kueue: true } : {}),
      containerRuntime: runtime,
      imageEnv,
    });
    stops.push(() => cluster.stop());
    const s3Port = await freePort();
    const moto = startMoto(bootstrap.moto_server, s3Port, join(home, 'logs', 'moto.log'));
    stops.push(async () => void moto.kill('SIGTERM'));
    const s3Endpoint = `http://127.0.0.1:${s3Port}`;
    await waitHttp(s3Endpoint, 30_000, 'moto_server', join(home, 'logs', 'moto.log'));
    const core = cluster.kubeConfig.makeApiClient(CoreV1Api);
    const batch = cluster.kubeConfig.makeApiClient(BatchV1Api);
    const pg: TestPostgres = await startPostgres();
    stops.push(() => pg.stop());
    const dbUrl = await pg.createDatabase('hanzo_ml_cluster');
    // The operator's first admin, as an operator makes it (the development token exists only for `hanzo-ml dev`).
    const adminToken = adminBootstrap(dbUrl, home);
    const temporal: DevServer = await startTemporalDevServer({ binary: bootstrap.temporal, home, port: 0, uiPort: null, namespace: 'default' });
    stops.push(() => temporal.stop());
    const apiPort = await freePort();
    const apiUrl = `http://127.0.0.1:${apiPort}`;
    const configDoc = withOrganization(opts.config ?? {}, 'dev');
    // What the operator runs first: `hanzo-ml cluster apply`, the organization's namespace (and its queue, with Kueue).
    await applyClusterObjects(ConfigSchema.parse({ ...configDoc, storage: { endpoint: s3Endpoint }, server: { public_url: apiUrl }, scheduler: { ...(configDoc.scheduler as object), executor: 'kubernetes', namespace: NAMESPACE_PREFIX } }), cluster.kubeConfig);
    // What the operator provisions: the object-store credentials jobs read (moto accepts any key).
    await core.createNamespacedSecret({
      namespace: JOBS_NAMESPACE,
      body: { metadata: { name: 'hanzo-ml-storage' }, stringData: { AWS_ACCESS_KEY_ID: 'test-access', AWS_SECRET_ACCESS_KEY: 'test-secret' } },
    });
    const env: Record<string, string> = {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: process.env.HOME ?? home,
      HANZO_ML_HOME: home,
      HANZO_ML_SERVER_PORT: String(apiPort),
      HANZO_ML_SERVER_PUBLIC_URL: apiUrl,
      HANZO_ML_DATABASE_URL: dbUrl,
      HANZO_ML_STORAGE_ENDPOINT: s3Endpoint,
      HANZO_ML_STORAGE_ACCESS_KEY: 'test-access',
      HANZO_ML_STORAGE_SECRET_KEY: 'test-secret',
      // Each job's pod gets credentials the worker mints by AssumeRole of this role (moto here enforces no policy;
      // test/job-storage-access.test.ts runs it with IAM enforcement).
      HANZO_ML_STORAGE_JOB_ACCESS_ROLE_ARN: 'arn:aws:iam::123456789012:role/hanzo-ml-jobs-{organization}',
      HANZO_ML_TEMPORAL_ADDRESS: temporal.address,
      HANZO_ML_TEMPORAL_HEARTBEAT_TIMEOUT: '10s',
      HANZO_ML_SCHEDULER_EXECUTOR: 'kubernetes',
      HANZO_ML_SCHEDULER_KUBECONFIG: runtime.kind === 'podman' ? selfContainedKubeconfig(cluster.kubeconfigPath, home) : cluster.kubeconfigPath,
      HANZO_ML_SCHEDULER_NAMESPACE: NAMESPACE_PREFIX,
      HANZO_ML_SCHEDULER_IMAGES: Object.entries({ trainer: trainerImage, ...opts.images }).map(([name, ref]) => `${name}=${ref}`).join(','),
      HANZO_ML_SCHEDULER_PREEMPTION_GRACE_PERIOD: '60s',
      HANZO_ML_SCHEDULER_CPU_PER_JOB: '1',
      HANZO_ML_SCHEDULER_MEMORY_PER_JOB: '2Gi',
      HANZO_ML_LOGGING_LEVEL: 'info',
      HANZO_ML_TRAINER_THREADS: '1',
      ...opts.env,
    };
    writeFileSync(join(home, 'config.yaml'), stringify(configDoc));
    env.HANZO_ML_CONFIG = join(home, 'config.yaml');
    const metricsPorts = { serve: await freePort(), worker: await freePort() };
    const processes: { serve?: ChildProcess; worker?: ChildProcess } = {};
    const containers: { serve?: string; worker?: string } = {};
    const launch = (shape: 'serve' | 'worker'): ChildProcess => {
      const log = openSync(join(home, 'logs', `${shape}.log`), 'a');
      // Each process serves its own /metrics: two processes on one machine need two ports.
      const shapeEnv = { ...env, HANZO_ML_METRICS_PORT: String(metricsPorts[shape]) };
      try {
        if (runtime.kind === 'process') return spawn(join(repoRoot, 'bin', 'hanzo-ml'), [shape], { env: shapeEnv, stdio: ['ignore', log, log] });
        const name = `hanzo-ml-${shape}-${basename(home)}-${Date.now()}`;
        containers[shape] = name;
        return spawn('podman', [...runtime.podmanArgs, ...controlPlaneRun(name, shapeEnv, home, bootstrap.base_model), controlPlaneImage, shape], { stdio: ['ignore', log, log] });
      } finally {
        closeSync(log);
      }
    };
    /** kill -9 of a shape: its container (podman kill) or its process. */
    const kill = (shape: 'serve' | 'worker', signal: 'SIGKILL' | 'SIGTERM'): void => {
      const name = containers[shape];
      if (runtime.kind === 'podman' && name) spawnSync('podman', [...runtime.podmanArgs, signal === 'SIGKILL' ? 'kill' : 'stop', ...(signal === 'SIGKILL' ? [] : ['-t', '20']), name], { stdio: 'ignore', timeout: 60_000 });
      else processes[shape]?.kill(signal);
    };
    const readies = (log: string): number => (existsSync(log) ? readFileSync(log, 'utf8').split('hanzo-ml worker: ready').length - 1 : 0);
    const startWorker = async (): Promise<void> => {
      const log = join(home, 'logs', 'worker.log');
      const before = readies(log);
      processes.worker = launch('worker');
      const deadline = Date.now() + 90_000;
      while (readies(log) === before) {
        if (processes.worker.exitCode !== null || Date.now() > deadline) throw new Error(`hanzo-ml worker did not start:\n${readFileSync(log, 'utf8').slice(-3000)}`);
        await new Promise((r) => setTimeout(r, 300));
      }
    };
    if (runtime.kind === 'podman') {
      // The image runs as uid 1000, as deployed: its data directory must be writable by that user.
      for (const dir of ['', 'logs', 'work', 'tmp', 'objects']) {
        mkdirSync(join(home, dir), { recursive: true });
        chmodSync(join(home, dir), 0o777);
      }
    }
    processes.serve = launch('serve');
    stops.push(async () => kill('serve', 'SIGTERM'));
    stops.push(async () => kill('worker', 'SIGKILL'));
    await waitHttp(`${apiUrl}/ready`, 90_000, 'hanzo-ml serve', join(home, 'logs', 'serve.log'));
    await startWorker();
    const loaded = loadConfig(env);
    const stack: ClusterStack = {
      cluster,
      batch,
      core,
      apiUrl,
      home,
      s3Endpoint,
      loaded,
      token: adminToken,
      async api(method, path, body) {
        const res = await fetch(apiUrl + path, {
          method,
          headers: { authorization: `Bearer ${adminToken}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
          body: body !== undefined ? JSON.stringify(body) : undefined,
        });
        const text = await res.text();
        return { status: res.status, body: (text ? JSON.parse(text) : {}) as never };
      },
      async startPipeline(req) {
        const res = await stack.api<{ id: string }>('POST', '/v1/pipelines', req);
        if (res.status !== 201) throw new Error(`POST /v1/pipelines answered ${res.status}: ${JSON.stringify(res.body)}`);
        return res.body.id;
      },
      async untilPipeline(id, pred, what, timeoutMs = 15 * 60_000) {
        const deadline = Date.now() + timeoutMs;
        for (;;) {
          const { body } = await stack.api<never>('GET', `/v1/pipelines/${id}`);
          const s = body as PipelineStatus;
          if (s.progress && pred(body)) return body;
          if (s.status && s.status !== 'RUNNING') throw new Error(`pipeline ${id} ended ${s.status} before ${what}: ${s.progress?.error ?? JSON.stringify(s.result)}`);
          if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (stage ${s.progress?.stage}); logs in ${home}/logs`);
          await new Promise((r) => setTimeout(r, 500));
        }
      },
      killWorker() {
        kill('worker', 'SIGKILL');
      },
      startWorker,
      stop: stopAll,
    };
    return stack;
  } catch (err) {
    await stopAll();
    throw err;
  }
}

/** The config document with `org` among scheduler.organizations: its jobs run on the cluster. */
function withOrganization(doc: Record<string, unknown>, org: string): Record<string, unknown> {
  const scheduler = (doc.scheduler ?? {}) as { organizations?: string[] };
  return { ...doc, scheduler: { ...scheduler, organizations: [...new Set([...(scheduler.organizations ?? []), org])] } };
}

const repositoryOf = (image: string): string => image.replace(/:[^:/]+$/, '');

/** Tags a local image `hold` too; returns it by its digest (repository@sha256:...), as scheduler.images lists it. */
function holdImage(podmanArgs: string[], image: string, hold: string): string {
  execFileSync('podman', [...podmanArgs, 'tag', image, `${repositoryOf(image)}:${hold}`]);
  const digest = execFileSync('podman', [...podmanArgs, 'image', 'inspect', '--format', '{{.Digest}}', image], { encoding: 'utf8' }).trim();
  return `${repositoryOf(image)}@${digest}`;
}

/** Removes one tag (podman's `untag IMAGE NAME` removes NAME from IMAGE: naming the tag twice removes just it). */
function untag(podmanArgs: string[], tag: string): void {
  spawnSync('podman', [...podmanArgs, 'untag', tag, tag], { stdio: 'ignore' });
}

/** Releases the holds of test processes that are gone (killed before their stack's stop ran). */
function releaseOrphanHolds(podmanArgs: string[]): void {
  const tags = execFileSync('podman', [...podmanArgs, 'images', '--format', '{{.Repository}}:{{.Tag}}'], { encoding: 'utf8' }).split('\n');
  for (const tag of tags) {
    const pid = /:hold-(\d+)-/.exec(tag)?.[1];
    if (pid && !processAlive(Number(pid))) untag(podmanArgs, tag);
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** `hanzo-ml admin bootstrap` against the stack's catalogue: the operator's first admin token. */
function adminBootstrap(dbUrl: string, home: string): string {
  const res = spawnSync(join(repoRoot, 'bin', 'hanzo-ml'), ['admin', 'bootstrap', '--subject', 'cluster-test-admin'], {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? home, HANZO_ML_HOME: home, HANZO_ML_DATABASE_URL: dbUrl, HANZO_ML_LOGGING_LEVEL: 'warn' },
    encoding: 'utf8',
    timeout: 120_000,
  });
  if (res.status !== 0) throw new Error(`hanzo-ml admin bootstrap failed (${res.status}):\n${res.stderr}`);
  return (JSON.parse(res.stdout) as { token: string }).token;
}

/**
 * `podman run` of the control-plane image as a cluster runs it: uid 1000, a read-only root with a /tmp, the
 * machine's loopback network. Configuration comes through the environment; the data directory (with the kubeconfig)
 * and the example datasets are mounted at their own paths, the bundled base model where `trainer.base_models_dir`
 * names it.
 */
function controlPlaneRun(name: string, env: Record<string, string>, home: string, baseModel: string): string[] {
  // The image's own PATH; HOME is the mounted data directory (the root is read-only).
  const config = Object.fromEntries(Object.entries(env).filter(([k]) => k !== 'PATH' && k !== 'HOME'));
  return [
    'run', '--rm', '--pull=never', '--name', name, '--network=host',
    '--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=1024:1024',
    '--user', '1000:1000', '--read-only', '--tmpfs', '/tmp:rw,mode=1777',
    '-v', `${home}:${home}`,
    // The demo dataset the tests' pipelines name by its file:// path, as an operator's dataset volume.
    '-v', `${join(repoRoot, 'examples')}:${join(repoRoot, 'examples')}:ro`,
    '-v', `${baseModel}:/models/hanzo-tiny-llama:ro`,
    ...Object.entries({ ...config, HOME: env.HANZO_ML_HOME!, HANZO_ML_TRAINER_BASE_MODELS_DIR: '/models' }).flatMap(([k, v]) => ['-e', `${k}=${v}`]),
  ];
}

/**
 * The admin kubeconfig with its certificates inlined, owned by the image's uid 1000, in the data directory: the
 * worker's view of the API server (a pod's would be its ServiceAccount token), readable inside the container.
 */
function selfContainedKubeconfig(path: string, home: string): string {
  const kc = parse(readFileSync(path, 'utf8')) as {
    clusters: { cluster: Record<string, string> }[];
    users: { user: Record<string, string> }[];
  };
  const inline = (o: Record<string, string>, key: string) => {
    if (!o[key]) return;
    o[`${key}-data`] = readFileSync(o[key]!).toString('base64');
    delete o[key];
  };
  for (const c of kc.clusters) inline(c.cluster, 'certificate-authority');
  for (const u of kc.users) for (const key of ['client-certificate', 'client-key']) inline(u.user, key);
  const out = join(home, 'kubeconfig');
  writeFileSync(out, stringify(kc), { mode: 0o600 });
  chownSync(out, 1000, 1000);
  return out;
}

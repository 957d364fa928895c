// Orchestration overhead per job, Kubernetes executor vs local executor, side by side in one run.
// Each job is a zero-work job through the activity's own code path (runJobToCompletion): the job runner
// (`python -m hanzo_ml job`) starts, reads its envelope, runs a tool that does nothing but note the time, uploads
// its result and exits. Reported per executor (median, p90): activity start -> job created, -> job running
// (pod Running / process started), and tool exit -> activity complete (runner upload, exit, our poll, result read).
// The Kubernetes side is the test control plane (real API server, scheduler, controller-manager, KWOK nodes) with
// the kubelet stand-in running pods as local processes, and moto_server as S3.
//
//   npx tsx bench/cluster/overhead.ts [--jobs 100]
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { MockActivityEnvironment } from '@temporalio/testing';
import { Watch } from '@kubernetes/client-node';
import { loadConfig, repoRoot } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { FileObjectStore, S3ObjectStore, type ObjectStore } from '../../lib/object-store.js';
import { LocalExecutor } from '../../jobs/executor/local.js';
import { KubernetesExecutor } from '../../jobs/executor/kubernetes.js';
import type { JobExecutor, JobRequest, JobState } from '../../jobs/executor/types.js';
import { localJobEnvironment } from '../../jobs/environment.js';
import { defineJob } from '../../jobs/definition.js';
import { runJobToCompletion } from '../../activities/run-job.js';
import type { ActivityDeps } from '../../activities/deps.js';
import { CandleReportSchema } from '../../contracts/candle-report.js';
import { startTestCluster } from '../../test/support/cluster/control-plane.js';
import { freePort } from '../../test/support/ports.js';

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};

interface Sample {
  created_ms: number;
  running_ms: number;
  exit_to_complete_ms: number;
  total_ms: number;
}

/** A tool that does nothing: it notes when it ended and prints a passing report, as the Candle tool would. */
function noopTool(dir: string): { path: string; endedFile: string } {
  const endedFile = join(dir, 'tool-ended');
  const path = join(dir, 'noop-tool.sh');
  writeFileSync(path, `#!/bin/sh\nnode -e 'process.stdout.write(String(Date.now()))' > ${endedFile}.tmp && mv ${endedFile}.tmp ${endedFile}\necho '{"ok":true,"command":"validate","model_dir":"none","checks":[],"perplexity":null,"quantization":null,"outputs":[],"error":null}'\n`);
  chmodSync(path, 0o755);
  return { path, endedFile };
}

/** Wraps an executor to time when the job was created and when it was first seen running. */
function timed(inner: JobExecutor, marks: { created?: number; running?: number }, runningSeen?: () => number | undefined): JobExecutor {
  return {
    kind: inner.kind,
    machineGpus: inner.machineGpus,
    validate: (j) => inner.validate(j),
    stop: (j, g) => inner.stop(j, g),
    logTail: (j, n) => inner.logTail(j, n),
    async startOrAttach(j: JobRequest): Promise<JobState> {
      const s = await inner.startOrAttach(j);
      marks.created ??= Date.now();
      if (inner.kind === 'local') marks.running ??= Date.now(); // the process has started when this returns
      return s;
    },
    async state(j: JobRequest): Promise<JobState> {
      const s = await inner.state(j);
      const seen = runningSeen?.();
      if (seen !== undefined) marks.running ??= seen;
      return s;
    },
  };
}

async function runJobs(label: string, n: number, deps: Omit<ActivityDeps, 'executor'>, executor: JobExecutor, endedFile: string, podRunningAt: Map<string, number>): Promise<Sample[]> {
  const samples: Sample[] = [];
  for (let i = 0; i < n; i++) {
    const name = `bench-${label}-${i}`;
    const marks: { created?: number; running?: number } = {};
    const ex = timed(executor, marks, () => podRunningAt.get(name));
    const t0 = Date.now();
    await new MockActivityEnvironment().run(() =>
      runJobToCompletion({ ...deps, executor: ex } as ActivityDeps, {
        job: defineJob({ name, kind: 'candle', organizationId: 'bench', tool: 'candle', spec: {}, args: ['validate', '--json'] }),
        resultSchema: CandleReportSchema,
        pollMs: 200,
      }),
    );
    const done = Date.now();
    const ended = Number(readFileSync(endedFile, 'utf8'));
    samples.push({ created_ms: (marks.created ?? done) - t0, running_ms: (marks.running ?? done) - t0, exit_to_complete_ms: done - ended, total_ms: done - t0 });
    if ((i + 1) % 10 === 0) process.stderr.write(`${label}: ${i + 1}/${n}\n`);
  }
  return samples;
}

const quantile = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
};

function summary(samples: Sample[]): Record<string, { p50: number; p90: number }> {
  const keys = ['created_ms', 'running_ms', 'exit_to_complete_ms', 'total_ms'] as const;
  return Object.fromEntries(keys.map((k) => [k, { p50: quantile(samples.map((s) => s[k]), 0.5), p90: quantile(samples.map((s) => s[k]), 0.9) }]));
}

async function main(): Promise<void> {
  const n = arg('jobs', 100);
  const dir = mkdtempSync(join(tmpdir(), 'hanzo-ml-bench-cluster-'));
  mkdirSync(join(dir, 'logs'), { recursive: true });
  const tool = noopTool(dir);
  const loaded = loadConfig({ HANZO_ML_HOME: dir, HANZO_ML_LOGGING_LEVEL: 'warn' });
  const log = createLogger({ level: 'warn', format: 'text' });
  const base = { db: null as never, config: loaded.config, home: dir, bootstrap: loaded.bootstrap, log, trackingUri: 'http://127.0.0.1:1', jobSecrets: async () => ({}) };

  // Local: file:// objects, a process per job.
  const localStore: ObjectStore = new FileObjectStore(join(dir, 'objects'));
  const local = new LocalExecutor({ workRoot: join(dir, 'work'), python: loaded.bootstrap.python, env: { ...localJobEnvironment(loaded), HANZO_ML_CANDLE: tool.path } });
  const localSamples = await runJobs('local', n, { ...base, store: localStore }, local, tool.endedFile, new Map());

  // Kubernetes: S3 (moto_server), a Job per job on the test control plane.
  const s3Port = await freePort();
  const moto = spawn(loaded.bootstrap.moto_server!, ['-H', '127.0.0.1', '-p', String(s3Port)], { stdio: 'ignore' });
  const image = 'hanzoai/ml-trainer:bench';
  const cluster = await startTestCluster({
    nodes: [{ name: 'bench-node', gpus: 8 }],
    images: [image],
    imageEnv: { [image]: { PATH: `${join(loaded.bootstrap.python, '..')}:${process.env.PATH}`, PYTHONPATH: join(repoRoot, 'trainer'), HANZO_ML_CANDLE: tool.path } },
    // The zero-work tool is a script on this machine: the pods run as processes, as the local executor's jobs do
    // (bench/cluster/pods.ts measures what running from the image adds).
    containerRuntime: { kind: 'process', reason: 'the benchmark compares executors on the same processes' },
  });
  try {
    await cluster.createNamespace('bench-bench'); // the namespace of organization bench (prefix bench)
    const storage = { ...loaded.config.storage, endpoint: `http://127.0.0.1:${s3Port}`, access_key: 'bench', secret_key: 'bench' };
    const s3Store = await S3ObjectStore.create(storage);
    const podRunningAt = new Map<string, number>();
    const watch = await new Watch(cluster.kubeConfig).watch('/api/v1/namespaces/bench-bench/pods', {}, (_type, pod: { metadata?: { labels?: Record<string, string> }; status?: { phase?: string } }) => {
      const job = pod.metadata?.labels?.['hanzo-ml.dev/job'];
      if (job && pod.status?.phase === 'Running' && !podRunningAt.has(job)) podRunningAt.set(job, Date.now());
    }, () => undefined);
    const k8s = new KubernetesExecutor({ kubeConfig: cluster.kubeConfig, namespacePrefix: 'bench', images: { trainer: image }, imagePullPolicy: 'IfNotPresent', gracePeriodSeconds: 30, cpu: '100m', memory: '128Mi', gpuTypes: [], quotas: {}, log });
    const k8sSamples = await runJobs('k8s', n, { ...base, config: { ...loaded.config, storage }, store: s3Store, jobSecrets: async () => ({ AWS_ACCESS_KEY_ID: 'bench', AWS_SECRET_ACCESS_KEY: 'bench' }) }, k8s, tool.endedFile, podRunningAt);
    watch.abort();
    const results = { jobs: n, machine: '2 cores, 24 GiB', local: summary(localSamples), kubernetes: summary(k8sSamples) };
    const out = join(repoRoot, 'bench', 'results');
    writeFileSync(join(out, 'cluster.json'), JSON.stringify(results, null, 2) + '\n');
    const row = (what: string, k: keyof Sample) =>
      `| ${what} | ${results.local[k]!.p50} / ${results.local[k]!.p90} | ${results.kubernetes[k]!.p50} / ${results.kubernetes[k]!.p90} |`;
    writeFileSync(
      join(out, 'cluster.md'),
      [
        `# Orchestration overhead per job: Kubernetes executor vs local executor`,
        '',
        `${n} zero-work jobs each, run one after another through the activity code path (runJobToCompletion, poll 200 ms). ms, p50 / p90.`,
        '`npx tsx bench/cluster/overhead.ts`',
        '',
        '| from activity start to ... | local | kubernetes |',
        '| --- | ---: | ---: |',
        row('job created', 'created_ms'),
        row('job running (process started / pod Running)', 'running_ms'),
        row('activity complete (whole job)', 'total_ms'),
        '',
        '| from tool exit to activity complete | local | kubernetes |',
        '| --- | ---: | ---: |',
        row('runner upload + exit + poll + result read', 'exit_to_complete_ms'),
        '',
      ].join('\n'),
    );
    process.stdout.write(JSON.stringify(results, null, 2) + '\n');
  } finally {
    await cluster.stop();
    moto.kill('SIGTERM');
  }
}

void main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

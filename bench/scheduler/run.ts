// Fair-share GPU scheduling at cluster scale, simulated: a real control plane and a real Kueue, KWOK nodes of 8 GPUs
// whose pods KWOK plays itself (Running, then Succeeded after the job's drawn duration: no process runs), and Jobs
// created by our KubernetesExecutor exactly as the worker creates them (suspended, queue and priority labels).
// Three organizations with quotas, weights and priorities submit a mix of 1-GPU, 8-GPU and 32-GPU (4 pods x 8,
// all-or-nothing) jobs. Reported: admissions per second, GPU utilization while work is queued, each organization's
// share of GPU-seconds against its quota share (fair-share error), preemptions and the GPU-seconds they cost, gang
// admission waits and partial gangs, and our executor's own time per job (Secret + Job creation).
//
// What it does not cover: the API -> Temporal workflow -> activity part of the path (bench/cluster/overhead.ts
// measures that per job); 2 cores cannot drive 10,000 workflows and a 1,000-node control plane at once.
//
//   npx tsx bench/scheduler/run.ts [--nodes 200] [--jobs 2000] [--duration-s 30]
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BatchV1Api, CustomObjectsApi } from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { repoRoot } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { ConfigSchema } from '../../contracts/config.js';
import { KubernetesExecutor } from '../../activities/executor/kubernetes.js';
import type { JobRequest } from '../../activities/executor/types.js';
import { applyKueueObjects } from '../../scheduling/kueue-apply.js';
import { startTestCluster } from '../../test/support/cluster/control-plane.js';

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const NODES = arg('nodes', 200);
const JOBS = arg('jobs', 2000);
const MEAN_S = arg('duration-s', 30);
const NS = 'bench-jobs';
const GPUS = NODES * 8;

// Quota shares 50/30/20 of the cluster; every organization may borrow (preemptible), so an idle share is lent.
const ORGS = [
  { id: 'research', share: 0.5, priority: 'high', submitShare: 0.34 },
  { id: 'engineering', share: 0.3, priority: 'medium', submitShare: 0.33 },
  { id: 'community', share: 0.2, priority: 'low', submitShare: 0.33 },
] as const;

/** Deterministic draws (mulberry32), so two runs submit the same jobs. */
function rng(seed: number): () => number {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface SimJob {
  name: string;
  org: string;
  nodes: number;
  gpusPerNode: number;
  durationS: number;
  createdAt?: number;
  createMs?: number;
}

/** 70% 1-GPU, 25% 8-GPU, 5% 32-GPU gangs (4 x 8); durations uniform in [0.5, 1.5] x the mean. */
function drawJobs(): SimJob[] {
  const r = rng(7);
  return Array.from({ length: JOBS }, (_, i) => {
    const u = r();
    const org = u < ORGS[0].submitShare ? ORGS[0] : u < ORGS[0].submitShare + ORGS[1].submitShare ? ORGS[1] : ORGS[2];
    const k = r();
    const [nodes, gpusPerNode] = k < 0.7 ? [1, 1] : k < 0.95 ? [1, 8] : [4, 8];
    return { name: `sim-${i}`, org: org.id, nodes, gpusPerNode, durationS: Math.round(MEAN_S * (0.5 + r())) };
  });
}

/** KWOK's pod stages from its module (created, ready, deleted when deleted) and a completion after BENCH_DURATION. */
function podStages(): Record<string, unknown>[] {
  const dir = join(execFileSync('go', ['env', 'GOMODCACHE'], { encoding: 'utf8' }).trim(), 'sigs.k8s.io/kwok@v0.8.0/kustomize/stage/pod/general');
  const load = (f: string) => parseAllDocuments(readFileSync(join(dir, f), 'utf8')).map((d) => d.toJS() as Record<string, unknown>);
  const complete = load('pod-complete.yaml')[0] as { spec: { delay: Record<string, unknown> } };
  complete.spec.delay = { durationMilliseconds: 1000, durationFrom: { expressionFrom: '.spec.containers.[0].env.[] | select( .name == "BENCH_DURATION" ) | .value' } };
  return [...load('pod-create.yaml'), ...load('pod-ready.yaml'), complete, ...load('pod-delete.yaml')];
}

function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

interface Workload {
  metadata: { name: string; labels?: Record<string, string>; ownerReferences?: { name: string }[] };
  spec: { queueName?: string };
  status?: { conditions?: { type: string; status: string; reason?: string; lastTransitionTime?: string }[] };
}

async function main(): Promise<void> {
  const t0 = Date.now();
  const cluster = await startTestCluster({
    nodes: Array.from({ length: NODES }, (_, i) => ({ name: `sim-${i}`, gpus: 8, gpuType: 'a100', cpu: '64', memory: '512Gi' })),
    kueue: true,
    simulatedPodStages: podStages(),
  });
  const startS = (Date.now() - t0) / 1000;
  console.error(`cluster of ${NODES} nodes with Kueue up in ${startS.toFixed(1)} s`);
  try {
    const quotas = Object.fromEntries(ORGS.map((o) => [o.id, { max_gpus: Math.round(GPUS * o.share), max_concurrent_jobs: JOBS, priority: o.priority, preemptible: true }]));
    const config = ConfigSchema.parse({ storage: { endpoint: 'http://127.0.0.1:1' }, scheduler: { executor: 'kubernetes', namespace: NS, gpu_types: ['a100'], quotas } });
    await applyKueueObjects(config, cluster.kubeConfig);
    const executor = new KubernetesExecutor({
      kubeConfig: cluster.kubeConfig, namespace: NS, image: 'busybox:1.36', imagePullPolicy: 'IfNotPresent', storageSecret: 'storage',
      gracePeriodSeconds: 0, cpu: '100m', memory: '64Mi', gpuTypes: ['a100'], quotas: config.scheduler.quotas, command: () => ['true'], log: createLogger({ level: 'error', format: 'text' }),
    });
    const custom = cluster.kubeConfig.makeApiClient(CustomObjectsApi);
    const batch = cluster.kubeConfig.makeApiClient(BatchV1Api);
    const jobs = drawJobs();
    const request = (j: SimJob): JobRequest => ({
      name: j.name, envelopeUri: 'file:///unused', organizationId: j.org, kind: 'sim', priority: null,
      resources: { nodes: j.nodes, processes: 1, gpus_per_node: j.gpusPerNode, gpu_type: 'a100', image: 'busybox:1.36', cpu: '100m', memory: '64Mi' },
      env: { BENCH_DURATION: `${j.durationS}s` }, secretEnv: {},
    });

    // Submit with 16 in flight: what a fleet of workers' job activities does.
    const submitStart = Date.now();
    let next = 0;
    await Promise.all(Array.from({ length: 16 }, async () => {
      while (next < jobs.length) {
        const j = jobs[next++]!;
        const t = Date.now();
        j.createdAt = t;
        await executor.startOrAttach(request(j));
        j.createMs = Date.now() - t;
      }
    }));
    const submitS = (Date.now() - submitStart) / 1000;
    console.error(`${JOBS} jobs created in ${submitS.toFixed(1)} s`);

    // Sample every 2 s until every workload finished: per-organization GPUs in use, pending count.
    const samples: { t: number; used: Record<string, number>; pending: number }[] = [];
    const gpusOf = new Map(jobs.map((j) => [j.name, j.nodes * j.gpusPerNode]));
    const orgOf = new Map(jobs.map((j) => [j.name, j.org]));
    let workloads: Workload[] = [];
    const deadline = Date.now() + 60 * 60_000;
    for (;;) {
      workloads = ((await custom.listNamespacedCustomObject({ group: 'kueue.x-k8s.io', version: 'v1beta2', namespace: NS, plural: 'workloads' })) as { items: Workload[] }).items;
      const cond = (w: Workload, type: string) => w.status?.conditions?.find((c) => c.type === type && c.status === 'True');
      const used: Record<string, number> = Object.fromEntries(ORGS.map((o) => [o.id, 0]));
      let pending = 0;
      let finished = 0;
      for (const w of workloads) {
        const job = w.metadata.ownerReferences?.[0]?.name ?? '';
        if (cond(w, 'Finished')) finished++;
        else if (cond(w, 'Admitted')) used[orgOf.get(job) ?? '']! += gpusOf.get(job) ?? 0;
        else pending++;
      }
      samples.push({ t: (Date.now() - submitStart) / 1000, used, pending });
      if (finished >= JOBS || Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 2000));
    }

    // Admission times and preemptions from the Workloads' conditions; partial gangs from the Jobs' pods.
    const admittedAt: number[] = [];
    const gangWaits: number[] = [];
    let preemptions = 0;
    for (const w of workloads) {
      const job = jobs.find((j) => j.name === w.metadata.ownerReferences?.[0]?.name);
      const admitted = w.status?.conditions?.find((c) => c.type === 'Admitted');
      if (job && admitted?.lastTransitionTime) {
        admittedAt.push(Date.parse(admitted.lastTransitionTime));
        if (job.nodes > 1) gangWaits.push((Date.parse(admitted.lastTransitionTime) - job.createdAt!) / 1000);
      }
      if (w.status?.conditions?.some((c) => c.type === 'Evicted' && c.reason === 'Preempted')) preemptions++;
    }
    const busy = samples.filter((s) => s.pending > 0);
    const utilization = busy.map((s) => Object.values(s.used).reduce((a, b) => a + b, 0) / GPUS);
    const gpuSeconds = Object.fromEntries(ORGS.map((o) => [o.id, 0]));
    for (let i = 1; i < busy.length; i++) for (const o of ORGS) gpuSeconds[o.id]! += busy[i - 1]!.used[o.id]! * (busy[i]!.t - busy[i - 1]!.t);
    const totalGpuS = Object.values(gpuSeconds).reduce((a, b) => a + b, 0) || 1;
    const shares = ORGS.map((o) => ({ org: o.id, target: o.share, actual: gpuSeconds[o.id]! / totalGpuS }));
    const fairShareError = Math.max(...shares.map((s) => Math.abs(s.actual - s.target)));
    const sorted = admittedAt.sort((a, b) => a - b);
    const admissionRate = sorted.length > 1 ? sorted.length / ((sorted.at(-1)! - sorted[0]!) / 1000) : NaN;
    const gangs = jobs.filter((j) => j.nodes > 1).map((j) => j.name);
    let partialGangs = 0;
    for (const name of gangs) {
      const job = await batch.readNamespacedJob({ name, namespace: NS });
      const done = (job.status?.succeeded ?? 0) + (job.status?.failed ?? 0);
      if (done > 0 && done < 4) partialGangs++;
    }
    const result = {
      setup: { nodes: NODES, gpus: GPUS, jobs: JOBS, mean_duration_s: MEAN_S, mix: '70% 1 GPU, 25% 8 GPUs, 5% 32 GPUs (4 x 8 gang)', cluster_start_s: startS, machine: '2 cores, 24 GiB' },
      job_creation: { seconds: submitS, per_second: JOBS / submitS, executor_ms_p50: percentile(jobs.map((j) => j.createMs!), 50), executor_ms_p90: percentile(jobs.map((j) => j.createMs!), 90) },
      admissions_per_second: admissionRate,
      utilization_while_queued: { mean: utilization.reduce((a, b) => a + b, 0) / (utilization.length || 1), p10: percentile(utilization, 10), samples: utilization.length },
      fair_share: { shares, max_error: fairShareError },
      preemptions,
      gang: { count: gangs.length, wait_s_p50: percentile(gangWaits, 50), wait_s_p90: percentile(gangWaits, 90), partial: partialGangs },
      timeline: samples.map((s) => ({ t: Math.round(s.t), used: Object.values(s.used).reduce((a, b) => a + b, 0), pending: s.pending })),
    };
    const out = join(repoRoot, 'bench', 'results');
    mkdirSync(out, { recursive: true });
    writeFileSync(join(out, 'scheduler.json'), JSON.stringify(result, null, 2) + '\n');
    writeFileSync(join(out, 'scheduler.md'), markdown(result));
    console.log(markdown(result));
  } finally {
    await cluster.stop();
  }
}

function markdown(r: any): string { // eslint-disable-line @typescript-eslint/no-explicit-any
  const f = (x: number, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : 'n/a');
  return [
    `# Fair-share GPU scheduling (Kueue v0.19.2, simulated pods)`,
    '',
    `${r.setup.nodes} KWOK nodes x 8 GPUs (${r.setup.gpus} GPUs), ${r.setup.jobs} jobs (${r.setup.mix}), durations uniform 0.5-1.5 x ${r.setup.mean_duration_s} s, 3 organizations with quota shares 50/30/20, all preemptible. Machine: ${r.setup.machine}. \`npx tsx bench/scheduler/run.ts --nodes ${r.setup.nodes} --jobs ${r.setup.jobs} --duration-s ${r.setup.mean_duration_s}\``,
    '',
    '| measure | value | goal |',
    '| --- | --- | --- |',
    `| Jobs created by our executor | ${f(r.job_creation.per_second, 1)}/s (p50 ${f(r.job_creation.executor_ms_p50, 0)} ms, p90 ${f(r.job_creation.executor_ms_p90, 0)} ms per job) | |`,
    `| Kueue admissions | ${f(r.admissions_per_second, 1)}/s | >= 50/s |`,
    `| GPU utilization while work is queued | mean ${f(r.utilization_while_queued.mean * 100, 1)}%, p10 ${f(r.utilization_while_queued.p10 * 100, 1)}% | > 95% |`,
    `| Fair-share error (max over organizations) | ${f(r.fair_share.max_error * 100, 1)} pts (${r.fair_share.shares.map((s: any) => `${s.org} ${f(s.actual * 100, 1)}% vs ${f(s.target * 100, 0)}%`).join(', ')}) | < 5 pts |`, // eslint-disable-line @typescript-eslint/no-explicit-any
    `| Preemptions | ${r.preemptions} | |`,
    `| Gang (32-GPU) admission wait | p50 ${f(r.gang.wait_s_p50, 1)} s, p90 ${f(r.gang.wait_s_p90, 1)} s over ${r.gang.count} gangs | |`,
    `| Partial gangs | ${r.gang.partial} | 0 |`,
    '',
  ].join('\n');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});

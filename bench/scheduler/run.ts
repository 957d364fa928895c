// Fair-share GPU scheduling at cluster scale, simulated: a real control plane and a real Kueue, KWOK nodes of 8 GPUs
// whose pods KWOK plays itself (Running, then Succeeded after the job's drawn duration: no process runs), and Jobs
// created by our KubernetesExecutor exactly as the worker creates them (suspended, queue and priority labels).
// Three organizations with quotas, weights and priorities submit a mix of 1-GPU, 8-GPU and 32-GPU (4 pods x 8,
// all-or-nothing) jobs.
//
// Two phases. A backlog (--backlog, a fraction of the jobs) is created while every ClusterQueue is held
// (stopPolicy: Hold), then released at once: the rate at which Kueue admits from a full backlog onto an empty
// cluster is its admission throughput, not our job-creation rate. The remaining jobs then stream in while the first
// ones run. Reported: admission throughput, GPU utilization while work is queued, each organization's share of
// GPU-seconds against its quota share while every organization has work waiting (fair-share error; when one runs
// dry, others borrow its quota, which is the point of a cohort), preemptions and the GPU-seconds they cost, gang
// admission waits and partial gangs, and our executor's own time per job (Secret + Job creation).
//
// What it does not cover: the API -> Temporal workflow -> activity part of the path (bench/cluster/overhead.ts
// measures that per job); 2 cores cannot drive 10,000 workflows and a 1,000-node control plane at once.
//
//   npx tsx bench/scheduler/run.ts [--nodes 200] [--jobs 2000] [--duration-s 30] [--backlog 0.25]
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BatchV1Api, CustomObjectsApi, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { repoRoot } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { ConfigSchema } from '../../contracts/config.js';
import { KubernetesExecutor } from '../../jobs/executor/kubernetes.js';
import type { JobRequest } from '../../jobs/executor/types.js';
import { applyClusterObjects } from '../../jobs/queue/kueue-apply.js';
import { jobNamespace } from '../../jobs/queue/job-namespace.js';
import { clusterQueueName } from '../../jobs/queue/kueue-objects.js';
import { startTestCluster } from '../../test/support/cluster/control-plane.js';

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const NODES = arg('nodes', 200);
const JOBS = arg('jobs', 2000);
const MEAN_S = arg('duration-s', 30);
const BACKLOG = arg('backlog', 0.25);
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

interface Condition { type: string; status: string; reason?: string; lastTransitionTime?: string }
interface Workload {
  metadata: { name: string; ownerReferences?: { name: string }[] };
  status?: { conditions?: Condition[]; schedulingStats?: { evictions?: { reason: string; count: number }[] } };
}

/** What the sampler knows of one job across samples: admission times, evictions, the GPU-seconds evictions cost. */
interface JobTrack { admittedAt?: number; firstAdmittedAt?: number; evictions: number; lostGpuS: number; finished: boolean }

const cond = (w: Workload, type: string): Condition | undefined => w.status?.conditions?.find((c) => c.type === type && c.status === 'True');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Hold or release every organization's ClusterQueue (no admissions while held; workloads still queue). */
async function setStopPolicy(custom: CustomObjectsApi, policy: 'Hold' | 'None'): Promise<void> {
  for (const o of ORGS) {
    await custom.patchClusterCustomObject(
      { group: 'kueue.x-k8s.io', version: 'v1beta2', plural: 'clusterqueues', name: clusterQueueName(o.id), body: { spec: { stopPolicy: policy } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
  }
}

async function main(): Promise<void> {
  const t0 = Date.now();
  const cluster = await startTestCluster({
    nodes: Array.from({ length: NODES }, (_, i) => ({ name: `sim-${i}`, gpus: 8, gpuType: 'a100', cpu: '64', memory: '512Gi' })),
    kueue: { logLevel: 'info' },
    simulatedPodStages: podStages(),
  });
  const startS = (Date.now() - t0) / 1000;
  console.error(`cluster of ${NODES} nodes with Kueue up in ${startS.toFixed(1)} s`);
  try {
    const quotas = Object.fromEntries(ORGS.map((o) => [o.id, { max_gpus: Math.round(GPUS * o.share), max_concurrent_jobs: JOBS, priority: o.priority, preemptible: true }]));
    const config = ConfigSchema.parse({ storage: { endpoint: 'http://127.0.0.1:1' }, scheduler: { executor: 'kubernetes', namespace: NS, gpu_types: ['a100'], quotas } });
    await applyClusterObjects(config, cluster.kubeConfig);
    const executor = new KubernetesExecutor({
      kubeConfig: cluster.kubeConfig, namespacePrefix: NS, images: { trainer: 'busybox:1.36' }, imagePullPolicy: 'IfNotPresent',
      gracePeriodSeconds: 0, cpu: '100m', memory: '64Mi', gpuTypes: ['a100'], quotas: config.scheduler.quotas, command: () => ['true'], log: createLogger({ level: 'error', format: 'text' }),
    });
    const custom = cluster.kubeConfig.makeApiClient(CustomObjectsApi);
    const batch = cluster.kubeConfig.makeApiClient(BatchV1Api);
    const jobs = drawJobs();
    const byName = new Map(jobs.map((j) => [j.name, j]));
    const request = (j: SimJob): JobRequest => ({
      name: j.name, envelopeUri: 'file:///unused', organizationId: j.org, kind: 'sim', priority: null,
      resources: { nodes: j.nodes, processes: 1, gpus_per_node: j.gpusPerNode, gpu_type: 'a100', image: null, cpu: '100m', memory: '64Mi' },
      env: { BENCH_DURATION: `${j.durationS}s` }, secretEnv: {},
    });
    // 16 in flight: what a fleet of workers' job activities does.
    const create = async (list: SimJob[]): Promise<void> => {
      let next = 0;
      await Promise.all(Array.from({ length: 16 }, async () => {
        while (next < list.length) {
          const j = list[next++]!;
          const t = Date.now();
          j.createdAt = t;
          await executor.startOrAttach(request(j));
          j.createMs = Date.now() - t;
        }
      }));
    };

    // Phase 1: the backlog, created while the queues are held, then released at once.
    const backlog = jobs.slice(0, Math.round(JOBS * BACKLOG));
    await setStopPolicy(custom, 'Hold');
    const backlogStart = Date.now();
    await create(backlog);
    const backlogCreateS = (Date.now() - backlogStart) / 1000;
    console.error(`${backlog.length} backlog jobs created (held) in ${backlogCreateS.toFixed(1)} s`);
    await waitForWorkloads(custom, backlog.length);
    for (const j of backlog) j.createdAt = Date.now(); // their wait counts from the release, not from creation
    await setStopPolicy(custom, 'None');
    const releasedAt = Date.now();

    // Phase 2: the rest streams in while the sampler watches every Workload.
    const streamStart = Date.now();
    let streamS = 0;
    const streaming = create(jobs.slice(backlog.length)).then(() => { streamS = (Date.now() - streamStart) / 1000; });
    const samples: { t: number; used: Record<string, number>; pending: Record<string, number> }[] = [];
    const track = new Map<string, JobTrack>();
    const interval = Math.max(2000, Math.round(JOBS / 2000) * 1000); // a list of 10,000 Workloads is ~30 MB
    const deadline = Date.now() + 60 * 60_000;
    for (;;) {
      const workloads = ((await custom.listClusterCustomObject({ group: 'kueue.x-k8s.io', version: 'v1beta2', plural: 'workloads' })) as { items: Workload[] }).items;
      const used: Record<string, number> = Object.fromEntries(ORGS.map((o) => [o.id, 0]));
      const pending: Record<string, number> = Object.fromEntries(ORGS.map((o) => [o.id, 0]));
      let finished = 0;
      for (const w of workloads) {
        const job = byName.get(w.metadata.ownerReferences?.[0]?.name ?? '');
        if (!job) continue;
        const t = track.get(job.name) ?? { evictions: 0, lostGpuS: 0, finished: false };
        track.set(job.name, t);
        observe(t, w, job);
        if (t.finished) finished++;
        else if (t.admittedAt !== undefined) used[job.org]! += job.nodes * job.gpusPerNode;
        else pending[job.org]!++;
      }
      const notYetCreated = jobs.length - workloads.length;
      samples.push({ t: (Date.now() - releasedAt) / 1000, used, pending: { ...pending, unsubmitted: notYetCreated } });
      if (finished >= JOBS || Date.now() > deadline) break;
      await sleep(interval);
    }
    await streaming;
    const result = await summarize({ jobs, track, samples, batch, startS, backlog: backlog.length, backlogCreateS, streamS, releasedAt });
    const out = join(repoRoot, 'bench', 'results');
    mkdirSync(out, { recursive: true });
    writeFileSync(join(out, 'scheduler.json'), JSON.stringify(result, null, 2) + '\n');
    writeFileSync(join(out, 'scheduler.md'), markdown(result));
    console.log(markdown(result));
  } finally {
    await cluster.stop();
  }
}

/** Kueue creates a Workload per Job asynchronously; the release waits until the whole backlog is queued. */
async function waitForWorkloads(custom: CustomObjectsApi, n: number): Promise<void> {
  for (;;) {
    const list = (await custom.listClusterCustomObject({ group: 'kueue.x-k8s.io', version: 'v1beta2', plural: 'workloads' })) as { items: unknown[] };
    if (list.items.length >= n) return;
    await sleep(1000);
  }
}

/**
 * One Workload's state into its track: an admission (the time Kueue set Admitted), an eviction (admitted before,
 * not now, not finished: the GPU-seconds since its admission are lost, since simulated pods keep no checkpoint),
 * completion.
 */
function observe(t: JobTrack, w: Workload, job: SimJob): void {
  if (cond(w, 'Finished')) {
    t.finished = true;
    return;
  }
  const admitted = cond(w, 'Admitted');
  if (admitted) {
    if (t.admittedAt === undefined) {
      t.admittedAt = Date.parse(admitted.lastTransitionTime ?? '') || Date.now();
      t.firstAdmittedAt ??= t.admittedAt;
    }
  } else if (t.admittedAt !== undefined) {
    const evicted = w.status?.conditions?.find((c) => c.type === 'Evicted' && c.status === 'True');
    const at = Date.parse(evicted?.lastTransitionTime ?? '') || Date.now();
    t.evictions++;
    t.lostGpuS += Math.max(0, (at - t.admittedAt) / 1000) * job.nodes * job.gpusPerNode;
    t.admittedAt = undefined;
  }
}

interface Summary {
  jobs: SimJob[]; track: Map<string, JobTrack>; samples: { t: number; used: Record<string, number>; pending: Record<string, number> }[];
  batch: BatchV1Api; startS: number; backlog: number; backlogCreateS: number; streamS: number; releasedAt: number;
}

async function summarize(s: Summary) {
  const { jobs, track, samples } = s;
  const totalUsed = (x: (typeof samples)[number]) => ORGS.reduce((a, o) => a + x.used[o.id]!, 0);
  const queued = (x: (typeof samples)[number]) => ORGS.some((o) => x.pending[o.id]! > 0);
  const busy = samples.filter(queued);
  const utilization = busy.map((x) => totalUsed(x) / GPUS);

  // Admission throughput from the held backlog: admissions of backlog jobs per second from the release until the
  // cluster first reports >= 95% of its GPUs in use (or the backlog is all admitted).
  const backlogNames = new Set(jobs.slice(0, s.backlog).map((j) => j.name));
  const backlogAdmits = [...track.entries()].filter(([n, t]) => backlogNames.has(n) && t.firstAdmittedAt !== undefined).map(([, t]) => t.firstAdmittedAt!).sort((a, b) => a - b);
  const full = samples.find((x) => totalUsed(x) >= 0.95 * GPUS);
  const fillEnd = full ? s.releasedAt + full.t * 1000 : backlogAdmits.at(-1) ?? s.releasedAt;
  const inFill = backlogAdmits.filter((t) => t <= fillEnd);
  // lastTransitionTime has 1 s resolution: the last admission happened before its second ended (a lower bound on the rate).
  const fillS = inFill.length > 0 ? Math.max(1, (inFill.at(-1)! + 1000 - s.releasedAt) / 1000) : NaN;
  // Peak: the most admissions (any job) in a 10 s window.
  const allAdmits = [...track.values()].filter((t) => t.firstAdmittedAt !== undefined).map((t) => t.firstAdmittedAt!).sort((a, b) => a - b);
  let peak = 0;
  for (let i = 0, j = 0; i < allAdmits.length; i++) {
    while (allAdmits[i]! - allAdmits[j]! > 10_000) j++;
    peak = Math.max(peak, i - j + 1);
  }

  // Fair share: GPU-seconds per organization over the intervals in which every organization had work waiting.
  const contended = samples.filter((x) => ORGS.every((o) => x.pending[o.id]! > 0));
  const gpuSeconds = Object.fromEntries(ORGS.map((o) => [o.id, 0]));
  for (let i = 1; i < samples.length; i++) {
    const prev = samples[i - 1]!;
    if (!ORGS.every((o) => prev.pending[o.id]! > 0)) continue;
    for (const o of ORGS) gpuSeconds[o.id]! += prev.used[o.id]! * (samples[i]!.t - prev.t);
  }
  const totalGpuS = Object.values(gpuSeconds).reduce((a, b) => a + b, 0) || 1;
  const shares = ORGS.map((o) => ({ org: o.id, priority: o.priority, target: o.share, actual: gpuSeconds[o.id]! / totalGpuS }));

  const tracks = [...track.values()];
  const gangs = jobs.filter((j) => j.nodes > 1);
  const gangWaits = gangs.map((j) => track.get(j.name)?.firstAdmittedAt).map((t, i) => (t === undefined ? NaN : (t - gangs[i]!.createdAt!) / 1000)).filter(Number.isFinite);
  let partial = 0;
  for (const j of gangs) {
    const job = await s.batch.readNamespacedJob({ name: j.name, namespace: jobNamespace(NS, j.org) });
    const done = (job.status?.succeeded ?? 0) + (job.status?.failed ?? 0);
    if (done > 0 && done < j.nodes) partial++;
  }
  const creates = jobs.map((j) => j.createMs!);
  return {
    setup: { nodes: NODES, gpus: GPUS, jobs: JOBS, backlog: s.backlog, mean_duration_s: MEAN_S, mix: '70% 1 GPU, 25% 8 GPUs, 5% 32 GPUs (4 x 8 gang)', orgs: ORGS, cluster_start_s: s.startS, sample_interval_s: samples.length > 1 ? samples[1]!.t - samples[0]!.t : NaN, machine: '2 cores, 24 GiB' },
    job_creation: { per_second: JOBS / (s.backlogCreateS + s.streamS), executor_ms_p50: percentile(creates, 50), executor_ms_p90: percentile(creates, 90) },
    admission: { from_backlog_per_second: inFill.length / fillS, backlog_admitted_in_fill: inFill.length, fill_s: fillS, peak_10s_per_second: peak / 10 },
    utilization_while_queued: { mean: utilization.reduce((a, b) => a + b, 0) / (utilization.length || 1), p10: percentile(utilization, 10), samples: utilization.length },
    fair_share: { shares, max_error: Math.max(...shares.map((x) => Math.abs(x.actual - x.target))), contended_s: contended.length > 0 ? contended.at(-1)!.t - contended[0]!.t : 0 },
    preemptions: { count: tracks.reduce((a, t) => a + t.evictions, 0), jobs: tracks.filter((t) => t.evictions > 0).length, gpu_seconds_lost: tracks.reduce((a, t) => a + t.lostGpuS, 0) },
    gang: { count: gangs.length, wait_s_p50: percentile(gangWaits, 50), wait_s_p90: percentile(gangWaits, 90), partial },
    makespan_s: samples.at(-1)!.t,
    timeline: samples.map((x) => ({ t: Math.round(x.t), used: totalUsed(x), pending: ORGS.reduce((a, o) => a + x.pending[o.id]!, 0) })),
  };
}

function markdown(r: any): string { // eslint-disable-line @typescript-eslint/no-explicit-any
  const f = (x: number, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : 'n/a');
  const orgs = r.setup.orgs.map((o: any) => `${o.id} ${f(o.share * 100, 0)}% ${o.priority}`).join(', '); // eslint-disable-line @typescript-eslint/no-explicit-any
  return [
    `# Fair-share GPU scheduling (Kueue v0.19.2, simulated pods)`,
    '',
    `${r.setup.nodes} KWOK nodes x 8 GPUs (${r.setup.gpus} GPUs), ${r.setup.jobs} jobs (${r.setup.mix}), durations uniform 0.5-1.5 x ${r.setup.mean_duration_s} s. Organizations (quota share, priority; all preemptible, weight 1, one cohort): ${orgs}; each submits a third of the jobs. The first ${r.setup.backlog} jobs are created while the queues are held, then released at once; the rest stream in. Control plane up in ${f(r.setup.cluster_start_s, 0)} s; Workloads sampled every ${f(r.setup.sample_interval_s, 0)} s. Machine: ${r.setup.machine}. \`npx tsx bench/scheduler/run.ts --nodes ${r.setup.nodes} --jobs ${r.setup.jobs} --duration-s ${r.setup.mean_duration_s}\``,
    '',
    '| measure | value | goal |',
    '| --- | --- | --- |',
    `| Kueue admissions from a held backlog onto an empty cluster | ${f(r.admission.from_backlog_per_second, 1)}/s (${r.admission.backlog_admitted_in_fill} in ${f(r.admission.fill_s, 0)} s) | >= 50/s |`,
    `| Peak admissions (any 10 s window) | ${f(r.admission.peak_10s_per_second, 1)}/s | |`,
    `| Jobs created by our executor (Secret + suspended Job) | ${f(r.job_creation.per_second, 1)}/s, p50 ${f(r.job_creation.executor_ms_p50, 0)} ms, p90 ${f(r.job_creation.executor_ms_p90, 0)} ms per job | |`,
    `| GPU utilization while work is queued | mean ${f(r.utilization_while_queued.mean * 100, 1)}%, p10 ${f(r.utilization_while_queued.p10 * 100, 1)}% over ${r.utilization_while_queued.samples} samples | > 95% |`,
    `| Fair-share error while every organization has work waiting (${f(r.fair_share.contended_s, 0)} s) | ${f(r.fair_share.max_error * 100, 1)} pts (${r.fair_share.shares.map((s: any) => `${s.org} ${f(s.actual * 100, 1)}% vs ${f(s.target * 100, 0)}%`).join(', ')}) | < 5 pts |`, // eslint-disable-line @typescript-eslint/no-explicit-any
    `| Preemptions | ${r.preemptions.count} evictions of ${r.preemptions.jobs} jobs, ${f(r.preemptions.gpu_seconds_lost, 0)} GPU-seconds lost | |`,
    `| Gang (32-GPU) admission wait | p50 ${f(r.gang.wait_s_p50, 1)} s, p90 ${f(r.gang.wait_s_p90, 1)} s over ${r.gang.count} gangs | |`,
    `| Partial gangs | ${r.gang.partial} | 0 |`,
    `| Makespan (release to last job finished) | ${f(r.makespan_s, 0)} s | |`,
    '',
  ].join('\n');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});

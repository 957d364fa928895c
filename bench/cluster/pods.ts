// Per-pod overhead of running a container from its image (podman) against running its command as a local process
// (the kubelet stand-in's fallback), on the test control plane: the time from a pod's creation through the real API
// server to its phase Succeeded, for a trivial busybox `true` and the trainer's `python -m hanzo_ml --help`.
//   npx tsx bench/cluster/pods.ts [--passes 5]
// Writes bench/results/cluster-pods.{json,md}.
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, type V1Pod } from '@kubernetes/client-node';
import { loadConfig, repoRoot } from '../../lib/config.js';
import { TRAINER_IMAGE } from '../../contracts/config.js';
import { detectContainerRuntime, type ContainerRuntime } from '../../test/support/cluster/container-runtime.js';
import { startTestCluster } from '../../test/support/cluster/control-plane.js';

const passes = Number(process.argv[process.argv.indexOf('--passes') + 1] || 5) || 5;
const NS = 'bench';
const PROCESS_TRAINER = 'hanzoai/ml-trainer:process';

interface Workload {
  name: string;
  image: (mode: ContainerRuntime['kind']) => string;
  command: string[];
}
const WORKLOADS: Workload[] = [
  { name: 'busybox true', image: () => 'busybox', command: ['true'] },
  { name: 'trainer python -m hanzo_ml --help', image: (m) => (m === 'podman' ? TRAINER_IMAGE : PROCESS_TRAINER), command: ['python', '-m', 'hanzo_ml', '--help'] },
];

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

async function runMode(runtime: ContainerRuntime): Promise<Record<string, number[]>> {
  const bootstrap = loadConfig({}).bootstrap;
  const cluster = await startTestCluster({
    containerRuntime: runtime,
    images: ['busybox', PROCESS_TRAINER],
    imageEnv: runtime.kind === 'process' ? { [PROCESS_TRAINER]: { PATH: `${join(bootstrap.python, '..')}:${process.env.PATH}`, PYTHONPATH: join(repoRoot, 'trainer') } } : {},
  });
  const out: Record<string, number[]> = {};
  try {
    await cluster.createNamespace(NS);
    const core = cluster.kubeConfig.makeApiClient(CoreV1Api);
    for (const w of WORKLOADS) {
      out[w.name] = [];
      // One unmeasured pass first: the image's layers and the interpreter's files into the page cache.
      for (let i = 0; i <= passes; i++) {
        const name = `${w.name.split(' ')[0]}-${i}`;
        const body: V1Pod = { metadata: { name }, spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: w.image(runtime.kind), command: w.command }] } };
        const t0 = performance.now();
        await core.createNamespacedPod({ namespace: NS, body });
        for (;;) {
          const pod = await core.readNamespacedPod({ name, namespace: NS });
          if (pod.status?.phase === 'Succeeded') break;
          if (pod.status?.phase === 'Failed' || performance.now() - t0 > 120_000) throw new Error(`${name}: ${JSON.stringify(pod.status)}`);
          await new Promise((r) => setTimeout(r, 20));
        }
        const ms = performance.now() - t0;
        if (i > 0) out[w.name]!.push(Math.round(ms));
        await core.deleteNamespacedPod({ name, namespace: NS, body: { gracePeriodSeconds: 0 } });
        console.error(`${runtime.kind} ${w.name} pass ${i}: ${Math.round(ms)} ms`);
      }
    }
  } finally {
    await cluster.stop();
  }
  return out;
}

async function main(): Promise<void> {
  const podman = detectContainerRuntime();
  if (podman.kind !== 'podman') throw new Error(`podman mode is unavailable: ${podman.reason}`);
  const loadBefore = loadavg();
  const results = {
    passes,
    machine: `${cpus().length} cores, ${Math.round(totalmem() / 2 ** 30)} GiB`,
    load_average_before: loadBefore.map((x) => Number(x.toFixed(2))),
    podman: await runMode(podman),
    process: await runMode({ kind: 'process', reason: 'benchmark baseline' }),
    load_average_after: loadavg().map((x) => Number(x.toFixed(2))),
  };
  const out = join(repoRoot, 'bench/results');
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'cluster-pods.json'), JSON.stringify(results, null, 2) + '\n');
  const rows = WORKLOADS.map((w) => {
    const p = median(results.podman[w.name]!);
    const q = median(results.process[w.name]!);
    return `| ${w.name} | ${q} | ${p} | ${p - q} |`;
  });
  writeFileSync(
    join(out, 'cluster-pods.md'),
    [
      '# Per-pod overhead: container from its image (podman) vs local process',
      '',
      `Pod creation through the real API server to phase Succeeded (scheduler, kubelet stand-in, status write; polled every 20 ms), median of ${passes} passes after one warm-up, ms. Machine: ${results.machine}; load average (1/5/15 min) ${results.load_average_before.join(' / ')} before, ${results.load_average_after.join(' / ')} after.`,
      '`npx tsx bench/cluster/pods.ts`. The podman column is dominated by podman itself: one `podman image exists` and one `podman run --rm` (create, start, attach, wait, remove) per pod.',
      '',
      '| pod | process | podman (image) | image overhead |',
      '| --- | ---: | ---: | ---: |',
      ...rows,
      '',
    ].join('\n'),
  );
  console.log(JSON.stringify(results, null, 2));
}

main().then(
  () => process.exit(0),
  (err: Error) => {
    console.error(err.stack);
    process.exit(1);
  },
);

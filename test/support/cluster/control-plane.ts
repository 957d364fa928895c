// A real Kubernetes control plane for tests, on 127.0.0.1 only: etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler as built by scripts/cluster-tools.sh, KWOK keeping fake GPU nodes Ready, and the kubelet stand-in
// (kubelet-standin.ts) running those nodes' pods as local processes (volume paths and cluster DNS names
// translated for this machine: standin/container-view.ts). Every process logs to a file in the cluster's
// directory; a failed start names that directory and keeps it.
//
//   const cluster = await startTestCluster({ nodes: [{ name: 'gpu-0', gpus: 8 }] });
//   const batch = cluster.kubeConfig.makeApiClient(BatchV1Api);
//   ...
//   await cluster.stop();
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, KubeConfig, type V1Node } from '@kubernetes/client-node';
import {
  allocatePorts,
  componentEnv,
  KWOK_NODE_ANNOTATION,
  kwokConfig,
  reapContainers,
  standinContainersFile,
  startApiserver,
  startControllerManager,
  startEtcd,
  startScheduler,
  startStandin,
  writeKubeconfig,
  type Ports,
} from './components.js';
import { makeClusterPki, type ClusterPki } from './pki.js';
import { logTail, signalGroup, startClusterProcess, waitUntil, type ClusterProcess } from './processes.js';
import { DEFAULT_PULLABLE_IMAGES } from './standin/config.js';
import { detectContainerRuntime, type ContainerRuntime } from './container-runtime.js';
import { CLUSTER_TOOLS_MISSING, findClusterTools, findKueue, KUEUE_MISSING } from './tools.js';
import { startKueue } from './kueue.js';

export interface TestNodeSpec {
  name: string;
  gpus: number;
  /** Value of the hanzo-ml.dev/gpu-type label; default "a100". */
  gpuType?: string;
  /** Default "16". */
  cpu?: string;
  /** Default "64Gi". */
  memory?: string;
}

export interface TestClusterOptions {
  /** Fake nodes, untainted, so the product's Jobs schedule there as on real GPU nodes. Default: one 8-GPU node. */
  nodes?: TestNodeSpec[];
  /** Where certificates, data and logs go; kept after stop(). Default: a temporary directory, removed by stop(). */
  dir?: string;
  /** Images the kubelet stand-in can pull (an entry without a tag matches every tag). Default DEFAULT_PULLABLE_IMAGES. */
  images?: string[];
  /**
   * Per image (matched as in `images`), the environment its ENV lines would set, e.g. a PATH whose `python` has the
   * trainer's packages. The pod's own env wins over it.
   */
  imageEnv?: Record<string, Record<string, string>>;
  /**
   * How the stand-in runs containers. Default detectContainerRuntime(): podman with the locally built images, or the
   * process fallback where podman or those images are missing.
   */
  containerRuntime?: ContainerRuntime;
  /**
   * KWOK plays the nodes' pods with these Stages instead of the kubelet stand-in running them (a simulation: pods
   * run no process). For benchmarks of scheduling at a scale no machine could run.
   */
  simulatedPodStages?: Record<string, unknown>[];
  /** Start Kueue too (CRDs, webhooks on a loopback URL, the manager). */
  kueue?: boolean | { waitForPodsReady?: string; logLevel?: number | 'info' };
}

export interface TestCluster {
  /** Admin kubeconfig (client certificate in group system:masters). */
  kubeconfigPath: string;
  kubeConfig: KubeConfig;
  /** https://127.0.0.1:<port> */
  server: string;
  /** Certificates, etcd data and one log per component (etcd.log, kube-apiserver.log, kubelet-standin.log, ...). */
  dir: string;
  /** How the kubelet stand-in runs the pods' containers. */
  containerRuntime: ContainerRuntime;
  nodes: string[];
  /** Creates a namespace and waits for its default ServiceAccount (pods are refused until it exists). */
  createNamespace(name: string): Promise<string>;
  /** Runs kubectl against the cluster; rejects with its stderr on a non-zero exit. */
  kubectl(args: string[], input?: string): Promise<string>;
  /** Stops every process (idempotent); removes the directory only when startTestCluster made it. */
  stop(): Promise<void>;
}

/** GET over HTTPS with the cluster's CA and admin certificate; resolves to the status code. */
function httpsStatus(url: string, pki: ClusterPki | null): Promise<number> {
  return new Promise((resolve, reject) => {
    const tls = pki
      ? { ca: readFileSync(pki.caCert), cert: readFileSync(pki.adminCert), key: readFileSync(pki.adminKey) }
      : // kube-scheduler's health endpoint has a self-signed certificate; it is probed for liveness only.
        { rejectUnauthorized: false };
    const req = request(url, { ...tls, timeout: 5000 }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.end();
  });
}

function nodeObject(spec: TestNodeSpec, kubeletPort: number): V1Node {
  const resources = { 'nvidia.com/gpu': String(spec.gpus), cpu: spec.cpu ?? '16', memory: spec.memory ?? '64Gi', pods: '110' };
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: spec.name,
      annotations: { [KWOK_NODE_ANNOTATION]: 'fake', 'node.alpha.kubernetes.io/ttl': '0' },
      labels: {
        type: 'kwok',
        'hanzo-ml.dev/gpu-type': spec.gpuType ?? 'a100',
        'kubernetes.io/hostname': spec.name,
        'kubernetes.io/os': 'linux',
        'kubernetes.io/arch': 'amd64',
      },
    },
    // Nodes are the one kind whose status may be set on create: KWOK keeps what is given here.
    status: {
      capacity: resources,
      allocatable: resources,
      addresses: [
        { type: 'InternalIP', address: '127.0.0.1' },
        { type: 'Hostname', address: spec.name },
      ],
      daemonEndpoints: { kubeletEndpoint: { Port: kubeletPort } },
    },
  };
}

/** Ready, and free of the not-ready taints the node lifecycle controller lifts once it sees it Ready. */
function nodeUsable(node: V1Node): boolean {
  const ready = node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
  return Boolean(ready) && !(node.spec?.taints ?? []).some((t) => t.key.startsWith('node.kubernetes.io/'));
}

function runKubectl(kubeconfig: string, args: string[], input?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn('kubectl', [`--kubeconfig=${kubeconfig}`, ...args], { env: componentEnv(), stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`kubectl ${args.join(' ')} exited ${code}: ${err.trim()}`))));
    child.stdin.end(input ?? '');
  });
}

/** The processes of one cluster, and how to stop them all: the stand-in first (so its containers get SIGTERM), then
 * the controllers, then the API server, the store last. */
class ClusterProcesses {
  readonly list: ClusterProcess[] = [];
  private stopping: Promise<void> | null = null;
  private readonly killAllNow = () => {
    for (const p of this.list) signalGroup(p.pid, 'SIGKILL');
    reapContainers(this.pgidFile, this.runtime, standinContainersFile(this.dir));
  };

  constructor(
    private readonly dir: string,
    private readonly pgidFile: string,
    private readonly runtime: ContainerRuntime,
  ) {
    // A test process that exits without stop() leaves nothing running.
    process.once('exit', this.killAllNow);
  }

  add(p: ClusterProcess): ClusterProcess {
    this.list.push(p);
    return p;
  }

  stop(): Promise<void> {
    this.stopping ??= (async () => {
      process.off('exit', this.killAllNow);
      const named = (name: string) => this.list.find((p) => p.name === name);
      await named('kubelet-standin')?.stop(8000);
      reapContainers(this.pgidFile, this.runtime, standinContainersFile(this.dir));
      await Promise.all(this.list.filter((p) => !['kubelet-standin', 'kube-apiserver', 'etcd'].includes(p.name)).map((p) => p.stop(5000)));
      await named('kube-apiserver')?.stop(10_000);
      await named('etcd')?.stop(5000);
    })();
    return this.stopping;
  }

  describe(): string {
    return this.list.map((p) => `--- ${p.logPath} (${p.exited() ?? 'running'})\n${logTail(p.logPath, 8)}`).join('\n');
  }
}

interface Layout {
  tools: string;
  dir: string;
  ports: Ports;
  kubeconfigPath: string;
  server: string;
  runtime: ContainerRuntime;
}

/** etcd, then the API server once etcd answers; resolves when /readyz says 200. */
async function startApiServing(l: Layout, procs: ClusterProcesses): Promise<ClusterPki> {
  mkdirSync(join(l.dir, 'pki'), { recursive: true });
  const pki = makeClusterPki(join(l.dir, 'pki'));
  writeKubeconfig(l.kubeconfigPath, l.server, pki);
  procs.add(startEtcd(l.tools, l.dir, l.ports));
  await waitUntil('etcd /health', async () => (await fetch(`http://127.0.0.1:${l.ports.etcdClient}/health`)).ok, { timeoutMs: 30_000, watched: procs.list });
  procs.add(startApiserver(l.tools, l.dir, l.ports, pki));
  await waitUntil('kube-apiserver /readyz', async () => (await httpsStatus(`${l.server}/readyz`, pki)) === 200, { timeoutMs: 120_000, watched: procs.list, intervalMs: 500 });
  return pki;
}

/** Controllers, scheduler, KWOK and the stand-in; the nodes; then waits until a pod could run on each node. */
async function startNodesAndControllers(l: Layout, pki: ClusterPki, procs: ClusterProcesses, opts: TestClusterOptions, core: CoreV1Api): Promise<void> {
  const nodes = opts.nodes ?? DEFAULT_NODES;
  procs.add(startControllerManager(l.tools, l.dir, l.ports, l.kubeconfigPath, pki));
  procs.add(startScheduler(l.tools, l.dir, l.ports, l.kubeconfigPath));
  writeFileSync(join(l.dir, 'kwok.yaml'), kwokConfig(l.tools, l.ports, opts.simulatedPodStages));
  procs.add(startClusterProcess('kwok', join(l.tools, 'kwok'), [`--kubeconfig=${l.kubeconfigPath}`, `--config=${join(l.dir, 'kwok.yaml')}`], { dir: l.dir, env: componentEnv() }));
  const images = { images: opts.images ?? DEFAULT_PULLABLE_IMAGES, imageEnv: opts.imageEnv ?? {}, runtime: l.runtime };
  const standin = startStandin(l.dir, l.kubeconfigPath, pki, l.ports, opts.simulatedPodStages ? [] : nodes.map((n) => n.name), images, standinPgidFile(l.dir));
  procs.add(standin.process);
  for (const n of nodes) await core.createNode({ body: nodeObject(n, l.ports.kubelet) });

  const wait = { timeoutMs: 120_000, watched: procs.list, intervalMs: 500 };
  await waitUntil('the kubelet stand-in', () => existsSync(standin.readyFile), wait);
  await waitUntil('kube-scheduler /healthz', async () => (await httpsStatus(`https://127.0.0.1:${l.ports.scheduler}/healthz`, null)) === 200, wait);
  await waitUntil('the default ServiceAccount (kube-controller-manager)', () => core.readNamespacedServiceAccount({ name: 'default', namespace: 'default' }).then(() => true), wait);
  // KWOK marks a simulated thousand nodes Ready in minutes on a small machine, not seconds.
  const label = nodes.length <= 10 ? nodes.map((n) => n.name).join(', ') : `${nodes.length} nodes`;
  await waitUntil(`nodes ${label} Ready and untainted`, async () => {
    const usable = new Set((await core.listNode()).items.filter(nodeUsable).map((item) => item.metadata?.name));
    return nodes.every((n) => usable.has(n.name));
  }, { ...wait, timeoutMs: wait.timeoutMs + nodes.length * 500 });
}

const standinPgidFile = (dir: string) => join(dir, 'kubelet', 'pgids');
const DEFAULT_NODES: TestNodeSpec[] = [{ name: 'gpu-node-0', gpus: 8 }];

export async function startTestCluster(opts: TestClusterOptions = {}): Promise<TestCluster> {
  const tools = findClusterTools();
  if (!tools) throw new Error(CLUSTER_TOOLS_MISSING);
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'hanzo-ml-cluster-'));
  mkdirSync(join(dir, 'kubelet'), { recursive: true });
  // A directory the caller named is theirs; ours goes on stop(), unless a start failed or HANZO_ML_KEEP_TEST_CLUSTER.
  let removeDir = !opts.dir && !process.env.HANZO_ML_KEEP_TEST_CLUSTER;
  const ports = await allocatePorts();
  const runtime = opts.containerRuntime ?? detectContainerRuntime();
  const layout: Layout = { tools, dir, ports, kubeconfigPath: join(dir, 'kubeconfig'), server: `https://127.0.0.1:${ports.apiserver}`, runtime };
  const procs = new ClusterProcesses(dir, standinPgidFile(dir), runtime);
  const stop = async () => {
    await procs.stop();
    if (removeDir) rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
  };
  try {
    const pki = await startApiServing(layout, procs);
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(layout.kubeconfigPath);
    const core = kubeConfig.makeApiClient(CoreV1Api);
    await startNodesAndControllers(layout, pki, procs, opts, core);
    if (opts.kueue) {
      const kueueDir = findKueue();
      if (!kueueDir) throw new Error(KUEUE_MISSING);
      const kubectl = (args: string[], input?: string) => runKubectl(layout.kubeconfigPath, args, input);
      const kueueOpts = typeof opts.kueue === 'object' ? opts.kueue : {};
      procs.add(await startKueue({ kueueDir, dir, kubeconfigPath: layout.kubeconfigPath, pki, kubectl, watched: procs.list, ...kueueOpts }));
    }
    return {
      kubeconfigPath: layout.kubeconfigPath,
      kubeConfig,
      server: layout.server,
      dir,
      containerRuntime: runtime,
      nodes: (opts.nodes ?? DEFAULT_NODES).map((n) => n.name),
      async createNamespace(name) {
        await core.createNamespace({ body: { metadata: { name } } });
        const hasDefaultSa = () => core.readNamespacedServiceAccount({ name: 'default', namespace: name }).then(() => true);
        await waitUntil(`ServiceAccount default in ${name}`, hasDefaultSa, { timeoutMs: 60_000, watched: procs.list });
        return name;
      },
      kubectl: (args, input) => runKubectl(layout.kubeconfigPath, args, input),
      stop,
    };
  } catch (err) {
    const logs = procs.describe();
    removeDir = false;
    await stop();
    throw new Error(`test cluster failed to start (logs kept in ${dir}): ${(err as Error).message}\n${logs}`, { cause: err });
  }
}

// A real Kubernetes control plane for tests, on 127.0.0.1 only: etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler as built by scripts/cluster-tools.sh, KWOK keeping fake GPU nodes Ready, and the kubelet stand-in
// (kubelet-standin.ts) running those nodes' pods as local processes. Every process logs to a file in the
// cluster's directory; a failed start names that directory.
//
//   const cluster = await startTestCluster({ nodes: [{ name: 'gpu-0', gpus: 8 }] });
//   const batch = cluster.kubeConfig.makeApiClient(BatchV1Api);
//   ...
//   await cluster.stop();
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, KubeConfig, type V1Node } from '@kubernetes/client-node';
import { parseAllDocuments, stringify } from 'yaml';
import { makeClusterPki, type ClusterPki } from './pki.js';
import { logTail, signalGroup, startClusterProcess, waitUntil, type ClusterProcess } from './processes.js';
import { DEFAULT_PULLABLE_IMAGES, type StandinConfig } from './standin/config.js';
import { CLUSTER_TOOLS_MISSING, findClusterTools, repoRoot } from './tools.js';
import { freePort } from '../ports.js';

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
}

export interface TestCluster {
  /** Admin kubeconfig (client certificate in group system:masters). */
  kubeconfigPath: string;
  kubeConfig: KubeConfig;
  /** https://127.0.0.1:<port> */
  server: string;
  /** Certificates, etcd data and one log per component (etcd.log, kube-apiserver.log, kubelet-standin.log, ...). */
  dir: string;
  nodes: string[];
  /** Creates a namespace and waits for its default ServiceAccount (pods are refused until it exists). */
  createNamespace(name: string): Promise<string>;
  /** Runs kubectl against the cluster; rejects with its stderr on a non-zero exit. */
  kubectl(args: string[], input?: string): Promise<string>;
  /** Stops every process (idempotent); removes the directory only when startTestCluster made it. */
  stop(): Promise<void>;
}

const KWOK_NODE_ANNOTATION = 'kwok.x-k8s.io/node';

interface Ports {
  etcdClient: number;
  etcdPeer: number;
  apiserver: number;
  controllerManager: number;
  scheduler: number;
  kwok: number;
  kubelet: number;
}

/** Environment without proxies (nothing here may leave loopback) and, for etcd, without ETCD_* (read as flags). */
function componentEnv(dropEtcd = false): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const key of Object.keys(env)) {
    if (/^(https?|no|all)_proxy$/i.test(key) || key === 'KUBECONFIG' || (dropEtcd && key.startsWith('ETCD_'))) delete env[key];
  }
  return env;
}

function writeKubeconfig(path: string, server: string, pki: ClusterPki): void {
  const kubeconfig = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'test', cluster: { server, 'certificate-authority': pki.caCert } }],
    users: [{ name: 'admin', user: { 'client-certificate': pki.adminCert, 'client-key': pki.adminKey } }],
    contexts: [{ name: 'test', context: { cluster: 'test', user: 'admin', namespace: 'default' } }],
    'current-context': 'test',
  };
  writeFileSync(path, stringify(kubeconfig));
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

function startEtcd(tools: string, dir: string, ports: Ports): ClusterProcess {
  const peer = `http://127.0.0.1:${ports.etcdPeer}`;
  const client = `http://127.0.0.1:${ports.etcdClient}`;
  return startClusterProcess(
    'etcd',
    join(tools, 'etcd'),
    [
      '--name=test', `--data-dir=${join(dir, 'etcd-data')}`, '--unsafe-no-fsync', '--log-level=warn',
      `--listen-client-urls=${client}`, `--advertise-client-urls=${client}`,
      `--listen-peer-urls=${peer}`, `--initial-advertise-peer-urls=${peer}`, `--initial-cluster=test=${peer}`,
    ],
    { dir, env: componentEnv(true) },
  );
}

function startApiserver(tools: string, dir: string, ports: Ports, pki: ClusterPki): ClusterProcess {
  return startClusterProcess(
    'kube-apiserver',
    join(tools, 'kube-apiserver'),
    [
      `--etcd-servers=http://127.0.0.1:${ports.etcdClient}`,
      '--bind-address=127.0.0.1', '--advertise-address=127.0.0.1', `--secure-port=${ports.apiserver}`,
      `--tls-cert-file=${pki.apiserverCert}`, `--tls-private-key-file=${pki.apiserverKey}`, `--client-ca-file=${pki.caCert}`,
      '--service-cluster-ip-range=10.96.0.0/24', '--endpoint-reconciler-type=none', '--authorization-mode=Node,RBAC',
      `--service-account-issuer=https://127.0.0.1:${ports.apiserver}`,
      `--service-account-key-file=${pki.serviceAccountPub}`, `--service-account-signing-key-file=${pki.serviceAccountKey}`,
      '--kubelet-preferred-address-types=InternalIP',
      `--kubelet-client-certificate=${pki.kubeletClientCert}`, `--kubelet-client-key=${pki.kubeletClientKey}`,
      `--kubelet-certificate-authority=${pki.caCert}`,
      `--cert-dir=${join(dir, 'apiserver-certs')}`, '--profiling=false',
    ],
    { dir, env: componentEnv() },
  );
}

function startControllerManager(tools: string, dir: string, ports: Ports, kubeconfig: string, pki: ClusterPki): ClusterProcess {
  return startClusterProcess(
    'kube-controller-manager',
    join(tools, 'kube-controller-manager'),
    [
      `--kubeconfig=${kubeconfig}`, `--authentication-kubeconfig=${kubeconfig}`, `--authorization-kubeconfig=${kubeconfig}`,
      '--bind-address=127.0.0.1', `--secure-port=${ports.controllerManager}`, `--cert-dir=${join(dir, 'controller-manager-certs')}`,
      "--controllers=*", '--leader-elect=false', '--use-service-account-credentials=false', '--allocate-node-cidrs=false',
      `--service-account-private-key-file=${pki.serviceAccountKey}`, `--root-ca-file=${pki.caCert}`,
      '--service-cluster-ip-range=10.96.0.0/24', '--profiling=false',
    ],
    { dir, env: componentEnv() },
  );
}

function startScheduler(tools: string, dir: string, ports: Ports, kubeconfig: string): ClusterProcess {
  return startClusterProcess(
    'kube-scheduler',
    join(tools, 'kube-scheduler'),
    [
      `--kubeconfig=${kubeconfig}`, `--authentication-kubeconfig=${kubeconfig}`, `--authorization-kubeconfig=${kubeconfig}`,
      '--bind-address=127.0.0.1', `--secure-port=${ports.scheduler}`, `--cert-dir=${join(dir, 'scheduler-certs')}`,
      '--leader-elect=false', '--profiling=false',
    ],
    { dir, env: componentEnv() },
  );
}

/**
 * KWOK standalone: a KwokConfiguration (options in a file are not defaulted, so every one it needs is set) plus
 * the node Stages only, and one Pod stage that matches nothing. Without any Pod stage KWOK installs its default
 * ones and would race the kubelet stand-in for the pods.
 */
function kwokConfig(tools: string, ports: Ports): string {
  const options = {
    apiVersion: 'config.kwok.x-k8s.io/v1alpha1',
    kind: 'KwokConfiguration',
    options: {
      manageAllNodes: false,
      manageNodesWithAnnotationSelector: `${KWOK_NODE_ANNOTATION}=fake`,
      cidr: '10.0.0.1/24',
      nodeIP: '127.0.0.1',
      nodePort: ports.kubelet,
      serverAddress: `127.0.0.1:${ports.kwok}`,
      enableDebuggingHandlers: false,
      podPlayStageParallelism: 4,
      nodePlayStageParallelism: 4,
      nodeLeaseDurationSeconds: 40,
      nodeLeaseParallelism: 4,
      podsOnNodeSyncParallelism: 1,
    },
  };
  const stagesDir = join(tools, 'kwok-stages');
  const nodeStages = readdirSync(stagesDir)
    .filter((f) => f.endsWith('.yaml'))
    .flatMap((f) => parseAllDocuments(readFileSync(join(stagesDir, f), 'utf8')).map((d) => d.toJS() as { kind?: string; spec?: { resourceRef?: { kind?: string } } }))
    .filter((d) => d?.kind === 'Stage' && d.spec?.resourceRef?.kind === 'Node');
  const noPodStage = {
    apiVersion: 'kwok.x-k8s.io/v1alpha1',
    kind: 'Stage',
    metadata: { name: 'pod-left-to-the-kubelet-standin' },
    spec: {
      resourceRef: { apiGroup: 'v1', kind: 'Pod' },
      selector: { matchAnnotations: { 'hanzo-ml.dev/kwok-never-matches': 'never' } },
      next: { statusTemplate: '{}' },
    },
  };
  return [options, ...nodeStages, noPodStage].map((d) => stringify(d)).join('---\n');
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

async function allocatePorts(): Promise<Ports> {
  const ports: number[] = [];
  // freePort releases each port at once: ask until seven distinct ones come back.
  while (ports.length < 7) {
    const p = await freePort();
    if (!ports.includes(p)) ports.push(p);
  }
  const [etcdClient, etcdPeer, apiserver, controllerManager, scheduler, kwok, kubelet] = ports as [number, number, number, number, number, number, number];
  return { etcdClient, etcdPeer, apiserver, controllerManager, scheduler, kwok, kubelet };
}

export async function startTestCluster(opts: TestClusterOptions = {}): Promise<TestCluster> {
  const tools = findClusterTools();
  if (!tools) throw new Error(CLUSTER_TOOLS_MISSING);
  const t0 = Date.now();
  // A directory the caller named is theirs; ours goes on stop(), unless a start failed or HANZO_ML_KEEP_TEST_CLUSTER.
  let removeDir = !opts.dir && !process.env.HANZO_ML_KEEP_TEST_CLUSTER;
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'hanzo-ml-cluster-'));
  mkdirSync(dir, { recursive: true });
  const nodes = opts.nodes ?? [{ name: 'gpu-node-0', gpus: 8 }];
  const ports = await allocatePorts();
  const server = `https://127.0.0.1:${ports.apiserver}`;
  const kubeconfigPath = join(dir, 'kubeconfig');
  const procs: ClusterProcess[] = [];
  const standinPgidFile = join(dir, 'kubelet', 'pgids');

  const killAllNow = () => {
    for (const p of procs) signalGroup(p.pid, 'SIGKILL');
    reapContainers(standinPgidFile);
  };
  process.once('exit', killAllNow);
  let stopping: Promise<void> | null = null;
  const stop = () =>
    (stopping ??= (async () => {
      process.off('exit', killAllNow);
      // The stand-in first, so the containers it runs get their SIGTERM; then the rest, the store last.
      const standin = procs.find((p) => p.name === 'kubelet-standin');
      await standin?.stop(8000);
      reapContainers(standinPgidFile);
      await Promise.all(procs.filter((p) => !['kubelet-standin', 'kube-apiserver', 'etcd'].includes(p.name)).map((p) => p.stop(5000)));
      await procs.find((p) => p.name === 'kube-apiserver')?.stop(10_000);
      await procs.find((p) => p.name === 'etcd')?.stop(5000);
      if (removeDir) rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
    })());

  try {
    mkdirSync(join(dir, 'pki'), { recursive: true });
    const pki = makeClusterPki(join(dir, 'pki'));
    writeKubeconfig(kubeconfigPath, server, pki);
    procs.push(startEtcd(tools, dir, ports));
    await waitUntil('etcd /health', async () => (await fetch(`http://127.0.0.1:${ports.etcdClient}/health`)).ok, { timeoutMs: 30_000, watched: procs });
    procs.push(startApiserver(tools, dir, ports, pki));
    await waitUntil('kube-apiserver /readyz', async () => (await httpsStatus(`${server}/readyz`, pki)) === 200, { timeoutMs: 120_000, watched: procs, intervalMs: 500 });

    procs.push(startControllerManager(tools, dir, ports, kubeconfigPath, pki));
    procs.push(startScheduler(tools, dir, ports, kubeconfigPath));
    writeFileSync(join(dir, 'kwok.yaml'), kwokConfig(tools, ports));
    procs.push(startClusterProcess('kwok', join(tools, 'kwok'), [`--kubeconfig=${kubeconfigPath}`, `--config=${join(dir, 'kwok.yaml')}`], { dir, env: componentEnv() }));
    const standin = startStandin(dir, kubeconfigPath, pki, ports, nodes, opts.images ?? DEFAULT_PULLABLE_IMAGES, standinPgidFile);
    procs.push(standin.process);

    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(kubeconfigPath);
    const core = kubeConfig.makeApiClient(CoreV1Api);
    for (const n of nodes) await core.createNode({ body: nodeObject(n, ports.kubelet) });

    const wait = { timeoutMs: 120_000, watched: procs, intervalMs: 500 };
    await waitUntil('the kubelet stand-in', () => existsSync(standin.readyFile), wait);
    await waitUntil('kube-scheduler /healthz', async () => (await httpsStatus(`https://127.0.0.1:${ports.scheduler}/healthz`, null)) === 200, wait);
    await waitUntil('the default ServiceAccount (kube-controller-manager)', () => core.readNamespacedServiceAccount({ name: 'default', namespace: 'default' }).then(() => true), wait);
    await waitUntil(`nodes ${nodes.map((n) => n.name).join(', ')} Ready and untainted`, async () => {
      const list = await core.listNode();
      return nodes.every((n) => list.items.some((item) => item.metadata?.name === n.name && nodeUsable(item)));
    }, wait);
    if (process.env.HANZO_ML_CLUSTER_VERBOSE) console.error(`test cluster up in ${Date.now() - t0} ms (${dir})`);

    return {
      kubeconfigPath,
      kubeConfig,
      server,
      dir,
      nodes: nodes.map((n) => n.name),
      async createNamespace(name) {
        await core.createNamespace({ body: { metadata: { name } } });
        await waitUntil(`ServiceAccount default in ${name}`, () => core.readNamespacedServiceAccount({ name: 'default', namespace: name }).then(() => true), wait);
        return name;
      },
      kubectl: (args, input) => runKubectl(kubeconfigPath, args, input),
      stop,
    };
  } catch (err) {
    const logs = procs.map((p) => `--- ${p.logPath} (${p.exited() ?? 'running'})\n${logTail(p.logPath, 8)}`).join('\n');
    removeDir = false;
    await stop();
    throw new Error(`test cluster failed to start (logs kept in ${dir}): ${(err as Error).message}\n${logs}`, { cause: err });
  }
}

function startStandin(dir: string, kubeconfig: string, pki: ClusterPki, ports: Ports, nodes: TestNodeSpec[], images: string[], pgidFile: string) {
  const standinDir = join(dir, 'kubelet');
  mkdirSync(standinDir, { recursive: true });
  const config: StandinConfig = {
    kubeconfig,
    nodes: nodes.map((n) => n.name),
    images,
    port: ports.kubelet,
    tlsCert: pki.kubeletServingCert,
    tlsKey: pki.kubeletServingKey,
    clientCa: pki.caCert,
    dir: join(standinDir, 'pods'),
    readyFile: join(standinDir, 'ready'),
    pgidFile,
  };
  mkdirSync(config.dir, { recursive: true });
  const configPath = join(standinDir, 'config.json');
  writeFileSync(configPath, JSON.stringify(config, null, 2));
  // Run as bin/hanzo-ml runs the product's TypeScript: node with tsx's loader, no build step.
  const tsx = join(repoRoot, 'node_modules/tsx/dist/esm/index.mjs');
  const entry = join(repoRoot, 'test/support/cluster/kubelet-standin.ts');
  const proc = startClusterProcess('kubelet-standin', process.execPath, ['--import', tsx, entry, configPath], { dir, env: componentEnv(), cwd: repoRoot });
  return { process: proc, readyFile: config.readyFile };
}

/** SIGKILLs container process groups a stand-in left behind (it was killed before it could stop them). */
function reapContainers(pgidFile: string): void {
  if (!existsSync(pgidFile)) return;
  for (const line of readFileSync(pgidFile, 'utf8').split('\n')) {
    const pgid = Number(line);
    if (pgid > 1) signalGroup(pgid, 'SIGKILL');
  }
}

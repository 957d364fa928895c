// The processes of the test cluster and their configuration: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, KWOK and the kubelet stand-in, each on its own loopback port, each logging to <dir>/<name>.log.
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments, stringify } from 'yaml';
import type { ClusterPki } from './pki.js';
import { signalGroup, startClusterProcess, type ClusterProcess } from './processes.js';
import type { StandinConfig } from './standin/config.js';
import { reapPodmanContainers, type ContainerRuntime } from './container-runtime.js';
import { repoRoot } from './tools.js';
import { freePort } from '../ports.js';

export const KWOK_NODE_ANNOTATION = 'kwok.x-k8s.io/node';

export interface Ports {
  etcdClient: number;
  etcdPeer: number;
  apiserver: number;
  controllerManager: number;
  scheduler: number;
  kwok: number;
  kubelet: number;
}

export async function allocatePorts(): Promise<Ports> {
  const ports: number[] = [];
  // freePort releases each port at once: ask until seven distinct ones come back.
  while (ports.length < 7) {
    const p = await freePort();
    if (!ports.includes(p)) ports.push(p);
  }
  const [etcdClient, etcdPeer, apiserver, controllerManager, scheduler, kwok, kubelet] = ports as [number, number, number, number, number, number, number];
  return { etcdClient, etcdPeer, apiserver, controllerManager, scheduler, kwok, kubelet };
}

/** Environment without proxies (nothing here may leave loopback) and, for etcd, without ETCD_* (read as flags). */
export function componentEnv(dropEtcd = false): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const key of Object.keys(env)) {
    if (/^(https?|no|all)_proxy$/i.test(key) || key === 'KUBECONFIG' || (dropEtcd && key.startsWith('ETCD_'))) delete env[key];
  }
  return env;
}

export function writeKubeconfig(path: string, server: string, pki: ClusterPki): void {
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

export function startEtcd(tools: string, dir: string, ports: Ports): ClusterProcess {
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

export function startApiserver(tools: string, dir: string, ports: Ports, pki: ClusterPki): ClusterProcess {
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

export function startControllerManager(tools: string, dir: string, ports: Ports, kubeconfig: string, pki: ClusterPki): ClusterProcess {
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

export function startScheduler(tools: string, dir: string, ports: Ports, kubeconfig: string): ClusterProcess {
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
/**
 * KWOK's configuration. `podStages` (Stage objects for pods) makes KWOK play the pods of its nodes itself (Running,
 * then Succeeded after a delay) for simulations; without them every pod is the kubelet stand-in's.
 */
export function kwokConfig(tools: string, ports: Ports, podStages: Record<string, unknown>[] = []): string {
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
      podPlayStageParallelism: podStages.length ? 16 : 4,
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
  return [options, ...nodeStages, ...(podStages.length ? podStages : [noPodStage])].map((d) => stringify(d)).join('---\n');
}

export function startStandin(dir: string, kubeconfig: string, pki: ClusterPki, ports: Ports, nodes: string[], images: Pick<StandinConfig, 'images' | 'imageEnv' | 'runtime'>, pgidFile: string) {
  const standinDir = join(dir, 'kubelet');
  mkdirSync(standinDir, { recursive: true });
  const config: StandinConfig = {
    kubeconfig,
    nodes,
    ...images,
    port: ports.kubelet,
    tlsCert: pki.kubeletServingCert,
    tlsKey: pki.kubeletServingKey,
    clientCa: pki.caCert,
    dir: join(standinDir, 'pods'),
    readyFile: join(standinDir, 'ready'),
    pgidFile,
    containersFile: standinContainersFile(dir),
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

export const standinContainersFile = (dir: string) => join(dir, 'kubelet', 'containers');

/**
 * SIGKILLs container process groups and removes podman containers a stand-in left behind (it was killed before it
 * could stop them).
 */
export function reapContainers(pgidFile: string, runtime: ContainerRuntime, containersFile: string): void {
  if (runtime.kind === 'podman') reapPodmanContainers(runtime.podmanArgs, containersFile);
  if (!existsSync(pgidFile)) return;
  for (const line of readFileSync(pgidFile, 'utf8').split('\n')) {
    const pgid = Number(line);
    if (pgid > 1) signalGroup(pgid, 'SIGKILL');
  }
}

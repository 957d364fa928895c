import { mkdtempSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { makeClusterPki } from './pki.js';
import { startClusterProcess, waitUntil } from './processes.js';
import { freePort } from '../ports.js';
import { stringify } from 'yaml';

const tools = process.argv[2]!;
const dir = mkdtempSync(join(tmpdir(), 'scratch-cluster-'));
mkdirSync(join(dir, 'pki'));
const pki = makeClusterPki(join(dir, 'pki'));
const [ec, ep, ap, kp] = [await freePort(), await freePort(), await freePort(), await freePort()];
const etcd = startClusterProcess('etcd', join(tools, 'etcd'), ['--name=test', `--data-dir=${dir}/etcd-data`, '--unsafe-no-fsync', '--log-level=warn', `--listen-client-urls=http://127.0.0.1:${ec}`, `--advertise-client-urls=http://127.0.0.1:${ec}`, `--listen-peer-urls=http://127.0.0.1:${ep}`, `--initial-advertise-peer-urls=http://127.0.0.1:${ep}`, `--initial-cluster=test=http://127.0.0.1:${ep}`], { dir });
const t0 = Date.now();
await waitUntil('etcd', async () => (await fetch(`http://127.0.0.1:${ec}/health`)).ok, { timeoutMs: 30000, watched: [etcd] });
console.log('etcd', Date.now() - t0);
const api = startClusterProcess('kube-apiserver', join(tools, 'kube-apiserver'), [
  `--etcd-servers=http://127.0.0.1:${ec}`, '--bind-address=127.0.0.1', '--advertise-address=127.0.0.1', `--secure-port=${ap}`,
  `--tls-cert-file=${pki.apiserverCert}`, `--tls-private-key-file=${pki.apiserverKey}`, `--client-ca-file=${pki.caCert}`,
  '--service-cluster-ip-range=10.96.0.0/24', '--endpoint-reconciler-type=none', '--authorization-mode=Node,RBAC',
  `--service-account-issuer=https://127.0.0.1:${ap}`, `--service-account-key-file=${pki.serviceAccountPub}`, `--service-account-signing-key-file=${pki.serviceAccountKey}`,
  '--kubelet-preferred-address-types=InternalIP', `--kubelet-client-certificate=${pki.kubeletClientCert}`, `--kubelet-client-key=${pki.kubeletClientKey}`, `--kubelet-certificate-authority=${pki.caCert}`,
  `--cert-dir=${dir}/apiserver-certs`, '--profiling=false'], { dir });
const kubeconfig = join(dir, 'kubeconfig');
writeFileSync(kubeconfig, stringify({ apiVersion: 'v1', kind: 'Config', clusters: [{ name: 't', cluster: { server: `https://127.0.0.1:${ap}`, 'certificate-authority': pki.caCert } }], users: [{ name: 'a', user: { 'client-certificate': pki.adminCert, 'client-key': pki.adminKey } }], contexts: [{ name: 't', context: { cluster: 't', user: 'a' } }], 'current-context': 't' }));
const kc = new KubeConfig(); kc.loadFromFile(kubeconfig);
const core = kc.makeApiClient(CoreV1Api);
await waitUntil('apiserver', () => core.listNamespace().then(() => true), { timeoutMs: 120000, watched: [api], intervalMs: 500 });
console.log('apiserver', Date.now() - t0);
mkdirSync(join(dir, 'kubelet/pods'), { recursive: true });
const cfg = { kubeconfig, nodes: ['n1'], images: ['busybox'], port: kp, tlsCert: pki.kubeletServingCert, tlsKey: pki.kubeletServingKey, clientCa: pki.caCert, dir: join(dir, 'kubelet/pods'), readyFile: join(dir, 'kubelet/ready'), pgidFile: join(dir, 'kubelet/pgids') };
writeFileSync(join(dir, 'kubelet/config.json'), JSON.stringify(cfg));
const standin = startClusterProcess('kubelet-standin', process.execPath, ['--import', '/work/main/node_modules/tsx/dist/esm/index.mjs', '/work/main/test/support/cluster/kubelet-standin.ts', join(dir, 'kubelet/config.json')], { dir });
await core.createNode({ body: { metadata: { name: 'n1' }, status: { capacity: { 'nvidia.com/gpu': '8' }, allocatable: { 'nvidia.com/gpu': '8' }, addresses: [{ type: 'InternalIP', address: '127.0.0.1' }], daemonEndpoints: { kubeletEndpoint: { Port: kp } } } } });
const n = await core.readNode({ name: 'n1' });
console.log('node status kept:', JSON.stringify(n.status?.capacity), JSON.stringify(n.status?.daemonEndpoints));
writeFileSync(join(dir, 'env.sh'), `export KUBECONFIG=${kubeconfig}\nexport STANDIN_PID=${standin.pid} API_PID=${api.pid} ETCD_PID=${etcd.pid}\n`);
console.log('DIR', dir);
process.exit(0);

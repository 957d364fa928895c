// Kueue, out of cluster, on the test control plane: its CRDs and webhook registrations from the module (built by
// scripts/cluster-tools.sh kueue), and the manager with the Helm chart's Kueue settings (kueue.manager in
// deploy/helm/hanzo-ml/values.yaml), changing only where it listens. Its webhooks are reached at https://127.0.0.1:<port> (a loopback URL with our CA), never through a
// Service's ClusterIP. Only the batch/Job and kueue.x-k8s.io webhooks are registered: the pod, deployment and
// other framework webhooks are `failurePolicy: Fail` for integrations not enabled here, and would block pods.
import { readdirSync, readFileSync, mkdirSync, copyFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, parseAllDocuments, stringify } from 'yaml';
import type { ClusterPki } from './pki.js';
import { issue, LOOPBACK_SANS } from './pki.js';
import { componentEnv } from './components.js';
import { startClusterProcess, waitUntil, type ClusterProcess } from './processes.js';
import { repoRoot } from './tools.js';
import { freePort } from '../ports.js';

interface KueueStart {
  kueueDir: string;
  dir: string;
  kubeconfigPath: string;
  pki: ClusterPki;
  kubectl: (args: string[], input?: string) => Promise<string>;
  watched: ClusterProcess[];
  /** Kueue's waitForPodsReady timeout; default the controller config's. */
  waitForPodsReady?: string;
  /** Kueue's zap log level: 2 (debug, the default) tells why a test's workload waits; 'info' for benchmarks. */
  logLevel?: number | 'info';
}

type Doc = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** CRDs with their conversion webhook pointed at our loopback URL. */
function crdsFor(kueueDir: string, url: string, caBundle: string): string {
  const dir = join(kueueDir, 'crds');
  return readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .map((f) => {
      const crd = parse(readFileSync(join(dir, f), 'utf8')) as Doc;
      const webhook = crd.spec?.conversion?.webhook;
      if (webhook) webhook.clientConfig = { url: `${url}/convert`, caBundle };
      return stringify(crd);
    })
    .join('---\n');
}

/** The Job and Kueue webhooks of the module's manifests, rewritten from a Service to the loopback URL. */
function webhooksFor(kueueDir: string, url: string, caBundle: string): string {
  const docs = parseAllDocuments(readFileSync(join(kueueDir, 'webhooks.yaml'), 'utf8')).map((d) => d.toJSON() as Doc).filter(Boolean);
  const ours = (w: Doc) => (w.rules as Doc[]).some((r) => (r.apiGroups as string[]).includes('kueue.x-k8s.io') || ((r.apiGroups as string[]).includes('batch') && (r.resources as string[]).includes('jobs')));
  return docs
    .map((doc) => {
      doc.metadata.name = `kueue-${doc.metadata.name}`;
      doc.webhooks = (doc.webhooks as Doc[]).filter(ours).map((w) => ({ ...w, clientConfig: { url: `${url}${w.clientConfig.service.path}`, caBundle } }));
      return stringify(doc);
    })
    .join('---\n');
}

/** Kueue's manager Configuration as the chart renders it with its default values (templates/kueue-manager-config.yaml). */
export function chartKueueConfiguration(): Doc {
  const values = parse(readFileSync(join(repoRoot, 'deploy/helm/hanzo-ml/values.yaml'), 'utf8')) as Doc;
  return { apiVersion: 'config.kueue.x-k8s.io/v1beta2', kind: 'Configuration', ...structuredClone(values.kueue.manager as Doc) };
}

export async function startKueue(o: KueueStart): Promise<ClusterProcess> {
  const [webhookPort, healthPort, metricsPort] = [await freePort(), await freePort(), await freePort()];
  const certDir = join(o.dir, 'kueue-certs');
  mkdirSync(certDir, { recursive: true });
  const serving = issue(join(o.dir, 'pki'), 'kueue-webhook', '/CN=kueue-webhook', 'serverAuth', LOOPBACK_SANS);
  copyFileSync(serving.cert, join(certDir, 'tls.crt'));
  copyFileSync(serving.key, join(certDir, 'tls.key'));
  const caBundle = readFileSync(o.pki.caCert).toString('base64');
  const url = `https://127.0.0.1:${webhookPort}`;

  await o.kubectl(['apply', '--server-side', '-f', '-'], crdsFor(o.kueueDir, url, caBundle));
  // `kubectl wait` fails outright on a CRD the API server has not given a status yet: ask until all say Established.
  const established = () => o.kubectl(['wait', '--for=condition=Established', '--timeout=10s', 'crd', '--all']).then(() => true, () => false);
  await waitUntil('Kueue CRDs established', established, { timeoutMs: 60_000, watched: o.watched, intervalMs: 500 });
  await o.kubectl(['apply', '--server-side', '-f', '-'], webhooksFor(o.kueueDir, url, caBundle));

  const config = chartKueueConfiguration();
  config.namespace = 'kueue-system';
  config.webhook = { host: '127.0.0.1', port: webhookPort, certDir };
  config.health = { healthProbeBindAddress: `127.0.0.1:${healthPort}` };
  config.metrics = { bindAddress: `127.0.0.1:${metricsPort}` };
  config.leaderElection = { leaderElect: false };
  config.internalCertManagement = { enable: false };
  // The visibility API wants an aggregated APIService behind a Service: not on a loopback-only cluster.
  config.featureGates = { ...(config.featureGates as Doc | undefined), VisibilityOnDemand: false };
  if (o.waitForPodsReady) config.waitForPodsReady.timeout = o.waitForPodsReady;
  writeFileSync(join(o.dir, 'kueue-config.yaml'), stringify(config));
  await o.kubectl(['create', 'namespace', 'kueue-system']).catch(() => undefined);

  const env = { ...componentEnv(), KUBECONFIG: o.kubeconfigPath, KUEUE_METRICS_CERT_DIR: certDir };
  const proc = startClusterProcess('kueue', join(o.kueueDir, 'kueue'), [`--config=${join(o.dir, 'kueue-config.yaml')}`, `--zap-log-level=${o.logLevel ?? 2}`], { dir: o.dir, env });
  const watched = [...o.watched, proc];
  await waitUntil('kueue /readyz', async () => (await fetch(`http://127.0.0.1:${healthPort}/readyz`)).ok, { timeoutMs: 120_000, watched, intervalMs: 500 });
  // The webhooks must answer before a test creates a Job: a ResourceFlavor dry-run goes through them.
  const probe = stringify({ apiVersion: 'kueue.x-k8s.io/v1beta2', kind: 'ResourceFlavor', metadata: { name: 'kueue-webhook-probe' }, spec: {} });
  await waitUntil('kueue webhooks', () => o.kubectl(['apply', '--dry-run=server', '-f', '-'], probe).then(() => true, () => false), { timeoutMs: 60_000, watched, intervalMs: 500 });
  return proc;
}

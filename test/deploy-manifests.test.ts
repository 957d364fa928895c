// The cluster install is the Helm chart deploy/helm/hanzo-ml: it lints, it renders what its values say (with its
// defaults and with a values file that sets every group), its config file passes the product's own schema, and
// everything it renders, hooks included, is accepted by a real API server (server-side dry run). The queue hook's
// ServiceAccount can run `hanzo-ml cluster apply` itself against real Kueue, making each organization's namespace
// and the worker's RBAC there, and the worker gets what it needs in those namespaces only.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { parseAllDocuments, parse as parseYaml, stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigSchema, type Config } from '../contracts/config.js';
import { checkCombinations } from '../lib/config.js';
import { applyClusterObjects } from '../jobs/queue/kueue-apply.js';
import { startTestCluster, type TestCluster } from './support/cluster/control-plane.js';
import { chartKueueConfiguration } from './support/cluster/kueue.js';
import { CLUSTER_TOOLS_MISSING, HELM_MISSING, findClusterTools, findHelm, findKueue, repoRoot } from './support/cluster/tools.js';

type Doc = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const chart = join(repoRoot, 'deploy/helm/hanzo-ml');
const fullValues = join(repoRoot, 'test/fixtures/helm-values-full.yaml');
const NAMESPACE = 'hanzo-ml';
const helmDir = findHelm();
const helmHome = mkdtempSync(join(tmpdir(), 'hanzo-ml-helm-'));

/** Runs the helm binary of scripts/cluster-tools.sh helm, its caches and config in a directory of its own. */
function helm(args: string[]): string {
  const env = { ...process.env, HELM_CACHE_HOME: join(helmHome, 'cache'), HELM_CONFIG_HOME: join(helmHome, 'config'), HELM_DATA_HOME: join(helmHome, 'data') };
  try {
    return execFileSync(join(helmDir!, 'helm'), args, { env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    throw new Error(`helm ${args.join(' ')}: ${(err as { stderr?: string }).stderr ?? (err as Error).message}`);
  }
}

interface Rendered {
  text: string;
  docs: Doc[];
  find(kind: string, name: string): Doc;
  /** The product's config file from the ConfigMap, parsed by its schema (the database URL comes from a Secret). */
  config(): Config;
}

function render(args: string[] = []): Rendered {
  const text = helm(['template', 'hanzo-ml', chart, '--namespace', NAMESPACE, ...args]);
  const docs = parseAllDocuments(text).map((d) => d.toJS() as Doc | null).filter((d): d is Doc => d !== null);
  const find = (kind: string, name: string) => {
    const doc = docs.find((d) => d.kind === kind && d.metadata.name === name);
    if (!doc) throw new Error(`no ${kind}/${name} rendered`);
    return doc;
  };
  const config = () => ConfigSchema.parse({ ...parseYaml(find('ConfigMap', 'hanzo-ml-config').data['config.yaml']), database: { url: 'postgres://from-the-secret' } });
  return { text, docs, find, config };
}

const podSpec = (r: Rendered, kind: string, name: string): Doc => r.find(kind, name).spec.template.spec;
const container = (r: Rendered, kind: string, name: string): Doc => podSpec(r, kind, name).containers[0];
const envFrom = (c: Doc, name: string): Doc => (c.env as Doc[]).find((e) => e.name === name)!.valueFrom.secretKeyRef;

const defaults = helmDir ? render() : null;
const full = helmDir ? render(['--values', fullValues]) : null;

describe.skipIf(!helmDir)(`the Helm chart${helmDir ? '' : ` (skipped: ${HELM_MISSING})`}`, () => {
  it('lints strictly with its defaults and with every value group set', () => {
    expect(helm(['lint', '--strict', chart])).toMatch(/1 chart\(s\) linted, 0 chart\(s\) failed/);
    expect(helm(['lint', '--strict', chart, '--values', fullValues])).toMatch(/0 chart\(s\) failed/);
  });

  it('refuses a value it does not know and TLS without its Secret, naming them', () => {
    expect(() => render(['--set', 'api.replica=3'])).toThrow(/additional properties 'replica' not allowed/);
    expect(() => render(['--set', 'temporal.tls.enabled=true'])).toThrow(/temporal\.tls\.secretName/);
    // IAM without an audience would accept a token IAM minted for any other application.
    expect(() => render(['--set', 'auth.iamUrl=https://iam.example.com'])).toThrow(/auth.*audience/);
    expect(() => render(['--set', 'auth.algorithms={HS256}'])).toThrow(/auth\.algorithms/);
  });

  it('holds the product in production shape: API and worker apart, jobs in their own namespace, queues by the hook', () => {
    const r = defaults!;
    expect(r.docs.map((d) => `${d.kind}/${d.metadata.name}`)).toEqual(
      expect.arrayContaining([
        'ConfigMap/hanzo-ml-config',
        'Deployment/hanzo-ml-api',
        'Service/hanzo-ml-api',
        'PodDisruptionBudget/hanzo-ml-api',
        'Deployment/hanzo-ml-worker',
        'ServiceAccount/hanzo-ml-api',
        'ServiceAccount/hanzo-ml-worker',
        'ClusterRole/hanzo-ml-node-reader',
        'ClusterRoleBinding/hanzo-ml-worker-node-reader',
        'ServiceAccount/hanzo-ml-queue-admin',
        'ClusterRole/hanzo-ml-queue-admin',
        'Job/hanzo-ml-queues',
        'ConfigMap/kueue-manager-config',
      ]),
    );
    expect(container(r, 'Deployment', 'hanzo-ml-api').args).toEqual(['serve']);
    expect(container(r, 'Deployment', 'hanzo-ml-worker').args).toEqual(['worker']);
    const api = container(r, 'Deployment', 'hanzo-ml-api');
    expect(api.readinessProbe.httpGet).toEqual({ path: '/ready', port: 'http' });
    expect(api.livenessProbe.httpGet).toEqual({ path: '/alive', port: 'http' });
    // Kueue's queue objects have one owner, `hanzo-ml cluster apply`, run by the post-install/upgrade hook.
    expect(r.docs.filter((d) => String(d.apiVersion).startsWith('kueue.x-k8s.io'))).toEqual([]);
    // Likewise the organizations' job namespaces and everything in them.
    expect(r.docs.filter((d) => d.metadata.namespace?.startsWith('hanzo-ml-jobs') || ['Namespace', 'Role', 'RoleBinding', 'NetworkPolicy', 'ResourceQuota'].includes(d.kind))).toEqual([]);
    const hook = r.find('Job', 'hanzo-ml-queues');
    expect(hook.metadata.annotations['helm.sh/hook']).toBe('post-install,post-upgrade');
    expect(container(r, 'Job', 'hanzo-ml-queues')).toMatchObject({ image: api.image, args: ['cluster', 'apply'] });
    expect(podSpec(r, 'Job', 'hanzo-ml-queues').serviceAccountName).toBe('hanzo-ml-queue-admin');
    expect(podSpec(r, 'Job', 'hanzo-ml-queues').volumes).toContainEqual({ name: 'config', configMap: { name: 'hanzo-ml-config' } });
    expect(helm(['template', 'hanzo-ml', chart, '--set', 'queues.apply=false'])).not.toMatch(/hanzo-ml-queue-admin|kind: Job/);
  });

  it('configures the product with a config file its own schema accepts, for the Kubernetes executor', () => {
    const r = defaults!;
    const config = r.config();
    expect(() => checkCombinations(config)).not.toThrow();
    expect(config.scheduler).toMatchObject({ executor: 'kubernetes', namespace: 'hanzo-ml-jobs', images: { trainer: 'hanzoai/ml-trainer:0.1.0' } });
    expect(config.scheduler).toMatchObject({ worker_service_account: 'hanzo-ml/hanzo-ml-worker', api_service_account: 'hanzo-ml/hanzo-ml-api' });
    // Job pods reach the API's pods, the cluster DNS, and the object store's port (443 of storage.endpoint).
    expect(config.scheduler.job_network.api).toEqual({ cidrs: [], namespace: 'hanzo-ml', pod_labels: { 'app.kubernetes.io/name': 'hanzo-ml-api' }, ports: [8057] });
    expect(config.server.public_url).toBe('http://hanzo-ml-api.hanzo-ml.svc:8057');
    expect(config.temporal).toMatchObject({ address: 'temporal-frontend.temporal.svc:7233', tls: false });
    expect(config.storage.encryption).toBe('sse-s3');
    // The test cluster's Kueue runs with exactly what the chart renders for Kueue's manager.
    const kueue = parseYaml(r.find('ConfigMap', 'kueue-manager-config').data['controller_manager_config.yaml']);
    expect(kueue).toEqual(chartKueueConfiguration());
  });

  it('carries every value group of a full values file into the rendered objects', () => {
    const r = full!;
    const config = r.config();
    expect(() => checkCombinations(config)).not.toThrow();
    // images and replicas
    const api = container(r, 'Deployment', 'hanzo-ml-api');
    const worker = container(r, 'Deployment', 'hanzo-ml-worker');
    for (const c of [api, worker, container(r, 'Job', 'hanzo-ml-queues')]) expect(c).toMatchObject({ image: 'registry.example.com/hanzo/ml:1.2.3', imagePullPolicy: 'Always' });
    expect(config.scheduler).toMatchObject({ image_pull_policy: 'Always' });
    // The allow-list: the trainer by its digest, and the operator's own images.
    expect(config.scheduler.images).toEqual({
      trainer: 'registry.example.com/hanzo/ml-trainer@sha256:1111111111111111111111111111111111111111111111111111111111111111',
      cuda12: 'registry.example.com/ml/cuda12@sha256:2222222222222222222222222222222222222222222222222222222222222222',
    });
    expect(r.find('Deployment', 'hanzo-ml-api').spec.replicas).toBe(3);
    expect(r.find('Deployment', 'hanzo-ml-worker').spec.replicas).toBe(5);
    expect(podSpec(r, 'Deployment', 'hanzo-ml-worker').terminationGracePeriodSeconds).toBe(120);
    expect(api.resources).toEqual({ requests: { cpu: '500m', memory: '1Gi' }, limits: { memory: '3Gi' } });
    expect(config.server.public_url).toBe('https://ml.example.com');
    // Temporal, and its TLS Secret mounted where the config's tls_* keys point
    expect(config.temporal).toMatchObject({
      address: 'temporal.prod.example.com:7233',
      namespace: 'ml-prod',
      tls: true,
      tls_cert: '/etc/hanzo-ml-temporal-tls/tls.crt',
      tls_key: '/etc/hanzo-ml-temporal-tls/tls.key',
      tls_ca: '/etc/hanzo-ml-temporal-tls/ca.crt',
      tls_server_name: 'temporal.internal',
    });
    for (const name of ['hanzo-ml-api', 'hanzo-ml-worker']) {
      const spec = podSpec(r, 'Deployment', name);
      expect(spec.volumes).toContainEqual({
        name: 'temporal-tls',
        secret: { secretName: 'temporal-client-tls', items: [{ key: 'client.pem', path: 'tls.crt' }, { key: 'client-key.pem', path: 'tls.key' }, { key: 'ca.pem', path: 'ca.crt' }] },
      });
      expect(spec.containers[0].volumeMounts).toContainEqual({ name: 'temporal-tls', mountPath: '/etc/hanzo-ml-temporal-tls', readOnly: true });
    }
    expect(podSpec(defaults!, 'Deployment', 'hanzo-ml-api').volumes.map((v: Doc) => v.name)).not.toContain('temporal-tls');
    // database and object store: credentials from the named Secrets, addresses in the config
    for (const c of [api, worker]) {
      expect(envFrom(c, 'HANZO_ML_DATABASE_URL')).toEqual({ name: 'prod-db', key: 'url' });
      expect(envFrom(c, 'HANZO_ML_STORAGE_ACCESS_KEY')).toEqual({ name: 'prod-s3', key: 'access' });
      expect(envFrom(c, 'HANZO_ML_STORAGE_SECRET_KEY')).toEqual({ name: 'prod-s3', key: 'secret' });
    }
    expect(config.storage).toMatchObject({ endpoint: 'https://minio.example.com:9000', region: 'eu-west-1', encryption: 'sse-kms', kms_key_id: 'arn:aws:kms:eu-west-1:111122223333:key/prod-models', buckets: { datasets: 'prod-datasets', checkpoints: 'prod-checkpoints', models: 'prod-models' } });
    expect(config.storage.job_access).toEqual({ role_arn: 'arn:aws:iam::123456789012:role/prod-jobs-{organization}', sts_endpoint: 'https://sts.example.com', duration: '6h' });
    expect(config.scheduler).toMatchObject({ checkpoint_bucket: 'prod-checkpoints' });
    // Kafka, IAM
    expect(config.stream.brokers).toBe('kafka-0.example.com:9092,kafka-1.example.com:9092');
    expect(config.auth).toMatchObject({
      iam_url: 'https://iam.example.com',
      jwks_url: 'https://iam.example.com/keys',
      audience: 'hanzo-ml',
      algorithms: ['RS256', 'ES256'],
      clock_skew: '30s',
      organizations: { 'iam-acme': 'acme', 'iam-labs': 'labs' },
    });
    // The rendered configuration passes the start-up checks of a server reachable from other machines.
    expect(() => checkCombinations(config)).not.toThrow();
    // scheduler: jobs namespace (and the RBAC granted there), quotas, preemption, job sizes
    expect(config.scheduler).toMatchObject({ namespace: 'ml-jobs', cohort: 'prod', gpu_types: ['nvidia-h200'], max_concurrent_jobs: 8, cpu_per_job: '4', memory_per_job: '32Gi' });
    expect(config.scheduler.preemption).toEqual({ enabled: false, grace_period: '600s', policy: 'lowest_priority_first' });
    expect(config.scheduler.quotas).toEqual({
      acme: { max_gpus: { 'nvidia-h200': 16 }, max_concurrent_jobs: 3, priority: 'high', preemptible: false, weight: 2 },
      labs: { max_gpus: 8, max_concurrent_jobs: 1, priority: 'low', preemptible: true, weight: 1 },
    });
    expect(config.scheduler.organizations).toEqual(['sandbox']);
    expect(config.scheduler.job_network.object_store).toEqual({ cidrs: ['10.20.0.0/16'], ports: [9000] });
    expect(config.scheduler.job_network.dns).toEqual({ cidrs: [], namespace: 'dns-system', pod_labels: { app: 'coredns' }, ports: [53] });
    // metrics and logging
    expect(config.metrics.enabled).toBe(false);
    expect(r.find('Deployment', 'hanzo-ml-api').spec.template.metadata.annotations).not.toHaveProperty('prometheus.io/scrape');
    expect(config.logging).toEqual({ level: 'debug', format: 'text' });
    // Kueue's manager settings
    const kueue = parseYaml(r.find('ConfigMap', 'kueue-manager-config').data['controller_manager_config.yaml']);
    expect(kueue).toMatchObject({ kind: 'Configuration', waitForPodsReady: { timeout: '10m', requeuingStrategy: { backoffBaseSeconds: 30, backoffMaxSeconds: 600 } }, fairSharing: { preemptionStrategies: ['LessThanOrEqualToFinalShare'] } });
    expect(r.find('ConfigMap', 'kueue-manager-config').metadata.namespace).toBe('kueue-system');
  });
});

const canRunCluster = Boolean(helmDir && findClusterTools() && findKueue());
describe.skipIf(!canRunCluster)(`the Helm chart on a real API server${canRunCluster ? '' : ` (skipped: ${helmDir ? CLUSTER_TOOLS_MISSING : HELM_MISSING})`}`, () => {
  let cluster: TestCluster;
  const apply = (docs: Doc[]) => cluster.kubectl(['apply', '--server-side', '--field-manager=hanzo-ml-deploy-test', '-f', '-'], docs.map((d) => stringify(d)).join('---\n'));
  const rbacOf = (r: Rendered) => r.docs.filter((d) => ['ServiceAccount', 'Role', 'RoleBinding', 'ClusterRole', 'ClusterRoleBinding'].includes(d.kind));

  beforeAll(async () => {
    // With Kueue, so its resources exist for the RBAC checks and the queue hook below.
    cluster = await startTestCluster({ nodes: [], kueue: true });
    // Namespaced dry runs resolve their namespace: the release's is created for real first.
    await cluster.createNamespace(NAMESPACE);
  }, 300_000);

  afterAll(async () => {
    await cluster?.stop();
  });

  it.each([
    ['its defaults', () => defaults!],
    ['every value group set', () => full!],
  ])('accepts every object the chart renders with %s, hooks included (server-side dry run)', async (_name, rendered) => {
    const r = rendered();
    const out = await cluster.kubectl(['apply', '--server-side', '--dry-run=server', '--field-manager=hanzo-ml-deploy-test', '-f', '-'], r.text);
    expect(out.trim().split('\n')).toHaveLength(r.docs.length);
    expect(out).toMatch(/job\.batch\/hanzo-ml-queues serverside-applied \(server dry run\)/);
  });

  it('accepts the Secrets template the chart reads (server-side dry run)', async () => {
    const file = join(repoRoot, 'deploy/secrets.example.yaml');
    // The namespaces it names: the release's, and an organization's job namespace as the queue hook makes it.
    const namespaces = new Set(parseAllDocuments(readFileSync(file, 'utf8')).map((d) => (d.toJS() as Doc).metadata.namespace as string));
    for (const ns of namespaces) if (ns !== NAMESPACE) await cluster.createNamespace(ns);
    const out = await cluster.kubectl(['apply', '--server-side', '--dry-run=server', '-f', file]);
    expect(out.trim().split('\n')).toHaveLength(parseAllDocuments(readFileSync(file, 'utf8')).length);
  });

  /** The queue hook's ServiceAccount as its pod would be: a token of its own, in a kubeconfig of its own. */
  async function hookKubeConfig(): Promise<KubeConfig> {
    const token = (await cluster.kubectl(['create', 'token', 'hanzo-ml-queue-admin', '-n', NAMESPACE, '--duration=10m'])).trim();
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromOptions({
      clusters: [{ ...cluster.kubeConfig.getCurrentCluster()!, name: 'test' }],
      users: [{ name: 'queue-hook', token }],
      contexts: [{ name: 'queue-hook', cluster: 'test', user: 'queue-hook' }],
      currentContext: 'queue-hook',
    });
    return kubeConfig;
  }

  it("runs the queue hook's `hanzo-ml cluster apply` under its own ServiceAccount, creating every organization's namespace, RBAC, policy and queue", async () => {
    const r = full!;
    await apply(rbacOf(r));
    const kubeConfig = await hookKubeConfig();
    const applied = await applyClusterObjects(r.config(), kubeConfig);
    const line = (o: { kind: string; name: string; namespace?: string; outcome: string }) => `${o.kind}/${o.name}${o.namespace ? ` in ${o.namespace}` : ''} ${o.outcome}`;
    expect(applied.map(line)).toEqual(
      expect.arrayContaining([
        'Namespace/ml-jobs-acme created',
        'Namespace/ml-jobs-sandbox created',
        'ResourceQuota/hanzo-ml-jobs in ml-jobs-acme created',
        'Role/hanzo-ml-worker in ml-jobs-labs created',
        'RoleBinding/hanzo-ml-worker in ml-jobs-sandbox created',
        'RoleBinding/hanzo-ml-queue-reader in ml-jobs-acme created',
        'NetworkPolicy/hanzo-ml-jobs in ml-jobs-sandbox created',
        'ResourceFlavor/hanzo-ml-nvidia-h200 created',
        'ClusterQueue/hanzo-ml-acme created',
        'ClusterQueue/hanzo-ml-labs created',
        'LocalQueue/acme in ml-jobs-acme created',
        'LocalQueue/labs in ml-jobs-labs created',
      ]),
    );
    // sandbox runs jobs without a queue: a namespace and its policy and RBAC, no quota, no Kueue queue.
    expect(applied.filter((o) => o.namespace === 'ml-jobs-sandbox').map((o) => o.kind).sort()).toEqual(['NetworkPolicy', 'Role', 'RoleBinding', 'Role', 'RoleBinding'].sort());
    const queue = JSON.parse(await cluster.kubectl(['get', 'clusterqueue', 'hanzo-ml-acme', '-o', 'json'])) as Doc;
    expect(queue.spec.cohortName).toBe('prod');
    const policy = JSON.parse(await cluster.kubectl(['get', 'networkpolicy', 'hanzo-ml-jobs', '-n', 'ml-jobs-acme', '-o', 'json'])) as Doc;
    expect(policy.spec.egress).toContainEqual({ to: [{ ipBlock: { cidr: '10.20.0.0/16' } }], ports: [{ protocol: 'TCP', port: 9000 }] });
    // A second run (the next upgrade) changes nothing.
    expect((await applyClusterObjects(r.config(), kubeConfig)).every((o) => o.outcome === 'unchanged')).toBe(true);
  });

  it("lets the worker run Jobs in its organizations' namespaces and read nodes, and nothing beyond them", async () => {
    const as = (sa: string) => async (verb: string, resource: string, namespace: string) =>
      (await cluster.kubectl(['auth', 'can-i', verb, resource, '-n', namespace, `--as=system:serviceaccount:${NAMESPACE}:${sa}`]).catch((e: Error) => e.message)).trim().endsWith('yes');
    const can = as('hanzo-ml-worker');
    const api = as('hanzo-ml-api');
    const hook = as('hanzo-ml-queue-admin');
    const needed = [['create', 'jobs.batch'], ['get', 'jobs.batch'], ['delete', 'jobs.batch'], ['list', 'pods'], ['delete', 'pods'], ['get', 'pods/log'], ['create', 'services'], ['patch', 'services'], ['create', 'secrets'], ['patch', 'secrets'], ['create', 'networkpolicies.networking.k8s.io']];
    for (const ns of ['ml-jobs-acme', 'ml-jobs-sandbox']) for (const [verb, resource] of needed) expect(await can(verb!, resource!, ns), `${verb} ${resource} in ${ns}`).toBe(true);
    expect(await can('list', 'nodes', 'default')).toBe(true);
    expect(await can('get', 'namespaces', 'default')).toBe(true);
    expect(await can('get', 'secrets', 'ml-jobs-acme')).toBe(false);
    expect(await can('list', 'secrets', 'ml-jobs-acme')).toBe(false);
    expect(await can('patch', 'nodes', 'default')).toBe(false);
    expect(await can('create', 'namespaces', 'default')).toBe(false);
    for (const ns of [NAMESPACE, 'default', 'kube-system', 'ml-jobs']) expect(await can('create', 'jobs.batch', ns), `create jobs in ${ns}`).toBe(false);
    // Kueue: the worker and the API read queues; neither may change them (that is the queue hook's).
    for (const ask of [can, api]) {
      expect(await ask('list', 'workloads.kueue.x-k8s.io', 'ml-jobs-acme')).toBe(true);
      expect(await ask('get', 'clusterqueues.kueue.x-k8s.io', 'default')).toBe(true);
      expect(await ask('create', 'clusterqueues.kueue.x-k8s.io', 'default')).toBe(false);
      expect(await ask('delete', 'workloads.kueue.x-k8s.io', 'ml-jobs-acme')).toBe(false);
    }
    expect(await api('create', 'jobs.batch', 'ml-jobs-acme')).toBe(false);
    // The hook makes the organizations' objects and nothing else: no Jobs, no Secrets, no Workloads, and it may
    // grant (escalate, bind) only the worker's and the API's Roles.
    expect(await hook('create', 'clusterqueues.kueue.x-k8s.io', 'default')).toBe(true);
    expect(await hook('escalate', 'roles.rbac.authorization.k8s.io/hanzo-ml-worker', 'ml-jobs-acme')).toBe(true);
    expect(await hook('escalate', 'roles.rbac.authorization.k8s.io/admin', 'ml-jobs-acme')).toBe(false);
    expect(await hook('bind', 'clusterroles.rbac.authorization.k8s.io/cluster-admin', 'ml-jobs-acme')).toBe(false);
    expect(await hook('create', 'jobs.batch', 'ml-jobs-acme')).toBe(false);
    expect(await hook('get', 'secrets', NAMESPACE)).toBe(false);
    expect(await hook('delete', 'workloads.kueue.x-k8s.io', 'ml-jobs-acme')).toBe(false);
  });
});

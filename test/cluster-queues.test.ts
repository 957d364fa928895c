// Fair-share GPU queues and tenant isolation on the test cluster with a real Kueue (v0.19.2, built from its Go
// module): each organization's namespace, quota, RBAC, network policy and Kueue queue as `hanzo-ml cluster apply`
// makes them from the configuration, and Jobs from the KubernetesExecutor entering through them. The jobs are small shell commands run by the kubelet stand-in (the executor's `command` option
// replaces the trainer image's job runner, which these tests are not about).
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { BatchV1Api, CoreV1Api, CustomObjectsApi, NetworkingV1Api, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigSchema, type Config } from '../contracts/config.js';
import { KubernetesExecutor } from '../jobs/executor/kubernetes.js';
import type { JobRequest, JobState } from '../jobs/executor/types.js';
import { createLogger } from '../lib/log.js';
import { applyClusterObjects } from '../jobs/queue/kueue-apply.js';
import { queueStatus } from '../jobs/queue/queue-status.js';
import { openCatalogue, type Catalogue, type Db } from '../db/client.js';
import { startTestCluster, type TestCluster } from './support/cluster/control-plane.js';
import { CLUSTER_TOOLS_MISSING, findClusterTools, findKueue, KUEUE_MISSING, repoRoot } from './support/cluster/tools.js';

const exec = promisify(execFile);
const ready = findClusterTools() !== null && findKueue() !== null;
/** scheduler.namespace: each organization's jobs run in hanzo-ml-jobs-<organization>. */
const PREFIX = 'hanzo-ml-jobs';
const nsOf = (org: string) => `${PREFIX}-${org}`;

const quotas = {
  // a and b share 16 A100s in one cohort; a is preemptible, so it may borrow b's idle half.
  'org-a': { max_gpus: { a100: 8, t4: 0 }, max_concurrent_jobs: 8, priority: 'low', preemptible: true },
  'org-b': { max_gpus: { a100: 8, t4: 0 }, max_concurrent_jobs: 8, priority: 'high' },
  // g owns the four one-GPU T4 nodes, for the gang test.
  'org-g': { max_gpus: { a100: 0, t4: 4 }, max_concurrent_jobs: 8, priority: 'medium' },
};
const settings = {
  // Job pods' object-store access is minted from each organization's role (none is assumed here: no job reads the store).
  storage: { endpoint: 'http://127.0.0.1:1', job_access: { role_arn: 'arn:aws:iam::123456789012:role/hanzo-ml-jobs-{organization}' } },
  server: { public_url: 'http://127.0.0.1:8057' },
  scheduler: {
    executor: 'kubernetes', namespace: PREFIX, gpu_types: ['a100', 't4'], quotas, preemption: { grace_period: '5s' },
    worker_service_account: 'hanzo-ml/hanzo-ml-worker', api_service_account: 'hanzo-ml/hanzo-ml-api',
  },
};

async function waitFor<T>(what: string, probe: () => Promise<T | undefined | null | false>, ms = 60_000): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown;
  for (;;) {
    const value = await probe().catch((err: unknown) => ((last = err), undefined));
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? ` (last error: ${String(last)})` : ''}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

function request(name: string, org: string, gpus: number, o: { nodes?: number; gpuType?: string } = {}): JobRequest {
  return {
    name,
    envelopeUri: 'file:///unused',
    organizationId: org,
    kind: 'test',
    priority: null,
    resources: { nodes: o.nodes ?? 1, processes: 1, gpus_per_node: gpus, gpu_type: o.gpuType ?? 'a100', image: null, cpu: '100m', memory: '64Mi' },
    env: {},
    secretEnv: {},
  };
}

/** Runs until told to stop: exits 143 on SIGTERM, as the trainer does after its emergency checkpoint. */
const SLEEPER = ['sh', '-c', "trap 'echo sigterm; exit 143' TERM; echo started as $(id -u); touch /root-file 2>/dev/null || echo read-only root; while true; do sleep 1; done"];

describe.skipIf(!ready)(`fair-share GPU queues on Kueue${ready ? '' : ` (skipped: ${findClusterTools() ? KUEUE_MISSING : CLUSTER_TOOLS_MISSING})`}`, () => {
  let cluster: TestCluster;
  let config: Config;
  let executor: KubernetesExecutor;
  let batch: BatchV1Api;
  let core: CoreV1Api;
  let custom: CustomObjectsApi;
  const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-queues-'));
  let catalogue: Catalogue;
  let db: Db;

  /** `hanzo-ml cluster apply` as a user runs it, with a config file; resolves to its exit code and output. */
  async function clusterApply(configDoc: unknown): Promise<{ code: number; stdout: string; stderr: string }> {
    const file = join(home, `config-${Date.now()}.yaml`);
    writeFileSync(file, stringify(configDoc));
    const env = { ...process.env, HANZO_ML_HOME: home, HANZO_ML_CONFIG: file, HANZO_ML_SCHEDULER_KUBECONFIG: cluster.kubeconfigPath };
    return exec(join(repoRoot, 'bin/hanzo-ml'), ['cluster', 'apply'], { env }).then(
      (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
      (err: { code: number; stdout: string; stderr: string }) => ({ code: err.code, stdout: err.stdout, stderr: err.stderr }),
    );
  }
  const state = (job: JobRequest): Promise<JobState> => executor.state(job);
  const runningPods = async (job: string, org = 'org-g') => (await core.listNamespacedPod({ namespace: nsOf(org), labelSelector: `job-name=${job}` })).items.filter((p) => p.status?.phase === 'Running' && !p.metadata?.deletionTimestamp);

  beforeAll(async () => {
    cluster = await startTestCluster({
      nodes: [
        { name: 'a100-0', gpus: 8, gpuType: 'a100' },
        { name: 'a100-1', gpus: 8, gpuType: 'a100' },
        ...[0, 1, 2, 3].map((i) => ({ name: `t4-${i}`, gpus: 1, gpuType: 't4' })),
      ],
      kueue: { waitForPodsReady: '2m' },
    });
    batch = cluster.kubeConfig.makeApiClient(BatchV1Api);
    core = cluster.kubeConfig.makeApiClient(CoreV1Api);
    custom = cluster.kubeConfig.makeApiClient(CustomObjectsApi);
    catalogue = await openCatalogue({});
    db = catalogue.db;
    config = ConfigSchema.parse(settings);
    const log = createLogger({ level: 'warn', format: 'text' });
    executor = new KubernetesExecutor({
      kubeConfig: cluster.kubeConfig, namespacePrefix: PREFIX, images: { trainer: 'busybox' }, imagePullPolicy: 'IfNotPresent',
      gracePeriodSeconds: 5, cpu: '100m', memory: '64Mi', gpuTypes: ['a100', 't4'], quotas: config.scheduler.quotas, command: () => SLEEPER, log,
    });
  }, 300_000);

  afterAll(async () => {
    await catalogue?.close();
    await cluster?.stop();
  });

  it('cluster apply creates a flavor per gpu_type, the priority classes and one namespace and queue per organization, then changes nothing', async () => {
    const first = await clusterApply(settings);
    expect(first.code, first.stderr).toBe(0);
    for (const line of ['namespace/hanzo-ml-jobs-org-a created', 'resourceflavor/hanzo-ml-a100 created', 'resourceflavor/hanzo-ml-t4 created', 'workloadpriorityclass/hanzo-ml-high created', 'clusterqueue/hanzo-ml-org-a created', 'localqueue/org-b (namespace hanzo-ml-jobs-org-b) created'])
      expect(first.stdout).toContain(line);
    // What the operator provisions in each organization's namespace: the object-store credentials its jobs read.
    for (const org of Object.keys(quotas)) await core.createNamespacedSecret({ namespace: nsOf(org), body: { metadata: { name: 'storage' }, stringData: { AWS_ACCESS_KEY_ID: 'unused' } } });
    const cq = (await custom.getClusterCustomObject({ group: 'kueue.x-k8s.io', version: 'v1beta2', plural: 'clusterqueues', name: 'hanzo-ml-org-b' })) as { spec: Record<string, any> }; // eslint-disable-line @typescript-eslint/no-explicit-any
    expect(cq.spec.cohortName).toBe('hanzo-ml');
    // Org B's queue admits Jobs of org B's namespace only.
    expect(cq.spec.namespaceSelector).toEqual({ matchLabels: { 'kubernetes.io/metadata.name': 'hanzo-ml-jobs-org-b' } });
    expect(cq.spec.resourceGroups[0].flavors[0]).toEqual({ name: 'hanzo-ml-a100', resources: [{ name: 'nvidia.com/gpu', nominalQuota: '8', borrowingLimit: '0' }] });
    const again = await clusterApply(settings);
    expect(again.code).toBe(0);
    expect(again.stdout.trim().split('\n').every((l) => l.endsWith(' unchanged')), again.stdout + again.stderr).toBe(true);
    // The same objects the test's executor relies on.
    expect((await applyClusterObjects(config, cluster.kubeConfig)).every((o) => o.outcome === 'unchanged')).toBe(true);
  });

  it('gives each organization a namespace of its own with its quota, the worker\'s RBAC and a network policy, read back from the API server', async () => {
    const rbac = cluster.kubeConfig.makeApiClient(RbacAuthorizationV1Api);
    const networking = cluster.kubeConfig.makeApiClient(NetworkingV1Api);
    const ns = await core.readNamespace({ name: nsOf('org-a') });
    // The API server's Pod Security admission refuses any pod of the namespace that is not "restricted".
    expect(ns.metadata!.labels).toMatchObject({ 'pod-security.kubernetes.io/enforce': 'restricted', 'hanzo-ml.dev/organization': 'org-a' });
    const quota = await core.readNamespacedResourceQuota({ name: 'hanzo-ml-jobs', namespace: nsOf('org-b') });
    // B never borrows: its own 8 A100s; 8 concurrent jobs of at most limits.max_nodes (16) pods each.
    expect(quota.spec!.hard).toEqual({ 'requests.nvidia.com/gpu': '8', pods: '128' });
    // A is preemptible: it may hold what it borrows from the cohort (16 A100s and g's 4 T4s).
    expect((await core.readNamespacedResourceQuota({ name: 'hanzo-ml-jobs', namespace: nsOf('org-a') })).spec!.hard!['requests.nvidia.com/gpu']).toBe('20');
    const queue = (await custom.getNamespacedCustomObject({ group: 'kueue.x-k8s.io', version: 'v1beta2', namespace: nsOf('org-a'), plural: 'localqueues', name: 'org-a' })) as { spec: { clusterQueue: string } };
    expect(queue.spec.clusterQueue).toBe('hanzo-ml-org-a');
    const role = await rbac.readNamespacedRole({ name: 'hanzo-ml-worker', namespace: nsOf('org-a') });
    const granted = role.rules!.flatMap((r) => r.resources!.map((res) => `${r.apiGroups![0] || 'core'}/${res}: ${r.verbs.join(',')}`));
    expect(granted).toEqual(expect.arrayContaining(['batch/jobs: create,get,list,watch,patch,delete', 'core/pods/log: get', 'core/secrets: create,patch,delete', 'kueue.x-k8s.io/workloads: get,list']));
    // Secrets are created, never read back: the worker cannot read another job's token.
    expect(granted.join('\n')).not.toMatch(/core\/secrets: .*\bget\b/);
    const binding = await rbac.readNamespacedRoleBinding({ name: 'hanzo-ml-worker', namespace: nsOf('org-a') });
    expect(binding.subjects).toEqual([{ kind: 'ServiceAccount', name: 'hanzo-ml-worker', namespace: 'hanzo-ml' }]);
    expect((await rbac.readNamespacedRoleBinding({ name: 'hanzo-ml-queue-reader', namespace: nsOf('org-a') })).subjects![0]!.name).toBe('hanzo-ml-api');
    const policy = await networking.readNamespacedNetworkPolicy({ name: 'hanzo-ml-jobs', namespace: nsOf('org-a') });
    expect(policy.spec!.podSelector).toEqual({});
    expect(policy.spec!.policyTypes).toEqual(['Ingress', 'Egress']);
    expect(policy.spec!.ingress ?? []).toEqual([]);
    expect(policy.spec!.egress!.map((e) => ({ to: e.to, ports: e.ports!.map((p) => `${p.protocol}/${p.port}`) }))).toEqual([
      { to: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } }, podSelector: { matchLabels: { 'k8s-app': 'kube-dns' } } }], ports: ['UDP/53', 'TCP/53'] },
      { to: [{ ipBlock: { cidr: '127.0.0.1/32' } }], ports: ['TCP/1'] }, // storage.endpoint
      { to: [{ ipBlock: { cidr: '127.0.0.1/32' } }], ports: ['TCP/8057'] }, // server.public_url
    ]);
  });

  it('refuses a job whose image is not on scheduler.images before any object of it exists', async () => {
    const job = { ...request('bad-image', 'org-a', 0), resources: { ...request('bad-image', 'org-a', 0).resources, image: 'miner' } };
    await expect(executor.validate(job)).rejects.toThrow(/hardware\.image "miner" is not one of scheduler\.images \(trainer\): only an operator adds images/);
    await expect(executor.startOrAttach(job)).rejects.toThrow(/not one of scheduler\.images/);
    await expect(batch.readNamespacedJob({ name: 'bad-image', namespace: nsOf('org-a') })).rejects.toMatchObject({ code: 404 });
    await expect(core.readNamespacedSecret({ name: 'bad-image-secrets', namespace: nsOf('org-a') })).rejects.toMatchObject({ code: 404 });
  });

  it('runs an organization\'s job in its own namespace, as a non-root user on a read-only root, with nothing of the host', async () => {
    const job = request('a-secure', 'org-a', 1);
    await executor.validate(job);
    await executor.startOrAttach(job);
    await waitFor('the job running', async () => (await state(job)).state === 'running');
    for (const org of ['org-b', 'org-g']) expect((await batch.listNamespacedJob({ namespace: nsOf(org) })).items.map((j) => j.metadata!.name)).not.toContain('a-secure');
    const [pod] = await runningPods('a-secure', 'org-a');
    const spec = pod!.spec!;
    expect(spec.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 1000, seccompProfile: { type: 'RuntimeDefault' } });
    expect(spec.containers[0]!.securityContext).toMatchObject({ allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } });
    expect([spec.hostNetwork, spec.hostPID, spec.hostIPC].every((v) => !v)).toBe(true);
    expect(spec.volumes!.filter((v) => v.hostPath)).toEqual([]);
    expect(spec.volumes!.filter((v) => v.emptyDir).map((v) => v.name)).toEqual(['scratch', 'tmp', 'home']);
    expect(spec.automountServiceAccountToken).toBe(false);
    if (cluster.containerRuntime.kind === 'podman') {
      // The container really ran that way: podman gave it uid 1000 and a read-only root.
      const log = await waitFor('the job\'s first lines', async () => {
        const text = await core.readNamespacedPodLog({ name: pod!.metadata!.name!, namespace: nsOf('org-a') });
        return text.includes('read-only root') ? text : null;
      });
      expect(log).toContain('started as 1000');
    }
    // The namespace admits no pod that asks for more (Pod Security "restricted"), whoever creates it.
    await expect(core.createNamespacedPod({ namespace: nsOf('org-a'), body: { metadata: { name: 'root-pod' }, spec: { containers: [{ name: 'c', image: 'busybox', command: ['true'] }] } } })).rejects.toMatchObject({ code: 403 });
    await executor.stop(job, 1);
  }, 120_000);

  it('refuses a malformed quota naming its key, and applies nothing', async () => {
    const bad = (quota: Record<string, unknown>) => ({ ...settings, scheduler: { ...settings.scheduler, quotas: { ...quotas, 'org-new': quota } } });
    const cases: [unknown, RegExp][] = [
      [bad({ max_gpus: -1, max_concurrent_jobs: 1 }), /scheduler\.quotas\.org-new\.max_gpus/],
      [bad({ max_gpus: { h200: 8 }, max_concurrent_jobs: 1 }), /scheduler\.quotas\.org-new\.max_gpus\.h200.*unknown gpu_type "h200"/],
      [bad({ max_gpus: 8, max_concurrent_jobs: 1, priority: 'urgent' }), /scheduler\.quotas\.org-new\.priority/],
    ];
    for (const [doc, message] of cases) {
      const out = await clusterApply(doc);
      expect(out.code).not.toBe(0);
      expect(out.stderr).toMatch(message);
      expect(out.stdout).toBe('');
    }
    const queues = (await custom.listClusterCustomObject({ group: 'kueue.x-k8s.io', version: 'v1beta2', plural: 'clusterqueues' })) as { items: { metadata: { name: string } }[] };
    expect(queues.items.map((q) => q.metadata.name).sort()).toEqual(['hanzo-ml-org-a', 'hanzo-ml-org-b', 'hanzo-ml-org-g']);
  });

  it('lets org A borrow org B\'s idle GPUs, and gives them back within the grace period when B submits', async () => {
    const a1 = request('a-first', 'org-a', 8);
    const a2 = request('a-borrowing', 'org-a', 8);
    for (const job of [a1, a2]) {
      await executor.validate(job);
      await executor.startOrAttach(job);
    }
    // Both run: the second on B's nominal quota, which B is not using.
    await waitFor('both of A\'s jobs running', async () => (await state(a1)).state === 'running' && (await state(a2)).state === 'running');
    // `hanzo-ml queue list` / GET /v1/queues: 16 GPUs in use, 8 of them borrowed from B's idle quota.
    const [queueA] = await waitFor('Kueue to count the borrowing', async () => {
      const q = await queueStatus(db, config, cluster.kubeConfig, ['org-a']);
      return q[0]?.borrowed_gpus === 8 ? q : null;
    });
    expect(queueA).toMatchObject({ organization: 'org-a', admitted: 2, pending: 0, gpus_in_use: 16, borrowed_gpus: 8 });
    const b1 = request('b-reclaims', 'org-b', 8);
    await executor.startOrAttach(b1);
    const t0 = Date.now();
    const preempted = await waitFor('a borrowing job preempted', async () => {
      for (const job of [a2, a1]) {
        const s = await state(job);
        if (s.state === 'pending' && s.evicted) return { job, s };
      }
      return null;
    });
    expect(preempted.s.reason).toBe('Preempted');
    expect(preempted.s.queue?.queue).toBe('org-a');
    await waitFor('B\'s job running', async () => (await state(b1)).state === 'running');
    // SIGTERM, the job's 5 s grace period, the pod gone, B's pod started: all within the grace period and scheduling.
    expect(Date.now() - t0).toBeLessThan(5_000 + 20_000);
    // The preempted job waits in A's queue, first in line, for quota to come back.
    const waiting = await state(preempted.job);
    expect(waiting).toMatchObject({ state: 'pending', queue: { queue: 'org-a', position: 1 } });
    for (const job of [a1, a2, b1]) await executor.stop(job, 1);
  }, 180_000);

  it('starts no pod of a 4-pod gang while only 3 GPUs are free, and all 4 when the fourth frees up', async () => {
    const holder = request('g-holder', 'org-g', 1, { gpuType: 't4' });
    await executor.startOrAttach(holder);
    await waitFor('the holder running', async () => (await state(holder)).state === 'running');
    const gang = request('g-gang', 'org-g', 1, { nodes: 4, gpuType: 't4' });
    await executor.validate(gang);
    await executor.startOrAttach(gang);
    const queued = await waitFor('the gang queued for quota', async () => {
      const s = await state(gang);
      return s.state === 'pending' && s.queue?.position === 1 ? s : null;
    });
    expect(queued.message).toMatch(/position 1 in queue org-g/);
    const [queueG] = await queueStatus(db, config, cluster.kubeConfig, ['org-g']);
    expect(queueG!.jobs).toEqual([
      { job: 'g-holder', stage: 'admitted', position: null, gpus: 1, reason: null },
      expect.objectContaining({ job: 'g-gang', stage: 'queued', position: 1, gpus: 4 }),
    ]);
    // Several polls later: still suspended, not one pod created.
    for (let i = 0; i < 8; i++) {
      expect((await batch.readNamespacedJob({ name: 'g-gang', namespace: nsOf('org-g') })).spec?.suspend).toBe(true);
      expect((await core.listNamespacedPod({ namespace: nsOf('org-g'), labelSelector: 'job-name=g-gang' })).items).toHaveLength(0);
      await new Promise((r) => setTimeout(r, 500));
    }
    await executor.stop(holder, 1);
    await waitFor('all four gang pods running', async () => (await runningPods('g-gang')).length === 4, 90_000);
    expect((await state(gang)).state).toBe('running');
    await executor.stop(gang, 1);
  }, 240_000);

  it('refuses a job of an organization without a queue, and a priority above its organization\'s', async () => {
    await expect(executor.validate(request('x', 'org-unknown', 1))).rejects.toThrow(/organization org-unknown has no namespace on the cluster \(hanzo-ml-jobs-org-unknown\)/);
    await expect(executor.validate({ ...request('y', 'org-a', 1), priority: 'high' })).rejects.toThrow(/priority "high" is above organization org-a's \("low"/);
  });
});

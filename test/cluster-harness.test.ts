// The test Kubernetes cluster (test/support/cluster): the real API server, controller manager and scheduler,
// KWOK's fake GPU nodes and the kubelet stand-in, driven with batch/v1 Jobs shaped as the product creates them.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BatchV1Api, CoreV1Api, Watch, type V1Container, type V1Job, type V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestCluster, type TestCluster } from './support/cluster/control-plane.js';
import { CLUSTER_TOOLS_MISSING, findClusterTools } from './support/cluster/tools.js';

const tools = findClusterTools();
const NS = 'harness';

async function waitFor<T>(what: string, probe: () => Promise<T | undefined | null | false>, ms = 45_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

function gpuJob(name: string, gpus: number, container: Partial<V1Container>): V1Job {
  return {
    metadata: { name, namespace: NS },
    spec: {
      completionMode: 'Indexed',
      completions: 1,
      parallelism: 1,
      backoffLimit: 0,
      template: {
        spec: {
          restartPolicy: 'Never',
          nodeSelector: { 'hanzo-ml.dev/gpu-type': 'a100' },
          containers: [{ name: 'trainer', image: 'busybox', resources: { limits: { 'nvidia.com/gpu': String(gpus) } }, ...container }],
        },
      },
    },
  };
}

describe.skipIf(!tools)(`test Kubernetes cluster${tools ? '' : ` (skipped: ${CLUSTER_TOOLS_MISSING})`}`, () => {
  let cluster: TestCluster;
  let core: CoreV1Api;
  let batch: BatchV1Api;

  beforeAll(async () => {
    const t0 = Date.now();
    cluster = await startTestCluster({
      nodes: [
        { name: 'gpu-a', gpus: 8 },
        { name: 'gpu-b', gpus: 8 },
      ],
      imageEnv: { busybox: { FROM_IMAGE: 'from-image' } },
    });
    console.log(`test cluster started in ${((Date.now() - t0) / 1000).toFixed(1)} s (${cluster.dir})`);
    core = cluster.kubeConfig.makeApiClient(CoreV1Api);
    batch = cluster.kubeConfig.makeApiClient(BatchV1Api);
    await cluster.createNamespace(NS);
  }, 300_000);

  afterAll(async () => {
    await cluster?.stop();
  });

  const podsOf = async (job: string) => (await core.listNamespacedPod({ namespace: NS, labelSelector: `job-name=${job}` })).items;
  const jobCondition = async (job: string, type: string) =>
    (await batch.readNamespacedJob({ name: job, namespace: NS })).status?.conditions?.find((c) => c.type === type && c.status === 'True');

  it('schedules a GPU Job onto a fake node, runs it, serves its log through the API and fails the Job with exit code 3', async () => {
    await batch.createNamespacedJob({ namespace: NS, body: gpuJob('fails', 2, { command: ['sh', '-c', 'echo hello-$JOB_COMPLETION_INDEX; exit 3'] }) });
    await waitFor('Job fails to end Failed', () => jobCondition('fails', 'Failed'));
    const [pod] = await podsOf('fails');
    expect(cluster.nodes).toContain(pod!.spec!.nodeName);
    expect(pod!.status!.phase).toBe('Failed');
    const terminated = pod!.status!.containerStatuses![0]!.state!.terminated!;
    expect(terminated).toMatchObject({ exitCode: 3, reason: 'Error' });
    expect(terminated.startedAt).toBeDefined();
    const log = await core.readNamespacedPodLog({ name: pod!.metadata!.name!, namespace: NS, container: 'trainer' });
    expect(log).toBe('hello-0\n');
    expect(await cluster.kubectl(['logs', '-n', NS, pod!.metadata!.name!, '--tail=1'])).toBe('hello-0\n');
  });

  it('completes a Job that exits 0, with the environment and volumes a kubelet would give its container', async () => {
    await core.createNamespacedSecret({ namespace: NS, body: { metadata: { name: 'creds' }, stringData: { token: 's3cret' } } });
    await core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name: 'settings' }, data: { greeting: 'hi', mode: 'fast' } } });
    const env = [
      { name: 'TOKEN', valueFrom: { secretKeyRef: { name: 'creds', key: 'token' } } },
      { name: 'GREETING', valueFrom: { configMapKeyRef: { name: 'settings', key: 'greeting' } } },
      { name: 'POD_NS', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
      { name: 'PLAIN', value: '$(GREETING)-there' },
      { name: 'SCRATCH', value: '/scratch' },
      { name: 'MASTER', value: 'succeeds-0.succeeds.harness.svc:29500' },
    ];
    // Paths under a volume's mountPath and cluster DNS names are translated for a process on this machine.
    const script = 'echo "$TOKEN $GREETING $POD_NS $PLAIN $CFG_mode $JOB_COMPLETION_INDEX $FROM_IMAGE"; echo ok > $SCRATCH/f; cat /scratch/f /etc/creds/token; echo; echo $MASTER';
    const job = gpuJob('succeeds', 1, {
      command: ['sh', '-c', script],
      env,
      envFrom: [{ configMapRef: { name: 'settings' }, prefix: 'CFG_' }],
      volumeMounts: [
        { name: 'scratch', mountPath: '/scratch' },
        { name: 'creds', mountPath: '/etc/creds', readOnly: true },
      ],
    });
    job.spec!.template.spec!.volumes = [
      { name: 'scratch', emptyDir: {} },
      { name: 'creds', secret: { secretName: 'creds' } },
    ];
    await batch.createNamespacedJob({ namespace: NS, body: job });
    await waitFor('Job succeeds to end Complete', () => jobCondition('succeeds', 'Complete'));
    const [pod] = await podsOf('succeeds');
    expect(pod!.status!.phase).toBe('Succeeded');
    expect(pod!.status!.containerStatuses![0]!.state!.terminated).toMatchObject({ exitCode: 0, reason: 'Completed' });
    const log = await core.readNamespacedPodLog({ name: pod!.metadata!.name!, namespace: NS });
    expect(log).toBe('s3cret hi harness hi-there fast 0 from-image\nok\ns3cret\n127.0.0.1:29500\n');
  });

  it('delivers SIGTERM to a deleted pod within its grace period, then removes the pod', async () => {
    // The trap writes into an emptyDir, which the test reads from the stand-in's side.
    const script = `trap 'echo term > /out/terminated; exit 0' TERM; echo started; sleep 60 & wait $!`;
    const job = gpuJob('sleeper', 1, { command: ['sh', '-c', script], volumeMounts: [{ name: 'out', mountPath: '/out' }] });
    job.spec!.template.spec!.volumes = [{ name: 'out', emptyDir: {} }];
    await batch.createNamespacedJob({ namespace: NS, body: job });
    const pod = await waitFor('sleeper running', async () => (await podsOf('sleeper')).find((p) => p.status?.phase === 'Running'));
    const name = pod.metadata!.name!;
    const marker = join(cluster.dir, 'kubelet', 'pods', `${NS}_${name}_${pod.metadata!.uid}`, 'volumes', 'out', 'terminated');
    await waitFor('the trap installed', async () => (await core.readNamespacedPodLog({ name, namespace: NS })).includes('started'));
    const t0 = Date.now();
    await core.deleteNamespacedPod({ name, namespace: NS, body: { gracePeriodSeconds: 10 } });
    await waitFor('SIGTERM to reach the container', async () => existsSync(marker), 10_000);
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(readFileSync(marker, 'utf8')).toBe('term\n');
    await waitFor('the pod removed', () => core.readNamespacedPod({ name, namespace: NS }).then(() => false, (err: { code?: number }) => err.code === 404), 30_000);
    await batch.deleteNamespacedJob({ name: 'sleeper', namespace: NS, propagationPolicy: 'Background' });
  });

  // Only an explicit HANZO_ML_TEST_CONTAINER_RUNTIME=process leaves this out: without podman or the images it fails.
  it.skipIf(process.env.HANZO_ML_TEST_CONTAINER_RUNTIME === 'process')('runs the container from its image with podman, as the pod\'s security context says', async () => {
    expect(cluster.containerRuntime, 'scripts/images.sh builds localhost/busybox; podman runs it').toMatchObject({ kind: 'podman' });
    const script = 'id -u; id -g; readlink /bin/sh; touch /rootfile 2>/dev/null && echo root-writable || echo root-read-only; echo ok > /out/f && cat /out/f; pwd';
    const job = gpuJob('from-image', 1, {
      command: ['sh', '-c', script],
      workingDir: '/out',
      securityContext: { runAsUser: 1000, runAsGroup: 1000, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } },
      volumeMounts: [{ name: 'out', mountPath: '/out' }],
    });
    job.spec!.template.spec!.volumes = [{ name: 'out', emptyDir: {} }];
    await batch.createNamespacedJob({ namespace: NS, body: job });
    await waitFor('Job from-image to end Complete', () => jobCondition('from-image', 'Complete'));
    const [pod] = await podsOf('from-image');
    const log = await core.readNamespacedPodLog({ name: pod!.metadata!.name!, namespace: NS });
    // busybox's sh, not the machine's: the root filesystem is the image's.
    expect(log).toBe('1000\n1000\nbusybox\nroot-read-only\nok\n/out\n');
  });

  it('reports an image it cannot pull as ErrImagePull, then ImagePullBackOff', async () => {
    const reasons: string[] = [];
    const watch = await new Watch(cluster.kubeConfig).watch(
      `/api/v1/namespaces/${NS}/pods`,
      { fieldSelector: 'metadata.name=unpullable' },
      (_type: string, pod: V1Pod) => {
        const reason = pod.status?.containerStatuses?.[0]?.state?.waiting?.reason;
        if (reason && reasons.at(-1) !== reason) reasons.push(reason);
      },
      () => undefined,
    );
    try {
      await core.createNamespacedPod({
        namespace: NS,
        body: { metadata: { name: 'unpullable' }, spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'registry.example.com/does-not-exist:1', command: ['true'] }] } },
      });
      await waitFor('ImagePullBackOff', async () => reasons.includes('ImagePullBackOff'));
    } finally {
      watch.abort();
    }
    expect(reasons.slice(0, 2)).toEqual(['ErrImagePull', 'ImagePullBackOff']);
    const pod = await core.readNamespacedPod({ name: 'unpullable', namespace: NS });
    expect(pod.status!.phase).toBe('Pending');
    expect(pod.status!.containerStatuses![0]!.state!.waiting!.message).toContain('does-not-exist');
  });

  it('leaves a Job asking for more GPUs than any node has Pending and unschedulable', async () => {
    await batch.createNamespacedJob({ namespace: NS, body: gpuJob('too-big', 16, { command: ['true'] }) });
    const pod = await waitFor('the scheduler to give up on too-big', async () =>
      (await podsOf('too-big')).find((p) => p.status?.conditions?.some((c) => c.type === 'PodScheduled' && c.reason === 'Unschedulable')),
    );
    expect(pod.status!.phase).toBe('Pending');
    expect(pod.spec!.nodeName).toBeUndefined();
    expect(pod.status!.conditions!.find((c) => c.type === 'PodScheduled')!.message).toContain('Insufficient nvidia.com/gpu');
    const job = await batch.readNamespacedJob({ name: 'too-big', namespace: NS });
    expect(job.status?.conditions ?? []).toEqual([]);
  });
});

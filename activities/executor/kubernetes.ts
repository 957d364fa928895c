// Kubernetes executor: each job attempt is one batch/v1 Job with a deterministic name (an existing Job means
// attach, never a second one). The pod runs the job runner of the trainer image (`python -m hanzo_ml job`),
// which reads and writes only through the object store with credentials from a Secret named in config; its
// tracking token is its own, in a Secret owned by the Job. Multi-node jobs are Indexed Jobs with a headless
// Service and the torchrun rendezvous environment, all pods or none.
import { BatchV1Api, CoreV1Api, CustomObjectsApi, KubeConfig, PatchStrategy, setHeaderOptions, type V1EnvVar, type V1Job, type V1Node, type V1Pod } from '@kubernetes/client-node';
import { JOB_PRIORITIES, type Config, type JobPriority, type OrganizationQuota } from '../../contracts/config.js';
import { localQueueName, priorityClassName, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL } from '../../scheduling/kueue-objects.js';
import { evictionOf, listWorkloads, queuePlace, workloadOfJob, type Workload } from '../../scheduling/kueue-status.js';
import { sharedRead } from '../../lib/shared-read.js';
import { durationMs } from '../../lib/config.js';
import type { Logger } from '../../lib/log.js';
import { JobRejected, type JobExecutor, type JobRequest, type JobState } from './types.js';
import { podWaitingState, terminatedExit } from './kubernetes-status.js';

export const GPU_RESOURCE = 'nvidia.com/gpu';
export const GPU_TYPE_LABEL = 'hanzo-ml.dev/gpu-type';
const JOB_LABEL = 'hanzo-ml.dev/job';
const CONTAINER = 'job';
const RENDEZVOUS_PORT = 29500;
/** Exit codes of the trainer that a new pod of the same Job cannot fix: the activity decides (trainer/hanzo_ml/cli.py). */
const FAIL_JOB_EXIT_CODES = [1, 2, 3, 4];
/** SIGTERM'd after its emergency checkpoint: the Job's next pod resumes from it, without counting a failure. */
const PREEMPTED_EXIT_CODE = 143;

export interface KubernetesExecutorOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  image: string;
  imagePullPolicy: 'Always' | 'IfNotPresent' | 'Never';
  serviceAccount?: string | undefined;
  gracePeriodSeconds: number;
  cpu: string;
  memory: string;
  gpuTypes: string[];
  /**
   * scheduler.quotas: when any is configured, every Job enters through its organization's Kueue LocalQueue,
   * created suspended with the queue and priority-class labels (`hanzo-ml cluster apply` made the queues).
   */
  quotas: Record<string, OrganizationQuota>;
  /** The container's command; default the trainer image's job runner. Tests run small shell jobs through it. */
  command?: (job: JobRequest) => string[];
  log: Logger;
}

export function loadKubeConfig(path?: string): KubeConfig {
  const kc = new KubeConfig();
  if (path) kc.loadFromFile(path);
  else kc.loadFromDefault(); // $KUBECONFIG, ~/.kube/config, else the in-cluster service account
  return kc;
}

export function kubernetesExecutorFromConfig(config: Config, log: Logger): KubernetesExecutor {
  const s = config.scheduler;
  return new KubernetesExecutor({
    kubeConfig: loadKubeConfig(s.kubeconfig),
    namespace: s.namespace,
    image: s.default_image,
    imagePullPolicy: s.image_pull_policy,
    serviceAccount: s.service_account,
    gracePeriodSeconds: Math.round(durationMs(s.preemption.grace_period) / 1000),
    cpu: s.cpu_per_job,
    memory: s.memory_per_job,
    gpuTypes: s.gpu_types,
    quotas: s.quotas,
    log,
  });
}

const isStatus = (err: unknown, code: number): boolean => (err as { code?: number }).code === code;

export class KubernetesExecutor implements JobExecutor {
  readonly kind = 'kubernetes';
  readonly machineGpus = null;
  private readonly batch: BatchV1Api;
  private readonly core: CoreV1Api;
  private readonly custom: CustomObjectsApi;
  /** The jobs namespace's Workloads, one list shared by the polls of every queued job for 2 s. */
  private readonly workloads: () => Promise<Workload[]>;
  /** The cluster's nodes, shared by every job's validation for 10 s (GPU nodes come and go in minutes). */
  private readonly nodes: () => Promise<V1Node[]>;

  constructor(private readonly o: KubernetesExecutorOptions) {
    this.batch = o.kubeConfig.makeApiClient(BatchV1Api);
    this.core = o.kubeConfig.makeApiClient(CoreV1Api);
    this.custom = o.kubeConfig.makeApiClient(CustomObjectsApi);
    this.workloads = sharedRead(2_000, () => listWorkloads(this.custom, o.namespace, { cached: true }));
    this.nodes = sharedRead(10_000, async () => (await this.core.listNode({ resourceVersion: '0' })).items);
  }

  private get queued(): boolean {
    return Object.keys(this.o.quotas).length > 0;
  }

  /** The job's priority: what it asked for, never above its organization's. */
  private priorityOf(job: JobRequest): JobPriority {
    const own = this.o.quotas[job.organizationId]?.priority ?? 'medium';
    const asked = job.priority ?? own;
    if (JOB_PRIORITIES.indexOf(asked) < JOB_PRIORITIES.indexOf(own))
      throw new JobRejected(`${job.name}: priority "${asked}" is above organization ${job.organizationId}'s ("${own}", scheduler.quotas.${job.organizationId}.priority)`);
    return asked;
  }

  /** Refuses a job no node could ever run, naming the request and the largest node that exists. */
  async validate(job: JobRequest): Promise<void> {
    const r = job.resources;
    if (this.queued && !this.o.quotas[job.organizationId])
      throw new JobRejected(`${job.name}: organization ${job.organizationId} has no GPU queue: add it to scheduler.quotas and run hanzo-ml cluster apply`);
    if (this.queued) this.priorityOf(job);
    if (r.gpu_type && this.o.gpuTypes.length > 0 && !this.o.gpuTypes.includes(r.gpu_type))
      throw new JobRejected(`${job.name}: gpu_type "${r.gpu_type}" is not one of scheduler.gpu_types (${this.o.gpuTypes.join(', ')})`);
    if (r.gpus_per_node === 0 && r.nodes === 1) return;
    const nodes = (await this.nodes()).filter((n) => !r.gpu_type || n.metadata?.labels?.[GPU_TYPE_LABEL] === r.gpu_type);
    const gpusOf = (n: (typeof nodes)[number]): number => Number(n.status?.allocatable?.[GPU_RESOURCE] ?? 0);
    const kind = r.gpu_type ? ` of gpu_type "${r.gpu_type}"` : '';
    if (nodes.length === 0) throw new JobRejected(`${job.name}: no node${kind} exists in the cluster`);
    const largest = nodes.reduce((a, b) => (gpusOf(b) > gpusOf(a) ? b : a));
    if (r.gpus_per_node > gpusOf(largest))
      throw new JobRejected(`${job.name}: asks for ${r.gpus_per_node} ${GPU_RESOURCE} per node, but the largest node${kind} (${largest.metadata?.name}) has ${gpusOf(largest)}`);
    const fitting = nodes.filter((n) => gpusOf(n) >= r.gpus_per_node).length;
    if (r.nodes > fitting) throw new JobRejected(`${job.name}: asks for ${r.nodes} nodes with ${r.gpus_per_node} ${GPU_RESOURCE} each, but only ${fitting} node${kind} can hold that`);
  }

  async startOrAttach(job: JobRequest): Promise<JobState> {
    const existing = await this.readJob(job.name);
    if (existing) return this.stateOf(job, existing);
    await this.createSecret(job);
    if (job.resources.nodes > 1) await this.createService(job);
    try {
      const created = await this.batch.createNamespacedJob({ namespace: this.o.namespace, body: this.jobManifest(job) });
      await this.adoptSidecars(job, created);
      this.o.log.info('kubernetes job created', { job: job.name, namespace: this.o.namespace });
    } catch (err) {
      if (!isStatus(err, 409)) throw err; // created by an earlier attempt between our read and create: attach
    }
    return this.state(job);
  }

  async state(job: JobRequest): Promise<JobState> {
    const found = await this.readJob(job.name);
    if (!found) return { state: 'lost', reason: `Job ${this.o.namespace}/${job.name} no longer exists (deleted outside hanzo-ml)` };
    return this.stateOf(job, found);
  }

  async stop(job: JobRequest, graceSeconds: number): Promise<void> {
    const grace = Math.max(0, Math.round(graceSeconds));
    // The pods first, with our grace period (SIGTERM now, SIGKILL after it), then the Job and what it owns.
    for (const pod of await this.podsOf(job.name)) {
      await this.core.deleteNamespacedPod({ name: pod.metadata!.name!, namespace: this.o.namespace, gracePeriodSeconds: grace }).catch((err: unknown) => {
        if (!isStatus(err, 404)) throw err;
      });
    }
    await this.batch.deleteNamespacedJob({ name: job.name, namespace: this.o.namespace, propagationPolicy: 'Foreground', gracePeriodSeconds: grace }).catch((err: unknown) => {
      if (!isStatus(err, 404)) throw err;
    });
    const deadline = Date.now() + (grace + 60) * 1000;
    while (Date.now() < deadline) {
      if (!(await this.readJob(job.name)) && (await this.podsOf(job.name)).length === 0) return;
      await new Promise((r) => setTimeout(r, 500));
    }
    throw new Error(`Job ${this.o.namespace}/${job.name} did not end within ${grace + 60} s of its deletion`);
  }

  async logTail(job: JobRequest, lines: number): Promise<string> {
    const pods = (await this.podsOf(job.name)).sort((a, b) => String(a.metadata?.creationTimestamp).localeCompare(String(b.metadata?.creationTimestamp)));
    const pod = pods.at(-1);
    if (!pod) return '';
    return this.core.readNamespacedPodLog({ name: pod.metadata!.name!, namespace: this.o.namespace, container: CONTAINER, tailLines: lines }).catch(() => '');
  }

  private async readJob(name: string): Promise<V1Job | null> {
    try {
      return await this.batch.readNamespacedJob({ name, namespace: this.o.namespace });
    } catch (err) {
      if (isStatus(err, 404)) return null;
      throw err;
    }
  }

  private async podsOf(name: string): Promise<V1Pod[]> {
    return (await this.core.listNamespacedPod({ namespace: this.o.namespace, labelSelector: `${JOB_LABEL}=${name}` })).items;
  }

  private async stateOf(job: JobRequest, k8sJob: V1Job): Promise<JobState> {
    const cond = (type: string) => k8sJob.status?.conditions?.find((c) => c.type === type && c.status === 'True');
    if (cond('Complete')) return { state: 'exited', exitCode: 0 };
    const failed = cond('Failed');
    const pods = await this.podsOf(job.name);
    if (failed) {
      const exit = terminatedExit(pods, CONTAINER);
      return { state: 'exited', exitCode: exit?.exitCode ?? 1, reason: [failed.reason, failed.message, exit?.reason].filter(Boolean).join(': ') };
    }
    if (k8sJob.spec?.suspend) return this.queuedState(k8sJob);
    const live = pods.filter((p) => !p.metadata?.deletionTimestamp && (p.status?.phase === 'Pending' || p.status?.phase === 'Running'));
    const running = live.filter((p) => p.status?.phase === 'Running');
    if (running.length > 0 && running.length >= job.resources.nodes) return { state: 'running' };
    const waiting = live.map((p) => podWaitingState(p, CONTAINER)).find((w) => w !== null);
    if (waiting) return { state: 'pending', reason: waiting.reason, message: waiting.message };
    if (running.length > 0) return { state: 'pending', reason: 'WaitingForGang', message: `${running.length} of ${job.resources.nodes} pods running` };
    return { state: 'pending', reason: 'ContainerCreating', message: pods.length === 0 ? 'the Job has no pod yet' : 'starting its pod' };
  }

  /** A suspended Job: waiting in its queue (and where), or taken back by the queue after it ran. */
  private async queuedState(k8sJob: V1Job): Promise<JobState> {
    if (!this.queued) return { state: 'pending', reason: 'Suspended', message: 'the Job is suspended' };
    // The Job's own Workload fresh; its queue from a list shared by every queued job's poll (a position may be a
    // couple of seconds old, and the API server is not asked for the whole namespace once per queued job).
    const workload = await workloadOfJob(this.custom, this.o.namespace, k8sJob.metadata!.uid!);
    if (!workload) return { state: 'pending', reason: 'Queued', message: 'waiting for Kueue to see the Job' };
    const others = (await this.workloads()).filter((w) => w.metadata.name !== workload.metadata.name);
    const place = queuePlace(workload, [...others, workload]);
    const evicted = evictionOf(workload);
    const where = place.position ? `position ${place.position} in queue ${place.queue}` : `queue ${place.queue}`;
    return { state: 'pending', reason: evicted ? 'Preempted' : 'Queued', message: `${where}: ${place.reason}`, queue: place, ...(evicted ? { evicted } : {}) };
  }

  private jobManifest(job: JobRequest): V1Job {
    const r = job.resources;
    const multiNode = r.nodes > 1;
    const gpus: Record<string, string> = r.gpus_per_node > 0 ? { [GPU_RESOURCE]: String(r.gpus_per_node) } : {};
    const queue: Record<string, string> = this.queued ? { [QUEUE_NAME_LABEL]: localQueueName(job.organizationId), [PRIORITY_CLASS_LABEL]: priorityClassName(this.priorityOf(job)) } : {};
    const labels = { 'app.kubernetes.io/managed-by': 'hanzo-ml', 'hanzo-ml.dev/kind': job.kind, 'hanzo-ml.dev/organization': labelValue(job.organizationId), ...queue };
    const env: V1EnvVar[] = [
      ...Object.entries(job.env).map(([name, value]) => ({ name, value })),
      { name: 'HANZO_ML_SCRATCH', value: '/scratch' },
      ...Object.keys(job.secretEnv).map((name) => ({ name, valueFrom: { secretKeyRef: { name: secretName(job.name), key: name } } })),
      ...(multiNode
        ? [
            { name: 'HANZO_ML_MASTER_ADDR', value: `${job.name}-0.${job.name}.${this.o.namespace}.svc` },
            { name: 'HANZO_ML_MASTER_PORT', value: String(RENDEZVOUS_PORT) },
            { name: 'HANZO_ML_NODE_RANK', valueFrom: { fieldRef: { fieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']" } } },
          ]
        : []),
    ];
    return {
      apiVersion: 'batch/v1',
      kind: 'Job',
      metadata: { name: job.name, namespace: this.o.namespace, labels, annotations: { 'hanzo-ml.dev/envelope': job.envelopeUri } },
      spec: {
        // Queued: Kueue unsuspends it on admission (all of its pods' quota at once) and suspends it to preempt.
        ...(this.queued ? { suspend: true } : {}),
        completions: r.nodes,
        parallelism: r.nodes,
        ...(multiNode ? { completionMode: 'Indexed' } : {}),
        // A pod lost with its node is replaced; a trainer verdict (bad spec, OOM, divergence) ends the Job, and the
        // activity decides what comes next; a preempted pod (SIGTERM, emergency checkpoint) is replaced uncounted.
        backoffLimit: 3,
        podFailurePolicy: {
          rules: [
            { action: 'FailJob', onExitCodes: { containerName: CONTAINER, operator: 'In', values: FAIL_JOB_EXIT_CODES } },
            { action: 'Ignore', onExitCodes: { containerName: CONTAINER, operator: 'In', values: [PREEMPTED_EXIT_CODE] } },
            { action: 'Ignore', onPodConditions: [{ type: 'DisruptionTarget', status: 'True' }] },
          ],
        },
        template: {
          metadata: { labels: { ...labels, [JOB_LABEL]: job.name } },
          spec: {
            restartPolicy: 'Never',
            ...(multiNode ? { subdomain: job.name } : {}),
            terminationGracePeriodSeconds: this.o.gracePeriodSeconds,
            // A job talks to the object store and the tracking API only: no Kubernetes credentials.
            automountServiceAccountToken: false,
            ...(this.o.serviceAccount ? { serviceAccountName: this.o.serviceAccount } : {}),
            ...(r.gpu_type ? { nodeSelector: { [GPU_TYPE_LABEL]: r.gpu_type } } : {}),
            containers: [
              {
                name: CONTAINER,
                image: r.image ?? this.o.image,
                imagePullPolicy: this.o.imagePullPolicy,
                command: this.o.command?.(job) ?? ['python', '-m', 'hanzo_ml', 'job', '--envelope', job.envelopeUri],
                env,
                resources: { requests: { cpu: r.cpu ?? this.o.cpu, memory: r.memory ?? this.o.memory, ...gpus }, limits: gpus },
                volumeMounts: [{ name: 'scratch', mountPath: '/scratch' }],
              },
            ],
            volumes: [{ name: 'scratch', emptyDir: {} }],
          },
        },
      },
    };
  }

  private async createSecret(job: JobRequest): Promise<void> {
    await this.core
      .createNamespacedSecret({ namespace: this.o.namespace, body: { metadata: { name: secretName(job.name), labels: { [JOB_LABEL]: job.name } }, stringData: job.secretEnv, type: 'Opaque' } })
      .catch((err: unknown) => {
        if (!isStatus(err, 409)) throw err;
      });
  }

  private async createService(job: JobRequest): Promise<void> {
    // Headless: pod DNS names for the rendezvous, no ClusterIP that anything would dial.
    await this.core
      .createNamespacedService({
        namespace: this.o.namespace,
        body: { metadata: { name: job.name, labels: { [JOB_LABEL]: job.name } }, spec: { clusterIP: 'None', selector: { [JOB_LABEL]: job.name }, ports: [{ name: 'rendezvous', port: RENDEZVOUS_PORT }] } },
      })
      .catch((err: unknown) => {
        if (!isStatus(err, 409)) throw err;
      });
  }

  /** The Secret and Service belong to the Job: deleting the Job deletes them (garbage collection). */
  private async adoptSidecars(job: JobRequest, created: V1Job): Promise<void> {
    const owner = [{ apiVersion: 'batch/v1', kind: 'Job', name: job.name, uid: created.metadata!.uid!, blockOwnerDeletion: false }];
    const patch = { metadata: { ownerReferences: owner } };
    await this.core.patchNamespacedSecret({ name: secretName(job.name), namespace: this.o.namespace, body: patch }, mergePatch()).catch((err: unknown) => this.o.log.warn('job secret not adopted', { job: job.name, error: String(err) }));
    if (job.resources.nodes > 1)
      await this.core.patchNamespacedService({ name: job.name, namespace: this.o.namespace, body: patch }, mergePatch()).catch((err: unknown) => this.o.log.warn('job service not adopted', { job: job.name, error: String(err) }));
  }
}

function secretName(job: string): string {
  return `${job}-secrets`;
}

/** A label value: at most 63 characters of [A-Za-z0-9-_.]. */
function labelValue(v: string): string {
  return v.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 63).replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, '') || 'none';
}

function mergePatch() {
  return setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
}

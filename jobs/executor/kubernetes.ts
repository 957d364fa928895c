// Kubernetes executor: each job attempt is one batch/v1 Job with a deterministic name (an existing Job means
// attach, never a second one), in its organization's own namespace (<scheduler.namespace>-<organization>, made by
// `hanzo-ml cluster apply`). The pod runs an image of the operator's allow-list (scheduler.images; by default the
// trainer image's job runner, `python -m hanzo_ml job`) as a non-root user on a read-only root with scratch
// volumes, and reads and writes only through the object store with credentials from a Secret named in config; its
// tracking token is its own, in a Secret owned by the Job. Multi-node jobs are Indexed Jobs with a headless
// Service, the torchrun rendezvous environment and a NetworkPolicy that lets their pods reach each other, all pods
// or none.
import { BatchV1Api, CoreV1Api, CustomObjectsApi, KubeConfig, NetworkingV1Api, PatchStrategy, setHeaderOptions, type V1EnvVar, type V1Job, type V1Node, type V1Pod, type V1PodSpec } from '@kubernetes/client-node';
import { allowedImage, JOB_PRIORITIES, type Config, type JobPriority, type OrganizationQuota } from '../../contracts/config.js';
import { isNamespaceable, jobNamespace } from '../queue/job-namespace.js';
import { JOB_LABEL, jobPeersPolicy, RENDEZVOUS_PORT } from '../queue/namespace-objects.js';
import { localQueueName, priorityClassName, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL } from '../queue/kueue-objects.js';
import { evictionOf, listWorkloads, queuePlace, workloadOfJob, type Workload } from '../queue/kueue-status.js';
import { sharedRead } from '../../lib/shared-read.js';
import { durationMs } from '../../lib/config.js';
import type { Logger } from '../../lib/log.js';
import { JobRejected, type JobExecutor, type JobRequest, type JobState } from './types.js';
import { podsState, terminatedExit } from './kubernetes-status.js';

export const GPU_RESOURCE = 'nvidia.com/gpu';
export const GPU_TYPE_LABEL = 'hanzo-ml.dev/gpu-type';
const CONTAINER = 'job';
/** The user of the trainer image (deploy/trainer.Dockerfile), and the home its caches go under. */
const JOB_USER = 1000;
const JOB_HOME = '/home/hanzo';
/** Exit codes of the trainer that a new pod of the same Job cannot fix: the activity decides (trainer/hanzo_ml/cli.py). */
const FAIL_JOB_EXIT_CODES = [1, 2, 3, 4];
/** SIGTERM'd after its emergency checkpoint: the Job's next pod resumes from it, without counting a failure. */
const PREEMPTED_EXIT_CODE = 143;

export interface KubernetesExecutorOptions {
  kubeConfig: KubeConfig;
  /** scheduler.namespace: an organization's jobs run in <namespacePrefix>-<organization> */
  namespacePrefix: string;
  /** scheduler.images: the only images a job may run, by name */
  images: Record<string, string>;
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
    namespacePrefix: s.namespace,
    images: s.images,
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
  private readonly networking: NetworkingV1Api;
  /** Each job namespace's Workloads, one list shared by the polls of every queued job there for 2 s. */
  private readonly workloads = new Map<string, () => Promise<Workload[]>>();
  /** The cluster's nodes, shared by every job's validation for 10 s (GPU nodes come and go in minutes). */
  private readonly nodes: () => Promise<V1Node[]>;

  constructor(private readonly o: KubernetesExecutorOptions) {
    this.batch = o.kubeConfig.makeApiClient(BatchV1Api);
    this.core = o.kubeConfig.makeApiClient(CoreV1Api);
    this.custom = o.kubeConfig.makeApiClient(CustomObjectsApi);
    this.networking = o.kubeConfig.makeApiClient(NetworkingV1Api);
    this.nodes = sharedRead(10_000, async () => (await this.core.listNode({ resourceVersion: '0' })).items);
  }

  /** The namespace of the job's organization. */
  private ns(job: JobRequest): string {
    return jobNamespace(this.o.namespacePrefix, job.organizationId);
  }

  private workloadsOf(namespace: string): Promise<Workload[]> {
    let read = this.workloads.get(namespace);
    if (!read) this.workloads.set(namespace, (read = sharedRead(2_000, () => listWorkloads(this.custom, namespace, { cached: true }))));
    return read();
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

  /**
   * Refuses, before anything is created, a job whose image is not allow-listed, whose organization has no namespace,
   * or that no node could ever run (naming the request and the largest node that exists).
   */
  async validate(job: JobRequest): Promise<void> {
    const r = job.resources;
    this.imageOf(job);
    await this.checkNamespace(job);
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

  /** The image reference of the job's allow-listed image name (scheduler.images). */
  private imageOf(job: JobRequest): string {
    const image = allowedImage(this.o.images, job.resources.image);
    if (image === null)
      throw new JobRejected(`${job.name}: hardware.image "${job.resources.image}" is not one of scheduler.images (${Object.keys(this.o.images).join(', ')}): only an operator adds images`);
    return image;
  }

  private async checkNamespace(job: JobRequest): Promise<void> {
    const org = job.organizationId;
    if (!isNamespaceable(this.o.namespacePrefix, org)) throw new JobRejected(`${job.name}: organization "${org}" cannot name a Kubernetes namespace (lower-case letters, digits, "-")`);
    const exists = await this.core.readNamespace({ name: this.ns(job) }).then(
      () => true,
      (err: unknown) => {
        if (isStatus(err, 404)) return false;
        throw err;
      },
    );
    if (!exists) throw new JobRejected(`${job.name}: organization ${org} has no namespace on the cluster (${this.ns(job)}): add it to scheduler.organizations (or scheduler.quotas) and run hanzo-ml cluster apply`);
  }

  async startOrAttach(job: JobRequest): Promise<JobState> {
    const existing = await this.readJob(job);
    if (existing) return this.stateOf(job, existing);
    const manifest = this.jobManifest(job);
    await this.createSecret(job);
    if (job.resources.nodes > 1) await this.createGangNetwork(job);
    try {
      const created = await this.batch.createNamespacedJob({ namespace: this.ns(job), body: manifest });
      await this.adoptSidecars(job, created);
      this.o.log.info('kubernetes job created', { job: job.name, namespace: this.ns(job) });
    } catch (err) {
      if (!isStatus(err, 409)) throw err; // created by an earlier attempt between our read and create: attach
    }
    return this.state(job);
  }

  async state(job: JobRequest): Promise<JobState> {
    const found = await this.readJob(job);
    if (!found) return { state: 'lost', reason: `Job ${this.ns(job)}/${job.name} no longer exists (deleted outside hanzo-ml)` };
    return this.stateOf(job, found);
  }

  async stop(job: JobRequest, graceSeconds: number): Promise<void> {
    const grace = Math.max(0, Math.round(graceSeconds));
    // The pods first, with our grace period (SIGTERM now, SIGKILL after it), then the Job and what it owns.
    for (const pod of await this.podsOf(job)) {
      await this.core.deleteNamespacedPod({ name: pod.metadata!.name!, namespace: this.ns(job), gracePeriodSeconds: grace }).catch((err: unknown) => {
        if (!isStatus(err, 404)) throw err;
      });
    }
    await this.batch.deleteNamespacedJob({ name: job.name, namespace: this.ns(job), propagationPolicy: 'Foreground', gracePeriodSeconds: grace }).catch((err: unknown) => {
      if (!isStatus(err, 404)) throw err;
    });
    const deadline = Date.now() + (grace + 60) * 1000;
    while (Date.now() < deadline) {
      if (!(await this.readJob(job)) && (await this.podsOf(job)).length === 0) return;
      await new Promise((r) => setTimeout(r, 500));
    }
    throw new Error(`Job ${this.ns(job)}/${job.name} did not end within ${grace + 60} s of its deletion`);
  }

  async logTail(job: JobRequest, lines: number): Promise<string> {
    const pods = (await this.podsOf(job)).sort((a, b) => String(a.metadata?.creationTimestamp).localeCompare(String(b.metadata?.creationTimestamp)));
    const pod = pods.at(-1);
    if (!pod) return '';
    return this.core.readNamespacedPodLog({ name: pod.metadata!.name!, namespace: this.ns(job), container: CONTAINER, tailLines: lines }).catch(() => '');
  }

  private async readJob(job: JobRequest): Promise<V1Job | null> {
    try {
      return await this.batch.readNamespacedJob({ name: job.name, namespace: this.ns(job) });
    } catch (err) {
      if (isStatus(err, 404)) return null;
      throw err;
    }
  }

  private async podsOf(job: JobRequest): Promise<V1Pod[]> {
    return (await this.core.listNamespacedPod({ namespace: this.ns(job), labelSelector: `${JOB_LABEL}=${job.name}` })).items;
  }

  private async stateOf(job: JobRequest, k8sJob: V1Job): Promise<JobState> {
    const cond = (type: string) => k8sJob.status?.conditions?.find((c) => c.type === type && c.status === 'True');
    if (cond('Complete')) return { state: 'exited', exitCode: 0 };
    const failed = cond('Failed');
    const pods = await this.podsOf(job);
    if (failed) {
      const exit = terminatedExit(pods, CONTAINER);
      return { state: 'exited', exitCode: exit?.exitCode ?? 1, reason: [failed.reason, failed.message, exit?.reason].filter(Boolean).join(': ') };
    }
    if (k8sJob.spec?.suspend) return this.queuedState(this.ns(job), k8sJob);
    return podsState(pods, job.resources.nodes, CONTAINER);
  }

  /** A suspended Job: waiting in its queue (and where), or taken back by the queue after it ran. */
  private async queuedState(namespace: string, k8sJob: V1Job): Promise<JobState> {
    if (!this.queued) return { state: 'pending', reason: 'Suspended', message: 'the Job is suspended' };
    // The Job's own Workload fresh; its queue from a list shared by every queued job's poll (a position may be a
    // couple of seconds old, and the API server is not asked for the whole namespace once per queued job).
    const workload = await workloadOfJob(this.custom, namespace, k8sJob.metadata!.uid!);
    if (!workload) return { state: 'pending', reason: 'Queued', message: 'waiting for Kueue to see the Job' };
    const others = (await this.workloadsOf(namespace)).filter((w) => w.metadata.name !== workload.metadata.name);
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
      // The root is read-only: whatever the trainer and its libraries write goes to the pod's scratch volumes.
      { name: 'HOME', value: JOB_HOME },
      { name: 'TMPDIR', value: '/tmp' },
      { name: 'HF_HOME', value: `${JOB_HOME}/.cache/huggingface` },
      // The node it landed on, for the devices.json its runner writes (the hostname is the pod's name).
      { name: 'HANZO_ML_NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
      ...Object.keys(job.secretEnv).map((name) => ({ name, valueFrom: { secretKeyRef: { name: secretName(job.name), key: name } } })),
      ...(multiNode
        ? [
            { name: 'HANZO_ML_MASTER_ADDR', value: `${job.name}-0.${job.name}.${this.ns(job)}.svc` },
            { name: 'HANZO_ML_MASTER_PORT', value: String(RENDEZVOUS_PORT) },
            { name: 'HANZO_ML_NODE_RANK', valueFrom: { fieldRef: { fieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']" } } },
          ]
        : []),
    ];
    return {
      apiVersion: 'batch/v1',
      kind: 'Job',
      metadata: { name: job.name, namespace: this.ns(job), labels, annotations: { 'hanzo-ml.dev/envelope': job.envelopeUri } },
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
            ...podSecurity(),
            ...(this.o.serviceAccount ? { serviceAccountName: this.o.serviceAccount } : {}),
            ...(r.gpu_type ? { nodeSelector: { [GPU_TYPE_LABEL]: r.gpu_type } } : {}),
            containers: [
              {
                name: CONTAINER,
                image: this.imageOf(job),
                imagePullPolicy: this.o.imagePullPolicy,
                command: this.o.command?.(job) ?? ['python', '-m', 'hanzo_ml', 'job', '--envelope', job.envelopeUri],
                env,
                resources: { requests: { cpu: r.cpu ?? this.o.cpu, memory: r.memory ?? this.o.memory, ...gpus }, limits: gpus },
                securityContext: containerSecurity(),
                volumeMounts: SCRATCH_VOLUMES.map(([name, mountPath]) => ({ name, mountPath })),
              },
            ],
            volumes: SCRATCH_VOLUMES.map(([name]) => ({ name, emptyDir: {} })),
          },
        },
      },
    };
  }

  private async createSecret(job: JobRequest): Promise<void> {
    await this.core
      .createNamespacedSecret({ namespace: this.ns(job), body: { metadata: { name: secretName(job.name), labels: { [JOB_LABEL]: job.name } }, stringData: job.secretEnv, type: 'Opaque' } })
      .catch((err: unknown) => {
        if (!isStatus(err, 409)) throw err;
      });
  }

  /** A multi-node job's headless Service and the NetworkPolicy that lets its pods, and only them, reach each other. */
  private async createGangNetwork(job: JobRequest): Promise<void> {
    const ignoreExisting = (err: unknown) => {
      if (!isStatus(err, 409)) throw err;
    };
    await this.networking.createNamespacedNetworkPolicy({ namespace: this.ns(job), body: jobPeersPolicy(this.ns(job), job.name) }).catch(ignoreExisting);
    // Headless: pod DNS names for the rendezvous, no ClusterIP that anything would dial.
    await this.core
      .createNamespacedService({
        namespace: this.ns(job),
        body: { metadata: { name: job.name, labels: { [JOB_LABEL]: job.name } }, spec: { clusterIP: 'None', selector: { [JOB_LABEL]: job.name }, ports: [{ name: 'rendezvous', port: RENDEZVOUS_PORT }] } },
      })
      .catch((err: unknown) => {
        if (!isStatus(err, 409)) throw err;
      });
  }

  /** The Secret, Service and peers policy belong to the Job: deleting the Job deletes them (garbage collection). */
  private async adoptSidecars(job: JobRequest, created: V1Job): Promise<void> {
    const owner = [{ apiVersion: 'batch/v1', kind: 'Job', name: job.name, uid: created.metadata!.uid!, blockOwnerDeletion: false }];
    const patch = { metadata: { ownerReferences: owner } };
    await this.core.patchNamespacedSecret({ name: secretName(job.name), namespace: this.ns(job), body: patch }, mergePatch()).catch((err: unknown) => this.o.log.warn('job secret not adopted', { job: job.name, error: String(err) }));
    if (job.resources.nodes > 1) {
      await this.core.patchNamespacedService({ name: job.name, namespace: this.ns(job), body: patch }, mergePatch()).catch((err: unknown) => this.o.log.warn('job service not adopted', { job: job.name, error: String(err) }));
      await this.networking.patchNamespacedNetworkPolicy({ name: `${job.name}-peers`, namespace: this.ns(job), body: patch }, mergePatch()).catch((err: unknown) => this.o.log.warn('job network policy not adopted', { job: job.name, error: String(err) }));
    }
  }
}

/** Where a job writes on its read-only root: the job runner's scratch, temporary files, and HOME (HF and torch caches). */
const SCRATCH_VOLUMES: [name: string, mountPath: string][] = [
  ['scratch', '/scratch'],
  ['tmp', '/tmp'],
  ['home', JOB_HOME],
];

/**
 * The pod side of the "restricted" Pod Security Standard, which each organization's namespace enforces: the image's
 * non-root user, seccomp's runtime default, no host namespaces. fsGroup makes the scratch volumes the user's.
 */
function podSecurity(): Pick<V1PodSpec, 'securityContext' | 'hostNetwork' | 'hostPID' | 'hostIPC'> {
  return {
    hostNetwork: false,
    hostPID: false,
    hostIPC: false,
    securityContext: { runAsNonRoot: true, runAsUser: JOB_USER, runAsGroup: JOB_USER, fsGroup: JOB_USER, seccompProfile: { type: 'RuntimeDefault' } },
  };
}

function containerSecurity() {
  return { runAsNonRoot: true, runAsUser: JOB_USER, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, privileged: false, capabilities: { drop: ['ALL'] } };
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

// Job isolation as configured and rendered, without a cluster (test/cluster-queues.test.ts applies the same objects to
// a real API server): the image allow-list (scheduler.images) and its checks, the per-organization namespace
// objects `hanzo-ml cluster apply` makes, and the network policy of a multi-node job's pods.
import { describe, expect, it } from 'vitest';
import { allowedImage, ConfigSchema, TRAINER_IMAGE } from '../contracts/config.js';
import { HardwareSchema } from '../contracts/trainer-job.js';
import { loadConfig } from '../lib/config.js';
import { jobNamespace } from '../jobs/queue/job-namespace.js';
import { jobPeersPolicy, renderNamespaceObjects } from '../jobs/queue/namespace-objects.js';
import { renderKueueObjects } from '../jobs/queue/kueue-objects.js';

const DIGEST = `sha256:${'ab'.repeat(32)}`;
const cluster = { storage: { endpoint: 'http://10.1.2.3:9000' }, server: { public_url: 'http://10.1.2.4:8057' } };
const issuesOf = (doc: unknown): string[] => {
  const r = ConfigSchema.safeParse(doc);
  return r.success ? [] : r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
};

describe('the image allow-list (scheduler.images)', () => {
  it('accepts images pinned by digest and refuses a tag-only image on a cluster, naming the entry', () => {
    const images = { trainer: `registry.example.com/ml/trainer@${DIGEST}`, cuda12: 'registry.example.com/ml/cuda12:latest' };
    expect(issuesOf({ scheduler: { executor: 'kubernetes', images } })).toEqual([
      'scheduler.images.cuda12: "registry.example.com/ml/cuda12:latest" is not pinned by digest: expected repository@sha256:<64 hex digits> (a tag can be moved to other content)',
    ]);
    expect(issuesOf({ scheduler: { executor: 'kubernetes', images: { ...images, cuda12: `registry.example.com/ml/cuda12@${DIGEST}` } } })).toEqual([]);
  });

  it('accepts the product\'s own trainer image by its tag, and any tag where no job pod runs (local executor)', () => {
    expect(ConfigSchema.parse({ scheduler: { executor: 'kubernetes' } }).scheduler.images).toEqual({ trainer: TRAINER_IMAGE });
    expect(issuesOf({ scheduler: { executor: 'kubernetes', images: { trainer: `localhost/${TRAINER_IMAGE}` } } })).toEqual([]);
    expect(issuesOf({ scheduler: { executor: 'kubernetes', images: { trainer: 'hanzoai/ml-trainer:0.0.9' } } })[0]).toMatch(/^scheduler\.images\.trainer: .* is not pinned by digest/);
    expect(issuesOf({ scheduler: { images: { trainer: 'anything:dev' } } })).toEqual([]);
  });

  it('needs a "trainer" entry, the image of a job that names none', () => {
    expect(issuesOf({ scheduler: { images: { cuda12: `r/c@${DIGEST}` } } })).toEqual(['scheduler.images: needs an entry "trainer": the image of jobs that name none']);
  });

  it('reads HANZO_ML_SCHEDULER_IMAGES as name=ref pairs', () => {
    const { config } = loadConfig({ HANZO_ML_HOME: '/nonexistent', HANZO_ML_SCHEDULER_IMAGES: `trainer=r/t@${DIGEST},cuda12=r/c@${DIGEST}` });
    expect(config.scheduler.images).toEqual({ trainer: `r/t@${DIGEST}`, cuda12: `r/c@${DIGEST}` });
  });

  it('looks a name up in one place: the default for none, null for a name not listed', () => {
    const images = { trainer: 'r/t@x', cuda12: 'r/c@y' };
    expect(allowedImage(images, null)).toBe('r/t@x');
    expect(allowedImage(images, 'cuda12')).toBe('r/c@y');
    expect(allowedImage(images, 'miner')).toBeNull();
    expect(allowedImage(images, 'constructor')).toBeNull();
  });

  it('takes a name, never an image reference, in hardware.image', () => {
    expect(HardwareSchema.parse({ image: 'cuda12' }).image).toBe('cuda12');
    for (const ref of ['docker.io/evil/miner:latest', `evil@${DIGEST}`, 'ubuntu:22.04']) {
      const r = HardwareSchema.safeParse({ image: ref });
      expect(r.success).toBe(false);
      expect(r.error!.issues[0]).toMatchObject({ path: ['image'], message: expect.stringMatching(/name of an image of scheduler\.images.*only an operator adds images/) });
    }
  });
});

describe('the per-organization objects of cluster apply', () => {
  const config = ConfigSchema.parse({
    ...cluster,
    scheduler: {
      executor: 'kubernetes', namespace: 'ml', gpu_types: ['a100'], organizations: ['sandbox'], worker_service_account: 'hanzo/worker',
      quotas: { acme: { max_gpus: 8, max_concurrent_jobs: 2 }, labs: { max_gpus: 4, max_concurrent_jobs: 1, preemptible: true } },
    },
  });
  const objects = renderNamespaceObjects(config);
  const find = (kind: string, namespace: string) => objects.find((o) => o.kind === kind && (o.metadata.namespace ?? o.metadata.name) === namespace) as Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

  it('gives every organization a namespace enforcing the restricted Pod Security Standard', () => {
    expect(objects.filter((o) => o.kind === 'Namespace').map((o) => o.metadata.name)).toEqual(['ml-acme', 'ml-labs', 'ml-sandbox']);
    expect(find('Namespace', 'ml-sandbox').metadata.labels).toMatchObject({ 'pod-security.kubernetes.io/enforce': 'restricted', 'hanzo-ml.dev/organization': 'sandbox' });
  });

  it('limits an organization to the GPUs it can hold and one pod per node of each concurrent job', () => {
    expect(find('ResourceQuota', 'ml-acme').spec.hard).toEqual({ 'requests.nvidia.com/gpu': '8', pods: '32' });
    // Preemptible: it may borrow the whole cohort's idle GPUs.
    expect(find('ResourceQuota', 'ml-labs').spec.hard['requests.nvidia.com/gpu']).toBe('12');
    // Without a quota there is no queue and no ResourceQuota.
    expect(find('ResourceQuota', 'ml-sandbox')).toBeUndefined();
  });

  it('puts each queue in its organization\'s namespace and lets only that namespace use it', () => {
    const kueue = renderKueueObjects(config);
    expect(kueue.find((o) => o.kind === 'LocalQueue' && o.metadata.name === 'acme')!.metadata.namespace).toBe('ml-acme');
    expect((kueue.find((o) => o.metadata.name === 'hanzo-ml-acme') as Record<string, any>).spec.namespaceSelector).toEqual({ matchLabels: { 'kubernetes.io/metadata.name': 'ml-acme' } }); // eslint-disable-line @typescript-eslint/no-explicit-any
    expect(renderKueueObjects(ConfigSchema.parse({ scheduler: { organizations: ['sandbox'] } }))).toEqual([]);
  });

  it('binds the worker\'s Role in each namespace, and renders no binding without a worker service account', () => {
    expect(find('RoleBinding', 'ml-sandbox').subjects).toEqual([{ kind: 'ServiceAccount', name: 'worker', namespace: 'hanzo' }]);
    expect(renderNamespaceObjects(ConfigSchema.parse({ ...cluster, scheduler: { organizations: ['x'] } })).map((o) => o.kind)).toEqual(['Namespace', 'NetworkPolicy']);
  });

  it('denies job pods every ingress and all egress but DNS, the object store and the API', () => {
    const policy = find('NetworkPolicy', 'ml-acme');
    expect(policy.spec).toEqual({
      podSelector: {},
      policyTypes: ['Ingress', 'Egress'],
      egress: [
        { to: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } }, podSelector: { matchLabels: { 'k8s-app': 'kube-dns' } } }], ports: [{ protocol: 'UDP', port: 53 }, { protocol: 'TCP', port: 53 }] },
        { to: [{ ipBlock: { cidr: '10.1.2.3/32' } }], ports: [{ protocol: 'TCP', port: 9000 }] },
        { to: [{ ipBlock: { cidr: '10.1.2.4/32' } }], ports: [{ protocol: 'TCP', port: 8057 }] },
      ],
    });
  });

  it('refuses, naming the key, an object store it cannot express as addresses or pods', () => {
    const named = ConfigSchema.parse({ storage: { endpoint: 'https://s3.example.com' }, server: cluster.server, scheduler: { organizations: ['x'] } });
    expect(() => renderNamespaceObjects(named)).toThrow(/scheduler\.job_network\.object_store: the host of https:\/\/s3\.example\.com is a name \("s3\.example\.com"\).*set its cidrs, or its namespace and pod_labels/);
    const pinned = ConfigSchema.parse({ ...named, scheduler: { organizations: ['x'], job_network: { object_store: { cidrs: ['52.0.0.0/8'] } } } });
    expect(renderNamespaceObjects(pinned).find((o) => o.kind === 'NetworkPolicy')!.spec).toMatchObject({ egress: expect.arrayContaining([{ to: [{ ipBlock: { cidr: '52.0.0.0/8' } }], ports: [{ protocol: 'TCP', port: 443 }] }]) });
  });

  it('names an organization\'s namespace after the prefix', () => {
    expect(jobNamespace('hanzo-ml', 'acme')).toBe('hanzo-ml-acme');
    expect(ConfigSchema.safeParse({ scheduler: { namespace: 'Bad_Prefix' } }).success).toBe(false);
  });
});

describe('a multi-node job\'s peers policy', () => {
  it('lets the job\'s pods reach each other, and only each other, on the rendezvous and NCCL ports', () => {
    const policy = jobPeersPolicy('ml-acme', 'run-7');
    const self = [{ podSelector: { matchLabels: { 'hanzo-ml.dev/job': 'run-7' } } }];
    const ports = [{ protocol: 'TCP', port: 29500 }, { protocol: 'TCP', port: 1024, endPort: 65535 }];
    expect(policy.spec).toEqual({ podSelector: self[0]!.podSelector, policyTypes: ['Ingress', 'Egress'], ingress: [{ _from: self, ports }], egress: [{ to: self, ports }] });
  });
});

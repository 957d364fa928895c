// The production manifests under deploy/ are accepted by a real API server: every YAML document is applied with a
// server-side dry run (schema, field and reference typos fail here, not at a rollout), the ConfigMap's config file
// passes the product's own config schema, and the worker's RBAC grants what it needs in the jobs namespace only.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { parseAllDocuments, parse as parseYaml, stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigSchema } from '../contracts/config.js';
import { checkCombinations } from '../lib/config.js';
import { startTestCluster, type TestCluster } from './support/cluster/control-plane.js';
import { CLUSTER_TOOLS_MISSING, findClusterTools, findKueue, repoRoot } from './support/cluster/tools.js';

interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
  data?: Record<string, string>;
}

function yamlFiles(dir: string): string[] {
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) return yamlFiles(path);
      return /\.ya?ml$/.test(name) ? [path] : [];
    });
}

const deployDir = join(repoRoot, 'deploy');
const files = yamlFiles(deployDir);
const manifests = files.flatMap((f) => parseAllDocuments(readFileSync(f, 'utf8')).map((d) => ({ file: relative(repoRoot, f), doc: d.toJS() as Manifest | null })));
const docs = manifests.map((m) => m.doc).filter((d): d is Manifest => d !== null);
const find = (kind: string, name: string) => docs.find((d) => d.kind === kind && d.metadata.name === name);

describe('deploy manifests', () => {
  it('hold the product in production shape: API and worker apart, jobs in their own namespace', () => {
    const kinds = docs.map((d) => `${d.kind}/${d.metadata.name}`);
    expect(kinds).toEqual(
      expect.arrayContaining([
        'Namespace/hanzo-ml',
        'Namespace/hanzo-ml-jobs',
        'ConfigMap/hanzo-ml-config',
        'Secret/hanzo-ml-secrets',
        'Secret/hanzo-ml-storage',
        'Deployment/hanzo-ml-api',
        'Service/hanzo-ml-api',
        'Deployment/hanzo-ml-worker',
        'ServiceAccount/hanzo-ml-worker',
        'Role/hanzo-ml-job-runner',
        'RoleBinding/hanzo-ml-worker',
        'ClusterRole/hanzo-ml-node-reader',
        'ClusterRoleBinding/hanzo-ml-worker-node-reader',
        'ConfigMap/kueue-manager-config',
      ]),
    );
    const container = (name: string) => (find('Deployment', name) as unknown as { spec: { template: { spec: { containers: { args: string[] }[] } } } }).spec.template.spec.containers[0]!;
    expect(container('hanzo-ml-api').args).toEqual(['serve']);
    expect(container('hanzo-ml-worker').args).toEqual(['worker']);
  });

  it('configure the product with a config file its own schema accepts, for the Kubernetes executor', () => {
    const text = find('ConfigMap', 'hanzo-ml-config')!.data!['config.yaml']!;
    // The Secret supplies these through the environment; the loader merges them before validating.
    const raw = { ...parseYaml(text), database: { url: 'postgres://from-the-secret' } };
    const config = ConfigSchema.parse(raw);
    expect(() => checkCombinations(config)).not.toThrow();
    expect(config.scheduler).toMatchObject({ executor: 'kubernetes', namespace: 'hanzo-ml-jobs' });
    expect(find('Namespace', config.scheduler.namespace)).toBeDefined();
    expect(find('Role', 'hanzo-ml-job-runner')!.metadata.namespace).toBe(config.scheduler.namespace);
    expect(find('Secret', config.scheduler.storage_secret)!.metadata.namespace).toBe(config.scheduler.namespace);
  });
});

describe.skipIf(!findClusterTools() || !findKueue())(`deploy manifests on a real API server${findClusterTools() && findKueue() ? '' : ` (skipped: ${CLUSTER_TOOLS_MISSING})`}`, () => {
  let cluster: TestCluster;

  beforeAll(async () => {
    // With Kueue, so its resources exist for the RBAC checks below.
    cluster = await startTestCluster({ nodes: [], kueue: true });
    // Namespaced dry runs resolve their namespace: the namespaces are created for real first.
    await cluster.kubectl(['apply', '--server-side', '-f', '-'], docs.filter((d) => d.kind === 'Namespace').map((d) => stringify(d)).join('---\n'));
  }, 300_000);

  afterAll(async () => {
    await cluster?.stop();
  });

  it.each(files.map((f) => relative(repoRoot, f)))('%s applies with a server-side dry run', async (file) => {
    const out = await cluster.kubectl(['apply', '--server-side', '--dry-run=server', '--field-manager=hanzo-ml-deploy-test', '-f', join(repoRoot, file)]);
    const expected = manifests.filter((m) => m.file === file && m.doc).length;
    expect(out.trim().split('\n')).toHaveLength(expected);
  });

  it('lets the worker run Jobs in the jobs namespace and read nodes, and nothing beyond it', async () => {
    const rbac = docs.filter((d) => ['ServiceAccount', 'Role', 'RoleBinding', 'ClusterRole', 'ClusterRoleBinding'].includes(d.kind));
    await cluster.kubectl(['apply', '--server-side', '-f', '-'], rbac.map((d) => stringify(d)).join('---\n'));
    const can = async (verb: string, resource: string, namespace: string) =>
      (await cluster.kubectl(['auth', 'can-i', verb, resource, '-n', namespace, '--as=system:serviceaccount:hanzo-ml:hanzo-ml-worker']).catch((e: Error) => e.message)).trim().endsWith('yes');
    const needed = [['create', 'jobs.batch'], ['get', 'jobs.batch'], ['delete', 'jobs.batch'], ['list', 'pods'], ['delete', 'pods'], ['get', 'pods/log'], ['create', 'services'], ['patch', 'services'], ['create', 'secrets'], ['patch', 'secrets']];
    for (const [verb, resource] of needed) expect(await can(verb!, resource!, 'hanzo-ml-jobs'), `${verb} ${resource}`).toBe(true);
    expect(await can('list', 'nodes', 'default')).toBe(true);
    expect(await can('get', 'secrets', 'hanzo-ml-jobs')).toBe(false);
    expect(await can('list', 'secrets', 'hanzo-ml-jobs')).toBe(false);
    expect(await can('patch', 'nodes', 'default')).toBe(false);
    expect(await can('create', 'jobs.batch', 'hanzo-ml')).toBe(false);
    expect(await can('create', 'jobs.batch', 'default')).toBe(false);
    // Kueue: the worker and the API read queues; neither may change them (`hanzo-ml cluster apply` is an admin's).
    const api = async (verb: string, resource: string, namespace: string) =>
      (await cluster.kubectl(['auth', 'can-i', verb, resource, '-n', namespace, '--as=system:serviceaccount:hanzo-ml:hanzo-ml-api']).catch((e: Error) => e.message)).trim().endsWith('yes');
    for (const ask of [can, api]) {
      expect(await ask('list', 'workloads.kueue.x-k8s.io', 'hanzo-ml-jobs')).toBe(true);
      expect(await ask('get', 'clusterqueues.kueue.x-k8s.io', 'default')).toBe(true);
      expect(await ask('create', 'clusterqueues.kueue.x-k8s.io', 'default')).toBe(false);
      expect(await ask('delete', 'workloads.kueue.x-k8s.io', 'hanzo-ml-jobs')).toBe(false);
    }
    expect(await api('create', 'jobs.batch', 'hanzo-ml-jobs')).toBe(false);
  });
});

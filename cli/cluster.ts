// `hanzo-ml cluster apply`: renders each organization's namespace objects (namespace, quota, the worker's RBAC,
// network policy) and scheduler.quotas / scheduler.preemption as Kueue objects, and applies them to the cluster of
// scheduler.kubeconfig. The configuration is validated first (a malformed quota stops the command, naming its key),
// so nothing is applied from a configuration that does not load.
import { loadConfig } from '../lib/config.js';
import { loadKubeConfig } from '../jobs/executor/kubernetes.js';
import { applyClusterObjects, describeApplied } from '../jobs/queue/kueue-apply.js';
import { clusterOrganizations } from '../jobs/queue/job-namespace.js';

export async function runClusterApply(): Promise<void> {
  const { config } = loadConfig();
  if (clusterOrganizations(config).length === 0)
    process.stderr.write('cluster apply: scheduler.quotas and scheduler.organizations are empty: no organization has a namespace, so no job can run\n');
  else if (Object.keys(config.scheduler.quotas).length === 0)
    process.stderr.write('cluster apply: scheduler.quotas is empty: no organization has a queue (jobs start unqueued)\n');
  const applied = await applyClusterObjects(config, loadKubeConfig(config.scheduler.kubeconfig));
  process.stdout.write(describeApplied(applied) + '\n');
}

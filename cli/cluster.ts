// `hanzo-ml cluster apply`: renders scheduler.quotas / scheduler.preemption as Kueue objects and applies them to
// the cluster of scheduler.kubeconfig. The configuration is validated first (a malformed quota stops the command,
// naming its key), so nothing is applied from a configuration that does not load.
import { loadConfig } from '../lib/config.js';
import { loadKubeConfig } from '../activities/executor/kubernetes.js';
import { applyKueueObjects, describeApplied } from '../scheduling/kueue-apply.js';

export async function runClusterApply(): Promise<void> {
  const { config } = loadConfig();
  if (Object.keys(config.scheduler.quotas).length === 0)
    process.stderr.write('cluster apply: scheduler.quotas is empty: only the flavors and priority classes are applied, and no organization has a queue\n');
  const applied = await applyKueueObjects(config, loadKubeConfig(config.scheduler.kubeconfig));
  process.stdout.write(describeApplied(applied) + '\n');
}

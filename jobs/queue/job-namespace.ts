// Where an organization's jobs run on a cluster: a namespace of its own, <scheduler.namespace>-<organization>.
import type { Config } from '../../contracts/config.js';

/** The namespace of an organization's jobs. */
export function jobNamespace(prefix: string, organization: string): string {
  return `${prefix}-${organization}`;
}

/** A namespace name is a DNS label: an organization whose id makes none has no namespace, and no jobs on the cluster. */
export function isNamespaceable(prefix: string, organization: string): boolean {
  return /^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/.test(organization) && jobNamespace(prefix, organization).length <= 63;
}

/** Every organization with a namespace: scheduler.organizations and the organizations of scheduler.quotas. */
export function clusterOrganizations(config: Config): string[] {
  return [...new Set([...config.scheduler.organizations, ...Object.keys(config.scheduler.quotas)])].sort();
}

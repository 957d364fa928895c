// What a caller may ask the server to read and to run: data and base models only from the organization's own
// storage prefix or the operator's allow-list, bounded resources, no self-approval without the permission.
import { isAbsolute } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Config } from '../contracts/config.js';
import type { PipelineInput } from '../contracts/pipeline.js';
import type { Principal } from '../db/repo/auth.js';
import { ApiError, invalid } from './errors.js';
import { canApprove } from './auth.js';

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|::1|localhost)$/;

/** The prefix of an organization's own objects. */
export const orgPrefix = (config: Config, organizationId: string): string => `s3://${config.storage.buckets.datasets}/${organizationId}/`;

/**
 * Whether `uri` (file://, s3://, or an absolute path) is readable by the caller: under their organization's
 * prefix, under an allow-listed prefix, or (file:// only) on a loopback development stack by its own
 * organization, whose caller is the machine's user. Dot segments are resolved before comparing.
 */
export function sourceAllowed(config: Config, p: Principal, uri: string): boolean {
  let href: string;
  try {
    href = new URL(isAbsolute(uri) ? pathToFileURL(uri).href : uri).href;
  } catch {
    return false;
  }
  if (href.startsWith(orgPrefix(config, p.organizationId))) return true;
  if (config.limits.source_allow_list.some((prefix) => href.startsWith(new URL(isAbsolute(prefix) ? pathToFileURL(prefix).href : prefix).href))) return true;
  return href.startsWith('file://') && LOOPBACK.test(config.server.host) && p.organizationId === config.auth.dev_organization;
}

function checkSource(config: Config, p: Principal, field: string, uri: string): void {
  if (!sourceAllowed(config, p, uri))
    throw new ApiError('PERMISSION_DENIED', `${field}: ${uri} is outside your organization's storage (${orgPrefix(config, p.organizationId)}) and limits.source_allow_list`);
}

/** The caller-dependent checks of a pipeline request (the caller-independent ones are checkPipelineInput's). */
export function checkPipelinePolicy(config: Config, p: Principal, req: PipelineInput): void {
  if (req.promotion.auto_approve && !canApprove(p))
    throw new ApiError('PERMISSION_DENIED', 'promotion.auto_approve: only a caller with the approver permission may approve without review');
  if ('source_uri' in req.dataset) checkSource(config, p, 'dataset.source_uri', req.dataset.source_uri);
  if (isAbsolute(req.base_model) || /^[a-z0-9]+:\/\//.test(req.base_model)) checkSource(config, p, 'base_model', req.base_model);
  const { limits } = config;
  if (req.hardware.processes > limits.max_processes) throw invalid(`hardware.processes: ${req.hardware.processes} exceeds limits.max_processes (${limits.max_processes})`);
  if (req.hardware.nodes > limits.max_nodes) throw invalid(`hardware.nodes: ${req.hardware.nodes} exceeds limits.max_nodes (${limits.max_nodes})`);
}

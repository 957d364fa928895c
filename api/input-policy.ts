// What a caller may ask the server to read and to run: data and base models only from the organization's own
// storage prefix or the operator's allow-list, bounded resources, no self-approval without the permission.
import { isAbsolute } from 'node:path';
import { pathToFileURL } from 'node:url';
import { checkLocation, LocationError, type CheckedLocation, type LocationRule } from '../lib/locations.js';
import type { Config } from '../contracts/config.js';
import type { PipelineInput } from '../contracts/pipeline.js';
import type { Principal } from '../db/repo/auth.js';
import { ApiError, invalid } from './errors.js';
import { canApprove } from './auth.js';

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|::1|localhost)$/;

/** The prefix of an organization's own objects. */
export const orgPrefix = (config: Config, organizationId: string): string => `s3://${config.storage.buckets.datasets}/${organizationId}/`;

/** checkLocation at the API boundary: a refused location is a 400 that names the field. */
export function checkedLocation(raw: string, rule: LocationRule): CheckedLocation {
  try {
    return checkLocation(raw, rule);
  } catch (err) {
    if (err instanceof LocationError) throw invalid(err.message);
    throw err;
  }
}

/** A prefix of limits.source_allow_list as a URL, for comparing with a checked location's. */
function prefixHref(prefix: string): string | null {
  try {
    return new URL(isAbsolute(prefix) ? pathToFileURL(prefix).href : prefix).href;
  } catch {
    return null;
  }
}

/**
 * Whether a checked location (file://, s3://, or an absolute path) is readable by the caller: under their
 * organization's prefix, under an allow-listed prefix, or (file:// only) on a loopback development stack by its
 * own organization, whose caller is the machine's user. The location has no `..` at any depth of decoding
 * (checkLocation), so comparing prefixes compares places.
 */
export function sourceAllowed(config: Config, p: Principal, loc: CheckedLocation): boolean {
  const href = prefixHref(loc.form === 'absolute' ? loc.path : loc.text);
  if (href === null) return false;
  if (href.startsWith(orgPrefix(config, p.organizationId))) return true;
  if (config.limits.source_allow_list.some((prefix) => { const allowed = prefixHref(prefix); return allowed !== null && href.startsWith(allowed); })) return true;
  return href.startsWith('file://') && LOOPBACK.test(config.server.host) && p.organizationId === config.auth.dev_organization;
}

/** A data source (dataset.source_uri): a file:// or s3:// URI the caller may read; returns its canonical text. */
export function checkSource(config: Config, p: Principal, field: string, raw: string): string {
  const loc = checkedLocation(raw, { field, accept: ['uri'], schemes: ['file', 's3'] });
  if (!sourceAllowed(config, p, loc))
    throw new ApiError('PERMISSION_DENIED', `${field}: ${raw} is outside your organization's storage (${orgPrefix(config, p.organizationId)}) and limits.source_allow_list`);
  return loc.text;
}

/**
 * A base model or tokenizer: a name in the base-models directory (a relative path that stays inside it), or an
 * absolute path the caller may read. Returns the checked name or path.
 */
export function checkBaseModel(config: Config, p: Principal, field: string, raw: string): string {
  const loc = checkedLocation(raw, { field, accept: ['relative', 'absolute'] });
  if (loc.form === 'absolute' && !sourceAllowed(config, p, loc))
    throw new ApiError('PERMISSION_DENIED', `${field}: ${raw} is outside your organization's storage (${orgPrefix(config, p.organizationId)}) and limits.source_allow_list`);
  return loc.text;
}

/** The caller-dependent checks of a pipeline request (the caller-independent ones are checkPipelineInput's). */
export function checkPipelinePolicy(config: Config, p: Principal, req: PipelineInput): void {
  if (req.promotion.auto_approve && !canApprove(p))
    throw new ApiError('PERMISSION_DENIED', 'promotion.auto_approve: only a caller with the approver permission may approve without review');
  if ('source_uri' in req.dataset) checkSource(config, p, 'dataset.source_uri', req.dataset.source_uri);
  checkBaseModel(config, p, 'base_model', req.base_model);
  const { limits } = config;
  if (req.hardware.processes > limits.max_processes) throw invalid(`hardware.processes: ${req.hardware.processes} exceeds limits.max_processes (${limits.max_processes})`);
  if (req.hardware.nodes > limits.max_nodes) throw invalid(`hardware.nodes: ${req.hardware.nodes} exceeds limits.max_nodes (${limits.max_nodes})`);
}

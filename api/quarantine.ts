// Overriding the promotion gate: moving a quarantined model version to staging or production, or an ungated one
// (it never met an eval suite) to production. Kept in one
// function so that the permission it takes (today: the admin role) can change in one place.
import type { Context } from 'hono';
import type { AppEnv } from './deps.js';
import { requireRole } from './auth.js';
import { ApiError } from './errors.js';
import { NotServableError } from '../db/repo/models.js';
import { GATE_TAGS } from '../contracts/eval-suite.js';

/** The override reason, if the caller gave one and may override; without one the gate's refusal stands. */
export function quarantineOverride(c: Context<AppEnv>, reason: string | undefined): string | undefined {
  const trimmed = reason?.trim();
  if (!trimmed) return undefined;
  requireRole(c, 'admin');
  return trimmed;
}

/** Runs a stage change, answering a quarantine (or unfinished registration) refusal as a conflict with its reason. */
export async function refusingQuarantined<T>(change: () => Promise<T>): Promise<T> {
  try {
    return await change();
  } catch (err) {
    if (err instanceof NotServableError) throw new ApiError('INVALID_STATE', err.message);
    throw err;
  }
}

/** The gate's tags are its record: no tag call may set or remove them. */
export function refuseGateTag(key: string): void {
  if (GATE_TAGS.includes(key)) throw new ApiError('INVALID_PARAMETER_VALUE', `tag "${key}" is set by the promotion gate and cannot be changed`);
}

// The checks of an eval or conversion job's section that need the catalogue, before anything is queued: the
// model it names (a version or a job of the caller's organization), the base model an adapter applies to, the
// dataset version and the eval suite. Each refusal is a 400 naming the field.
import type { ApiDeps } from './deps.js';
import type { JobSubmission } from '../contracts/jobs.js';
import type { Principal } from '../db/repo/auth.js';
import { findDatasetVersion } from '../db/repo/datasets.js';
import { ModelSourceError, requireAdapter, requireScorable, resolveModelSource } from '../activities/model-source.js';
import { gateCandidate } from '../activities/eval-job.js';
import { EvalSuiteError } from '../lib/eval-suites.js';
import { resolveSuite } from '../datasets/eval-suites.js';
import { invalid } from './errors.js';
import { checkBaseModel } from './input-policy.js';

export async function checkProductJobSection(deps: ApiDeps, spec: JobSubmission, principal: Principal): Promise<void> {
  const field = spec.eval ? 'eval' : spec.conversion ? 'conversion' : null;
  if (field === null) return;
  const section = (spec.eval ?? spec.conversion)!;
  if (section.base_model !== undefined) checkBaseModel(deps.config, principal, `${field}.base_model`, section.base_model);
  try {
    const model = await resolveModelSource(deps, principal.organizationId, field, section.source, section.base_model);
    if (spec.eval?.record_gate) gateCandidate(model, field);
    else if (field === 'eval') requireScorable(model, field);
    else requireAdapter(model, field);
    if (spec.eval) await resolveSuite(deps.db, principal.organizationId, spec.eval.suite);
  } catch (err) {
    if (err instanceof ModelSourceError) throw invalid(err.message);
    if (err instanceof EvalSuiteError) throw invalid(`eval.suite: ${err.message}`);
    throw err;
  }
  // Another organization's dataset does not exist for the caller.
  if (!(await findDatasetVersion(deps.db, principal.organizationId, section.dataset.name, section.dataset.version)))
    throw invalid(`${field}.dataset: "${section.dataset.name}" has no version ${section.dataset.version}`);
}

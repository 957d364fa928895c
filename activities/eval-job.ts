// `type: eval` jobs (contracts/job-kinds.ts EvalSection): a registered model version or a finished training job's
// output scored on a dataset version's test split and an eval suite's data, through the executor as the pipeline's
// eval stage (runEvalJob). An adapter is scored beside its base model (eval/base/*, eval/tuned/*, and the suite's
// gate against base); a full model alone (eval/model/*). The report and per-example scores are artifacts of the
// job's run.
import type { ActivityDeps } from './deps.js';
import { datasetRef, type DatasetRef } from './datasets.js';
import { evalMetricPoints, productionModelDir, recordEvalReport, runEvalJob } from './evaluation.js';
import { gateTags } from './registry.js';
import { baseModelInput, dirInput } from '../jobs/inputs.js';
import { phaseCallbacks, type Phase } from '../jobs/phases.js';
import { ModelSourceError, requireAdapter, requireScorable, resolveModelSource, type ResolvedModel } from './model-source.js';
import type { JobRunOutcome, JobSegment, JobSubmission, JobWorkflowInput } from '../contracts/jobs.js';
import type { JobPriority } from '../contracts/config.js';
import { findDatasetVersion } from '../db/repo/datasets.js';
import { recordGateDecision } from '../db/repo/models.js';
import { logMetrics } from '../db/repo/metrics.js';
import { setRunTags } from '../db/repo/params-tags.js';
import { evalGate } from '../lib/eval-gate.js';
import { EvalSuiteError } from '../lib/eval-suites.js';
import { resolveSuite } from '../datasets/eval-suites.js';
import { segmentOwner } from '../lib/job-log.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';

export const priorityOf = (spec: JobSubmission): JobPriority | null => (spec.preemptible || spec.schedule.preemptible ? 'low' : null);

/** A bad input found when the job runs (a version deleted since it was submitted): the job fails, not retried. */
export function badInput(err: unknown): never {
  if (err instanceof ModelSourceError || err instanceof EvalSuiteError) throw nonRetryable(FailureType.BadInput, err.message);
  throw err;
}

/** The section's dataset version (of the job's organization): its test split is what the job scores. */
export async function sectionDataset(deps: ActivityDeps, organizationId: string, field: string, d: { name: string; version: number | 'latest' }): Promise<DatasetRef> {
  const row = await findDatasetVersion(deps.db, organizationId, d.name, d.version);
  if (!row) throw nonRetryable(FailureType.BadInput, `${field}.dataset: "${d.name}" has no version ${d.version}`);
  return datasetRef(row);
}

/** The gate's candidate: a registered adapter version (only an adapter is scored beside its base model). */
export function gateCandidate(model: ResolvedModel, field: string): ResolvedModel & { adapterDir: string; baseModel: string; version: { name: string; version: number } } {
  if (!model.version) throw new ModelSourceError(`${field}.source: record_gate needs a registered model version (model: name@version), not ${model.label}`);
  const adapter = requireAdapter(model, field);
  return { ...adapter, version: model.version };
}

export async function runEvalSectionJob(deps: ActivityDeps, a: { input: JobWorkflowInput; runId: string; segment?: JobSegment }, onPhase: Phase): Promise<JobRunOutcome> {
  const { spec, job_id: jobId, organization_id: organizationId } = a.input;
  const section = spec.eval!;
  const model = await resolveModelSource(deps, organizationId, 'eval', section.source, section.base_model)
    .then((m) => (section.record_gate ? gateCandidate(m, 'eval') : requireScorable(m, 'eval')))
    .catch(badInput);
  const { suite, data } = await resolveSuite(deps.db, organizationId, section.suite).catch(badInput);
  const testUri = (await sectionDataset(deps, organizationId, 'eval', section.dataset)).splits.test;
  const adapter = model.adapterDir !== null && model.baseModel !== null;
  // Gating a version compares it with production too, as a pipeline's eval stage does (never with itself).
  const found = section.record_gate ? await productionModelDir(deps, organizationId, model.version!.name) : null;
  const production = found && found.version !== model.version!.version ? found : null;
  const { result: report, files } = await runEvalJob(deps, {
    name: `${segmentOwner(jobId, a.segment?.segment ?? 1)}-eval`,
    organizationId,
    priority: priorityOf(spec),
    runId: a.runId,
    base: adapter ? await baseModelInput(deps, model.baseModel!) : dirInput(model.modelDir!),
    adapter: adapter ? dirInput(model.adapterDir!) : null,
    production: production ? dirInput(production.dir) : null,
    testUri,
    suite,
    data,
    maxNewTokens: section.max_new_tokens,
    maxSeqLength: section.max_seq_length,
    ...phaseCallbacks(onPhase),
  });
  await setRunTags(deps.db, a.runId, [{ key: 'hanzo_ml.eval.model', value: model.label }]);
  const names = adapter ? { base: 'base', tuned: 'tuned', production: 'production' } : { base: 'model' };
  const scores = await recordEvalReport(deps, a.runId, report, files, 0, names);
  const metrics = Object.fromEntries(evalMetricPoints(report, 0, names).map((p) => [p.key, p.value]));
  if (adapter) {
    // Without a production version the suite's gate compares the adapter with its base only.
    const gate = evalGate(suite, scores, production?.version ?? null);
    metrics['eval/gate_passed'] = gate.passed ? 1 : 0;
    await logMetrics(deps.db, a.runId, [{ key: 'eval/gate_passed', value: metrics['eval/gate_passed'], step: 0, timestamp: Date.now() }]);
    await setRunTags(deps.db, a.runId, [{ key: 'hanzo_ml.eval.gate', value: `${gate.suite}: ${gate.reason}`.slice(0, 5000) }]);
    if (section.record_gate)
      await recordGateDecision(deps.db, {
        organizationId,
        modelName: model.version!.name,
        version: model.version!.version,
        gate,
        tags: gateTags(gate),
        actor: a.input.submitted_by,
        detail: { job_id: jobId, run_id: a.runId, base_model: model.baseModel },
      });
  }
  return { step: null, metrics, output_uri: files.outputUri('output_path') };
}

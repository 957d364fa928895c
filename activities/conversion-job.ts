// `type: conversion` jobs (contracts/job-kinds.ts ConversionSection): spec 000's merge LoRA -> quantize -> validate
// -> register as one job. The steps are the pipeline's own (runMergeJob, the Candle tool's validateAndQuantize, the
// registry's copy of record), each a job through the executor; the version's formats are the merged safetensors,
// the adapter and the GGUF (its digest as the Candle tool measured it). A retried activity finds the version it
// registered (keyed by the job), so one conversion job makes at most one version.
import { basename } from 'node:path';
import type { ActivityDeps } from './deps.js';
import { validateAndQuantize, type CandleResults } from './conversion.js';
import { badInput, priorityOf, sectionDataset } from './eval-job.js';
import { runMergeJob } from './evaluation.js';
import { baseModelInput, dirInput } from '../jobs/inputs.js';
import { phaseCallbacks, type Phase } from '../jobs/phases.js';
import { createModelRegistrationActivities } from './model-registration.js';
import { requireAdapter, resolveModelSource, type ResolvedModel } from './model-source.js';
import type { ConversionSection } from '../contracts/job-kinds.js';
import type { JobRunOutcome, JobSegment, JobWorkflowInput } from '../contracts/jobs.js';
import type { ModelRegistrationInput } from '../contracts/model-registration.js';
import type { MergeReport } from '../contracts/trainer-job.js';
import { logMetrics } from '../db/repo/metrics.js';
import { registerModelVersion } from '../db/repo/models.js';
import { segmentOwner } from '../lib/job-log.js';
import { MANIFEST_FILE, describeModel, filesUnder, readSourceJson, type SourceFile } from '../lib/model-artifacts.js';
import type { DatasetRef } from './datasets.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';

export async function runConversionSectionJob(deps: ActivityDeps, a: { input: JobWorkflowInput; runId: string; segment?: JobSegment }, onPhase: Phase): Promise<JobRunOutcome> {
  const { spec, job_id: jobId, organization_id: organizationId } = a.input;
  const c = spec.conversion!;
  const model = await resolveModelSource(deps, organizationId, 'conversion', c.source, c.base_model)
    .then((m) => requireAdapter(m, 'conversion'))
    .catch(badInput);
  const dataset = await sectionDataset(deps, organizationId, 'conversion', c.dataset);
  const phases = phaseCallbacks(onPhase);
  const priority = priorityOf(spec);
  // A resumed segment runs its steps as jobs of its own, not the first segment's again (lib/job-log.ts segmentOwner).
  const owner = segmentOwner(jobId, a.segment?.segment ?? 1);
  const { result: merge } = await runMergeJob(deps, {
    name: `${owner}-merge`,
    organizationId,
    priority,
    base: await baseModelInput(deps, model.baseModel),
    adapter: dirInput(model.adapterDir),
    heldoutUri: dataset.splits.test,
    maxSeqLength: c.max_seq_length,
    ...phases,
  });
  // The Candle jobs tell no phase: the job stays running between its steps.
  const candle = await validateAndQuantize(deps, { name: owner, organizationId, priority, validate: { ...c.validate, quantization: c.quantization }, merge });
  const metrics = conversionMetrics(merge, candle);
  const now = Date.now();
  await logMetrics(deps.db, a.runId, Object.entries(metrics).map(([key, value]) => ({ key, value, step: 0, timestamp: now })));
  const version = await registerConverted(deps, { input: a.input, runId: a.runId, section: c, model, dataset, merge, candle, metrics });
  return { step: null, metrics: { ...metrics, 'conversion/registered_version': version }, output_uri: candle.gguf.path };
}

/** What validation measured, as metrics of the job's run. */
function conversionMetrics(merge: MergeReport, candle: CandleResults): Record<string, number> {
  const out: Record<string, number> = { 'conversion/pytorch_perplexity': merge.reference_perplexity, 'conversion/gguf_size_bytes': candle.gguf.size_bytes };
  if (candle.validate.perplexity) out['conversion/candle_perplexity'] = candle.validate.perplexity.candle;
  if (candle.quantize.quantization?.perplexity != null) out['conversion/quantized_perplexity'] = candle.quantize.quantization.perplexity;
  return out;
}

interface RegisterArgs {
  input: JobWorkflowInput;
  runId: string;
  section: ConversionSection;
  model: ResolvedModel;
  dataset: DatasetRef;
  merge: MergeReport;
  candle: CandleResults;
  metrics: Record<string, number>;
}

/** Registers the converted model as a version of `register.model_name` and copies its files; returns its number. */
async function registerConverted(deps: ActivityDeps, a: RegisterArgs): Promise<number> {
  const { input, section } = a;
  const row = await registerModelVersion(deps.db, {
    organizationId: input.organization_id,
    modelName: section.register.model_name,
    stage: 'none',
    runId: a.runId,
    datasetId: a.dataset.id,
    status: 'pending_registration',
    description: section.register.description,
    metrics: a.metrics,
    trainingConfig: { source: a.model.label, base_model: a.model.baseModel, quantization: section.quantization, validate: section.validate },
    lineage: { run_id: a.runId, job_id: input.job_id, source: a.model.label, dataset_id: a.dataset.id },
    tags: { conversion_job: input.job_id },
    createdBy: input.submitted_by,
    // The idempotency key of a registration: a retried activity finds this version.
    sourcePipeline: `job:${input.job_id}`,
  });
  if (row.status === 'ready') return row.version;
  if (row.status !== 'pending_registration') throw nonRetryable(FailureType.BadArtifacts, row.statusMessage ?? `version ${row.version} failed registration`);
  const done = await createModelRegistrationActivities(deps).publishModelVersion(await registrationPlan(deps, a, { id: row.id, version: row.version }));
  if (done.status !== 'ready') throw nonRetryable(FailureType.BadArtifacts, done.message ?? `version ${row.version} was not registered`);
  return row.version;
}

/** The version's formats: merged safetensors, the adapter (without a registry manifest it may carry) and the GGUF. */
async function registrationPlan(deps: ActivityDeps, a: RegisterArgs, row: { id: string; version: number }): Promise<ModelRegistrationInput> {
  const ownFiles = (files: SourceFile[]) => files.filter((f) => f.path !== MANIFEST_FILE);
  const [merged, adapter] = await Promise.all([filesUnder(deps.store, a.merge.merged_dir), filesUnder(deps.store, a.model.adapterDir!).then(ownFiles)]);
  const fromMerged = describeModel(await readSourceJson(deps.store, merged, 'config.json'), await readSourceJson(deps.store, adapter, 'adapter_config.json'));
  const gguf = { uri: a.candle.gguf.path, path: basename(a.candle.gguf.path), size_bytes: a.candle.gguf.size_bytes };
  const formats: ModelRegistrationInput['formats'] = [
    { format: 'safetensors', files: merged },
    { format: 'lora', files: adapter },
    { format: `gguf-${a.candle.gguf.dtype.toLowerCase()}`, files: [gguf], expect_sha256: { [gguf.path]: a.candle.gguf.sha256 } },
  ];
  return {
    version_id: row.id,
    organization_id: a.input.organization_id,
    model_name: a.section.register.model_name,
    version: row.version,
    formats,
    description: { architecture: fromMerged.architecture, base_model: a.model.baseModel, method: fromMerged.method },
    source_format: 'safetensors',
    total_bytes: formats.flatMap((f) => f.files).reduce((n, f) => n + (f.size_bytes ?? 0), 0),
  };
}

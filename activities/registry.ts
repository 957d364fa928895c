// register and promote stages: register a version with its full lineage, publish its formats (merged
// safetensors, the LoRA adapter, the GGUF) under the version's own prefix in the models bucket, each with a
// manifest of SHA-256s (lib/model-artifacts.ts), stage it by the eval gate, and move it to production on approval.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, basename } from 'node:path';
import type { ActivityDeps } from './deps.js';
import type { Artifact, PipelineWorkflowInput, PromotionDecision } from '../contracts/pipeline.js';
import type { EvalReport, MergeReport } from '../contracts/trainer-job.js';
import { GATE_INCONCLUSIVE_TAG, QUARANTINE_REASON_TAG, QUARANTINE_TAG, gateVerdict, type GateDecision } from '../contracts/eval-suite.js';
import type { EvalOutcome } from './evaluation.js';
import { completeRegistration, registerModelVersion as insertVersion, transitionStage, type ModelStage, type ModelVersionRow, type NewModelVersion } from '../db/repo/models.js';
import type { ModelRegistrationInput } from '../contracts/model-registration.js';
import { createModelRegistrationActivities } from './model-registration.js';
import { baseModelRecord, resolveBaseModel } from '../lib/base-models.js';
import { repoRoot } from '../lib/config.js';
import { sha256Text } from '../lib/hash.js';
import { adapterFamilyOf, describeModel, filesUnder, ModelArtifactError, readSourceJson, type ModelDescription, type SourceFile } from '../lib/model-artifacts.js';
import type { CandleResults } from './conversion.js';
import type { DatasetRef } from './datasets.js';
import type { TrainOutput } from './training.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';

export interface RegisteredVersion {
  version: number;
  stage: ModelStage;
  gateReason: string;
  artifacts: Record<string, Artifact>;
}

/** A registered version before its copy: the copy's plan (null when nothing is left to copy) and its status now. */
export interface PreparedRegistration extends RegisteredVersion {
  registration: ModelRegistrationInput | null;
  status: ModelVersionRow['status'];
  message: string | null;
}

/**
 * Tags the gate leaves on a version, shown to whoever would promote it: a blocked one is quarantined, and why; an
 * inconclusive one is registered to staging with the comparisons a human has to weigh.
 */
export function gateTags(gate: GateDecision): Record<string, string> {
  const why = `${gate.suite}: ${gate.reason}`.slice(0, 5000);
  const verdict = gateVerdict(gate);
  if (verdict === 'block') return { [QUARANTINE_TAG]: 'true', [QUARANTINE_REASON_TAG]: why };
  return verdict === 'inconclusive' ? { [GATE_INCONCLUSIVE_TAG]: why } : {};
}

/** What validation measured and the thresholds it held the model to, shown to whoever approves it. */
function validationNumbers(input: PipelineWorkflowInput, merge: MergeReport, candle: CandleResults) {
  return {
    target_tokens: merge.num_tokens,
    max_perplexity: input.validate.max_perplexity,
    general_perplexity: candle.validate.general_perplexity?.candle ?? null,
    general_tokens: merge.general_num_tokens,
    base_general_perplexity: merge.base_general_perplexity,
    max_general_perplexity: input.validate.max_general_perplexity,
    quantized_max_perplexity: input.validate.quantized_max_perplexity,
  };
}

function codeVersion(): Record<string, string> {
  const commit = (() => {
    try {
      return execFileSync('git', ['rev-parse', 'HEAD'], { cwd: repoRoot, stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim();
    } catch {
      return 'unknown';
    }
  })();
  const lockHash = (file: string): string => {
    try {
      return sha256Text(readFileSync(join(repoRoot, file), 'utf8'));
    } catch {
      return 'unknown';
    }
  };
  return { git_commit: commit, trainer_lock_sha256: lockHash('trainer/requirements.lock'), control_plane_lock_sha256: lockHash('package-lock.json') };
}

export function createRegistryActivities(deps: ActivityDeps) {
  const publisher = createModelRegistrationActivities(deps);
  type RegisterInput = { pipelineId: string; input: PipelineWorkflowInput; train: TrainOutput; merge: MergeReport; candle: CandleResults };

  /**
   * What the manifests say about the model: the architecture from the merged config.json; the method is the
   * pipeline's, refused when the adapter's peft_type is of another family; the base model is the catalogue name
   * (adapter_config.json holds the job's local path to it, which means nothing outside that job).
   */
  async function describe(a: RegisterInput, merged: SourceFile[], adapter: SourceFile[]): Promise<ModelDescription> {
    const fromMerged = describeModel(await readSourceJson(deps.store, merged, 'config.json'), null);
    if (!fromMerged.architecture) throw new ModelArtifactError(`${a.merge.merged_dir}/config.json: no "architectures" entry naming the model class`);
    const fromAdapter = describeModel(null, await readSourceJson(deps.store, adapter, 'adapter_config.json'));
    const family = adapterFamilyOf(a.input.method);
    if (family && fromAdapter.method !== family)
      throw new ModelArtifactError(`${a.train.adapter_path}/adapter_config.json: peft_type gives method family "${fromAdapter.method}", but the pipeline trained ${a.input.method} (${family})`);
    return { architecture: fromMerged.architecture, base_model: a.input.base_model, method: a.input.method };
  }

  /**
   * What the version's copy takes: merged weights, the adapter (for adapter methods) and the GGUF, all job outputs
   * in the object store (copied store to store, never through a worker's disk), described by their manifests. The
   * GGUF must keep the digest the Candle tool measured.
   */
  async function plan(a: RegisterInput, row: ModelVersionRow): Promise<ModelRegistrationInput> {
    const [merged, adapter] = await Promise.all([filesUnder(deps.store, a.merge.merged_dir), filesUnder(deps.store, a.train.adapter_path)]);
    const description = await describe(a, merged, adapter);
    const gguf = { uri: a.candle.gguf.path, path: basename(a.candle.gguf.path), size_bytes: a.candle.gguf.size_bytes };
    const formats: ModelRegistrationInput['formats'] = [{ format: 'safetensors', files: merged }];
    if (adapterFamilyOf(a.input.method)) formats.push({ format: 'lora', files: adapter });
    formats.push({ format: `gguf-${a.candle.gguf.dtype.toLowerCase()}`, files: [gguf], expect_sha256: { [gguf.path]: a.candle.gguf.sha256 } });
    for (const f of formats) if (!f.files.length) throw new ModelArtifactError(`format ${f.format}: no files to register`);
    return {
      version_id: row.id,
      organization_id: a.input.organization_id,
      model_name: a.input.model_name,
      version: row.version,
      formats,
      description,
      source_format: 'safetensors',
      total_bytes: formats.flatMap((f) => f.files).reduce((n, f) => n + (f.size_bytes ?? 0), 0),
    };
  }

  type RegisterArgs = RegisterInput & { runId: string; dataset: DatasetRef; evalReport: EvalOutcome };

  /**
   * Inserts the pending version (or finds the one a retried call made) and plans its copy; bad artifacts found
   * while planning fail the registration for good. registration: null when there is nothing left to copy.
   */
  async function prepare(a: RegisterArgs): Promise<PreparedRegistration> {
    const gate = a.evalReport.gate;
    const row = await insertVersion(deps.db, pendingVersion(a));
    const prepared = { version: row.version, stage: row.stage, gateReason: gate.reason, artifacts: row.artifacts as Record<string, Artifact> };
    if (row.status !== 'pending_registration') return { ...prepared, registration: null, status: row.status, message: row.statusMessage };
    try {
      return { ...prepared, registration: await plan(a, row), status: row.status, message: null };
    } catch (err) {
      if (!(err instanceof ModelArtifactError)) throw err;
      const message = `model version ${row.version} of "${a.input.model_name}" not registered: ${err.message}`;
      await completeRegistration(deps.db, row.id, { artifacts: {}, checksum: null, failed: true, message });
      throw nonRetryable(FailureType.BadArtifacts, message);
    }
  }

  /** The version row of a pipeline's registration: lineage, eval numbers and config of record, pending its files. */
  function pendingVersion(a: RegisterArgs): NewModelVersion {
    // The gate's decision of record: candidate vs base and vs production on the suite (activities/evaluation.ts).
    const gate = a.evalReport.gate;
    const baseDir = resolveBaseModel(a.input.base_model, deps.config, deps.bootstrap);
    const scores = (s: EvalReport['base'] | null) => (s ? { loss: s.loss, perplexity: s.perplexity, exact_match: s.exact_match } : null);
    return {
      organizationId: a.input.organization_id,
      modelName: a.input.model_name,
      stage: gateVerdict(gate) === 'block' ? 'none' : 'staging',
      runId: a.runId,
      datasetId: a.dataset.id,
      // The version's number names its prefix, so the row comes first (pending) and its files follow.
      status: 'pending_registration',
      metrics: {
        exact_match: a.evalReport.tuned?.exact_match,
        perplexity: a.evalReport.tuned?.perplexity,
        base: scores(a.evalReport.base),
        tuned: scores(a.evalReport.tuned),
        production: scores(a.evalReport.production),
        general_perplexity_eval: a.evalReport.tuned?.general_perplexity ?? null,
        gate,
        candle_perplexity: a.candle.validate.perplexity?.candle,
        pytorch_perplexity: a.merge.reference_perplexity,
        quantized_perplexity: a.candle.quantize.quantization?.perplexity ?? null,
        validation: validationNumbers(a.input, a.merge, a.candle),
        final_train_loss: a.train.final_metrics['train/loss'],
      },
      trainingConfig: {
        dataset: a.dataset.name,
        dataset_version: a.dataset.version,
        dataset_sha256: a.dataset.sha256,
        base_model: a.input.base_model,
        base_model_record: baseModelRecord(baseDir),
        method: a.input.method,
        hyperparameters: a.input.hyperparameters,
        checkpoint: a.input.checkpoint,
        total_steps: a.train.steps,
        tokens_seen: a.train.tokens_seen,
        resumed_from_step: a.train.resumed_from_step,
        code: codeVersion(),
      },
      lineage: { run_id: a.runId, dataset_id: a.dataset.id, pipeline_id: a.pipelineId, eval_gate: gate.reason },
      tags: { method: a.input.method, eval_suite: gate.suite, ...gateTags(gate) },
      createdBy: a.input.requested_by,
      sourcePipeline: a.pipelineId,
    };
  }

  return {
    /**
     * The register stage's first step: the pending version with its lineage (idempotent per pipeline) and the plan
     * of its copy, which the pipeline then runs as `publishModelVersion` with a deadline sized to its bytes.
     */
    prepareModelRegistration: prepare,

    /**
     * The register stage in one activity, as pipelines started before the copy became an activity of its own call
     * it: prepare, then copy in place (heartbeating when it runs as an activity).
     */
    async registerModelVersion(a: RegisterArgs): Promise<RegisteredVersion> {
      const prepared = await prepare(a);
      if (!prepared.registration) {
        if (prepared.status === 'failed_registration') throw nonRetryable(FailureType.BadArtifacts, prepared.message ?? `model version ${prepared.version} failed registration`);
        return { version: prepared.version, stage: prepared.stage, gateReason: prepared.gateReason, artifacts: prepared.artifacts };
      }
      const done = await publisher.publishModelVersion(prepared.registration);
      if (done.status !== 'ready') throw nonRetryable(FailureType.BadArtifacts, done.message ?? `model version ${prepared.version} was not registered`);
      return { version: prepared.version, stage: prepared.stage, gateReason: prepared.gateReason, artifacts: done.artifacts as Record<string, Artifact> };
    },

    /**
     * Production stage and the archive of the previous version, in one transaction. reloadHook: whether this worker
     * has a reload hook to call now that it committed (the workflow cannot read the config).
     */
    async promoteModelVersion(a: {
      organizationId: string;
      modelName: string;
      version: number;
      decision: PromotionDecision;
    }): Promise<{ archived: number[]; promotedAt: string; reloadHook: boolean }> {
      const { version, archived } = await transitionStage(deps.db, {
        organizationId: a.organizationId,
        modelName: a.modelName,
        version: a.version,
        stage: 'production',
        actor: a.decision.approver,
        reason: a.decision.reason,
        requireGate: deps.config.registry.require_gate_for_production,
      });
      return { archived, promotedAt: version.stageChangedAt.toISOString(), reloadHook: deps.config.promotion.webhook_url !== undefined };
    },
  };
}

// register and promote stages: register a version with its full lineage, publish its formats (merged
// safetensors, the LoRA adapter, the GGUF) under the version's own prefix in the models bucket, each with a
// manifest of SHA-256s (lib/model-artifacts.ts), stage it by the eval gate, and move it to production on approval.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, basename } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import type { ActivityDeps } from './deps.js';
import type { Artifact, PipelineWorkflowInput, PromotionDecision } from '../contracts/pipeline.js';
import type { EvalReport, MergeReport } from '../contracts/trainer-job.js';
import { QUARANTINE_REASON_TAG, QUARANTINE_TAG, type GateDecision } from '../contracts/eval-suite.js';
import type { EvalOutcome } from './evaluation.js';
import { completeRegistration, registerModelVersion as insertVersion, transitionStage, type ModelStage, type ModelVersionRow } from '../db/repo/models.js';
import { baseModelRecord, resolveBaseModel } from '../lib/base-models.js';
import { repoRoot } from '../lib/config.js';
import { sha256Text } from '../lib/hash.js';
import {
  adapterFamilyOf,
  describeModel,
  filesUnder,
  ModelArtifactError,
  publishFormat,
  readSourceJson,
  versionChecksum,
  versionPrefix,
  type ModelDescription,
  type SourceFile,
} from '../lib/model-artifacts.js';
import type { FormatArtifact } from '../contracts/models.js';
import type { CandleResults } from './conversion.js';
import type { DatasetRef } from './datasets.js';
import type { TrainOutput } from './training.js';

export interface RegisteredVersion {
  version: number;
  stage: ModelStage;
  gateReason: string;
  artifacts: Record<string, Artifact>;
}

/** Tags a quarantined version carries: the gate failed, and why (shown to whoever would promote it). */
export function gateTags(gate: GateDecision): Record<string, string> {
  return gate.passed ? {} : { [QUARANTINE_TAG]: 'true', [QUARANTINE_REASON_TAG]: `${gate.suite}: ${gate.reason}`.slice(0, 5000) };
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

  /** Copies every format under the version's own prefix with its manifest: merged weights, adapter, GGUF. */
  async function publish(a: RegisterInput, version: number): Promise<{ artifacts: Record<string, FormatArtifact>; description: ModelDescription }> {
    const [merged, adapter] = await Promise.all([filesUnder(deps.store, a.merge.merged_dir), filesUnder(deps.store, a.train.adapter_path)]);
    const description = await describe(a, merged, adapter);
    const common = { bucket: deps.config.storage.buckets.models, prefix: versionPrefix(a.input.organization_id, a.input.model_name, version), model: a.input.model_name, version, description };
    // The merged model, adapter and GGUF are job outputs in the object store: copied, never through a worker's disk.
    const artifacts: Record<string, FormatArtifact> = {};
    artifacts.safetensors = (await publishFormat(deps.store, { ...common, format: 'safetensors', files: merged })).artifact;
    if (adapterFamilyOf(a.input.method)) artifacts.lora = (await publishFormat(deps.store, { ...common, format: 'lora', files: adapter })).artifact;
    const ggufFormat = `gguf-${a.candle.gguf.dtype.toLowerCase()}`;
    const gguf = await publishFormat(deps.store, { ...common, format: ggufFormat, files: [{ uri: a.candle.gguf.path, path: basename(a.candle.gguf.path) }] });
    const copied = gguf.manifest.files[0]!.sha256;
    if (copied !== a.candle.gguf.sha256) throw ApplicationFailure.nonRetryable(`GGUF changed between quantization and upload (${copied} != ${a.candle.gguf.sha256})`, 'ValidationFailed');
    artifacts[ggufFormat] = gguf.artifact;
    return { artifacts, description };
  }

  /** Publishes a pending version's files and marks it ready; bad artifacts fail the registration for good. */
  async function completeVersion(a: RegisterInput, row: ModelVersionRow): Promise<ModelVersionRow> {
    try {
      const { artifacts, description } = await publish(a, row.version);
      return await completeRegistration(deps.db, row.id, {
        artifacts,
        checksum: versionChecksum(artifacts),
        source: artifacts.safetensors!.path,
        architecture: description.architecture,
        baseModel: description.base_model,
        method: description.method,
      });
    } catch (err) {
      if (!(err instanceof ModelArtifactError)) throw err;
      await completeRegistration(deps.db, row.id, { artifacts: {}, checksum: null, failed: true });
      throw ApplicationFailure.nonRetryable(`model version ${row.version} of "${a.input.model_name}" not registered: ${err.message}`, 'BadArtifacts');
    }
  }

  return {
    async registerModelVersion(a: {
      pipelineId: string;
      runId: string;
      input: PipelineWorkflowInput;
      dataset: DatasetRef;
      train: TrainOutput;
      evalReport: EvalOutcome;
      merge: MergeReport;
      candle: CandleResults;
    }): Promise<RegisteredVersion> {
      // The gate's decision of record: candidate vs base and vs production on the suite (activities/evaluation.ts).
      const gate = a.evalReport.gate;
      const baseDir = resolveBaseModel(a.input.base_model, deps.config, deps.bootstrap);
      const scores = (s: EvalReport['base'] | null) => (s ? { loss: s.loss, perplexity: s.perplexity, exact_match: s.exact_match } : null);
      const row = await insertVersion(deps.db, {
        organizationId: a.input.organization_id,
        modelName: a.input.model_name,
        stage: gate.passed ? 'staging' : 'none',
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
      });
      // A retried activity finds its version (by pipeline) and finishes what the first attempt started.
      const done = row.status === 'ready' ? row : await completeVersion(a, row);
      return { version: done.version, stage: done.stage, gateReason: gate.reason, artifacts: done.artifacts as Record<string, Artifact> };
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
      });
      return { archived, promotedAt: version.stageChangedAt.toISOString(), reloadHook: deps.config.promotion.webhook_url !== undefined };
    },
  };
}

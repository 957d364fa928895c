// register and promote stages: publish the merged model and GGUF to the models bucket, register a version
// with its full lineage, stage it by the eval gate, and move it to production on approval.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, basename } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import type { ActivityDeps } from './deps.js';
import type { Artifact, PipelineWorkflowInput, PromotionDecision } from '../contracts/pipeline.js';
import type { EvalReport, MergeReport } from '../contracts/trainer-job.js';
import { QUARANTINE_REASON_TAG, QUARANTINE_TAG, type GateDecision } from '../contracts/eval-suite.js';
import type { EvalOutcome } from './evaluation.js';
import { registerModelVersion as insertVersion, transitionStage, type ModelStage } from '../db/repo/models.js';
import { baseModelRecord, resolveBaseModel } from '../lib/base-models.js';
import { repoRoot } from '../lib/config.js';
import { sha256Text } from '../lib/hash.js';
import { copyPrefix, type StoredObject } from '../lib/object-store.js';
import type { CandleResults } from './conversion.js';
import type { DatasetRef } from './datasets.js';
import type { TrainOutput } from './training.js';

export interface RegisteredVersion {
  version: number;
  stage: ModelStage;
  gateReason: string;
  artifacts: Record<string, Artifact>;
}

const checksum = (sha: string): string => `sha256:${sha}`;

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
  async function publish(a: { pipelineId: string; input: PipelineWorkflowInput; merge: MergeReport; candle: CandleResults }): Promise<Record<string, Artifact>> {
    const bucket = deps.config.storage.buckets.models;
    const prefix = `${a.input.organization_id}/${a.input.model_name}/${a.pipelineId}`;
    // The merged model and the GGUF are job outputs in the object store: copied, never through a worker's disk.
    const weights = await copyPrefix(deps.store, a.merge.merged_dir, bucket, `${prefix}/safetensors`);
    const gguf = await deps.store.copy(a.candle.gguf.path, bucket, `${prefix}/gguf-${a.candle.gguf.dtype}/${basename(a.candle.gguf.path)}`);
    if (gguf.sha256 !== a.candle.gguf.sha256) throw ApplicationFailure.nonRetryable(`GGUF changed between quantization and upload (${gguf.sha256} != ${a.candle.gguf.sha256})`, 'ValidationFailed');
    const main = weights.find((o) => o.uri.endsWith('.safetensors')) as StoredObject;
    return {
      safetensors: {
        path: main.uri.slice(0, main.uri.lastIndexOf('/') + 1),
        size_bytes: weights.reduce((n, o) => n + o.size_bytes, 0),
        checksum: checksum(main.sha256),
      },
      [`gguf-${a.candle.gguf.dtype}`]: { path: gguf.uri, size_bytes: gguf.size_bytes, checksum: checksum(gguf.sha256) },
    };
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
      const artifacts = await publish(a);
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
        architecture: 'LlamaForCausalLM',
        baseModel: a.input.base_model,
        method: a.input.method,
        artifacts,
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
        source: artifacts.safetensors!.path,
        createdBy: a.input.requested_by,
        sourcePipeline: a.pipelineId,
      });
      return { version: row.version, stage: row.stage, gateReason: gate.reason, artifacts: row.artifacts as Record<string, Artifact> };
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

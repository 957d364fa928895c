// train stage: the trainer runs as a job that survives worker restarts; the checkpoint watcher beside it
// records every complete checkpoint (manifest verified, copied to the object store) as a run artifact.
import { Context, getClient, sleep } from '@temporalio/activity';
import type { ActivityDeps } from './deps.js';
import type { PipelineWorkflowInput } from '../contracts/pipeline.js';
import { CheckpointManifestSchema, TRAIN_JOB_IO_FIELDS, HardwareSchema, RecoveryPolicySchema, TrainResultSchema, type TrainEvent, type TrainJobSpec, type TrainMethod, type TrainProgress, type TrainResult } from '../contracts/trainer-job.js';
import type { JobRecovery, TrainingProgressSignal } from '../contracts/pipeline.js';
import { readProgress, type JobOutcome } from '../jobs/attempts.js';
import { runJobToCompletion } from './run-job.js';
import { defineJob } from '../jobs/definition.js';
import { readRecoveries, visibleRecoveries, type TrainerFailure } from '../jobs/recovery.js';
import { baseModelInput, fileInput } from '../jobs/inputs.js';
import { setRunTags } from '../db/repo/params-tags.js';
import { artifactsOf, recordArtifact } from '../db/repo/run-artifacts.js';
import { getRunById, runDataOf } from '../db/repo/runs.js';
import { emitEvent } from '../db/repo/outbox.js';
import { durationMs } from '../lib/config.js';
import { accountedGpuType, devicePriceUsd } from '../lib/prices.js';
import { jobTotalTags, type JobTotals } from '../db/repo/usage.js';
import { sha256Stream, sha256Text } from '../lib/hash.js';
import type { QueuePlace } from '../jobs/executor/types.js';
import { JobFiles, checkpointsKey, checkpointsUri, jobNameOf } from '../lib/job-files.js';
import { copyPrefix } from '../lib/object-store.js';
import { trainingProgressSignal } from '../contracts/pipeline-messages.js';
import { pipelineWorkflowId } from '../contracts/pipeline.js';
import type { DatasetRef } from './datasets.js';
import type { CheckpointWatchState } from '../contracts/pipeline.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';

const PROGRESS_SIGNAL_EVERY_MS = 5000;

export interface TrainOutput extends Omit<TrainResult, 'adapter_path'> {
  adapter_path: string; // the pipeline only runs adapter methods; an object URI
  /** the object-store prefix of the job attempt that finished */
  job_uri: string;
}

export function createTrainingActivities(deps: ActivityDeps) {
  return {
    async trainModel(a: { pipelineId: string; runId: string; input: PipelineWorkflowInput; dataset: DatasetRef }): Promise<TrainOutput> {
      const { result, files } = await runTrainJob(deps, { ownerId: a.pipelineId, runId: a.runId, recipe: a.input, dataset: a.dataset, progressWorkflowId: pipelineWorkflowId(a.pipelineId) });
      if (result.adapter_path === null) throw nonRetryable(FailureType.BadInput, `${a.input.method} training wrote no adapter (${files.file('result.json')})`);
      return { ...result, adapter_path: result.adapter_path, job_uri: files.uri };
    },

    /**
     * One pass of the checkpoint watcher workflow (workflows/checkpoint-watch.ts), which waits between passes on a
     * timer and so holds no activity slot while training runs: records each new complete checkpoint, and emits a
     * `checkpoint.stale` event once when none appeared within trainer.checkpoint_alert_after. The watch's state
     * travels in and out; poll_ms is how long the workflow waits before the next pass.
     */
    async sweepCheckpoints(a: { pipelineId: string; runId: string; organizationId: string; state: CheckpointWatchState | null }): Promise<CheckpointWatchState> {
      const root = checkpointsUri(deps.store, deps.config, a.organizationId, a.runId);
      const recorded = new Set((await artifactsOf(deps.db, a.runId)).map((r) => r.path));
      const alertAfter = durationMs(deps.config.trainer.checkpoint_alert_after);
      const now = Date.now();
      let { last_new_at: lastNew, alerted } = a.state ?? { last_new_at: now, alerted: false };
      if ((await recordNewCheckpoints(deps, a, root, recorded)) > 0) {
        lastNew = now;
        alerted = false;
      }
      if (!alerted && now - lastNew > alertAfter) {
        alerted = true;
        await emitStaleCheckpointAlert(deps, a, now - lastNew);
      }
      // Often enough to raise the alert on time and list checkpoints soon after they appear, and no more.
      return { last_new_at: lastNew, alerted, poll_ms: Math.min(30_000, Math.max(1000, Math.floor(alertAfter / 4))) };
    },

    /**
     * Records each new complete checkpoint the job has put in the object store. With once=false it runs until
     * cancelled (training ended) and emits a `checkpoint.stale` event when none appeared within
     * trainer.checkpoint_alert_after.
     */
    async watchCheckpoints(a: { pipelineId: string; runId: string; organizationId: string; once: boolean }): Promise<{ checkpoints: { step: number; uri: string; sha256: string }[] }> {
      const root = checkpointsUri(deps.store, deps.config, a.organizationId, a.runId);
      const recorded = new Set((await artifactsOf(deps.db, a.runId)).map((r) => r.path));
      const alertAfter = durationMs(deps.config.trainer.checkpoint_alert_after);
      let lastNew = Date.now();
      let alerted = false;
      for (;;) {
        const added = await recordNewCheckpoints(deps, a, root, recorded);
        if (added > 0) {
          lastNew = Date.now();
          alerted = false;
        }
        if (a.once) break;
        if (!alerted && Date.now() - lastNew > alertAfter) {
          alerted = true;
          await emitStaleCheckpointAlert(deps, a, Date.now() - lastNew);
        }
        Context.current().heartbeat({ recorded: recorded.size });
        await sleep(2000);
      }
      const rows = (await artifactsOf(deps.db, a.runId)).filter((r) => r.path.startsWith('checkpoints/') && (r.metadata as { kind?: string }).kind !== 'best_checkpoint');
      return { checkpoints: rows.map((r) => ({ step: Number((r.metadata as { step: number }).step), uri: r.uri, sha256: r.sha256 })).sort((x, y) => x.step - y.step) };
    },
  };
}

/** What a training job needs: the pipeline's train stage and a submitted recipe job give the same. */
export interface TrainJobArgs {
  /** the pipeline or job the training belongs to: its job is named `<ownerId>-train`, its events keyed by it */
  ownerId: string;
  runId: string;
  recipe: Pick<PipelineWorkflowInput, 'base_model' | 'hyperparameters' | 'quantization' | 'adalora' | 'preference' | 'data' | 'checkpoint' | 'recovery' | 'hardware' | 'priority'> & { method: TrainMethod };
  dataset: DatasetRef;
  /** the workflow that gets the trainingProgressSignal */
  progressWorkflowId: string;
  /** told when the job waits (with why, and its place in its queue) and when it runs: a submitted job's catalogue row follows it */
  onPhase?: (phase: 'waiting' | 'running', why: string | null, queue?: QueuePlace | null) => Promise<void>;
  /** told every progress.json the worker reads (a submitted job's metrics and checkpoint events) */
  onProgress?: (p: TrainProgress) => Promise<void>;
  /** how often the worker looks at the job (default 1 s) */
  pollMs?: number;
  /** where its checkpoints go and it resumes from; default the run's own prefix (a resumed job may have another) */
  checkpointsUri?: string;
}

/**
 * Runs the trainer as a job to completion (any method, full included): the spec from the recipe, progress
 * signalled to the owning workflow, trainer events, recoveries and preemptions recorded on the run, usage totals.
 */
export async function runTrainJob(deps: ActivityDeps, a: TrainJobArgs): Promise<JobOutcome<TrainResult>> {
  const organizationId = (await getRunById(deps.db, a.runId))?.organizationId;
  if (!organizationId) throw nonRetryable(FailureType.NotFound, `run ${a.runId} does not exist`);
  const requested = HardwareSchema.parse(a.recipe.hardware ?? {});
  const hardware = { ...requested, price_per_device_hour_usd: requested.price_per_device_hour_usd ?? devicePriceUsd(deps.config, requested) };
  const spec: TrainJobSpec = {
    kind: 'train',
    job_name: `${a.ownerId}-train`,
    run_id: a.runId,
    tracking_uri: deps.trackingUri,
    ...TRAIN_JOB_IO_FIELDS,
    method: a.recipe.method,
    hyperparameters: a.recipe.hyperparameters,
    ...(a.recipe.quantization ? { quantization: a.recipe.quantization } : {}),
    ...(a.recipe.adalora ? { adalora: a.recipe.adalora } : {}),
    ...(a.recipe.preference ? { preference: a.recipe.preference } : {}),
    data: a.recipe.data,
    checkpoint: a.recipe.checkpoint,
    // Parsed here too: a workflow started before these fields existed has neither in its input.
    recovery: RecoveryPolicySchema.parse(a.recipe.recovery ?? {}),
    hardware,
    threads: deps.config.trainer.threads,
  };
  const job = defineJob({
    name: spec.job_name,
    kind: 'train',
    organizationId,
    runId: a.runId,
    priority: a.recipe.priority ?? null,
    tool: 'trainer',
    spec,
    inputs: {
      base_model_path: await baseModelInput(deps, a.recipe.base_model),
      train_path: fileInput(a.dataset.splits.train),
      validation_path: fileInput(a.dataset.splits.validation),
    },
    outputs: { output_dir: 'dir' },
    checkpoints: { field: 'checkpoint_dir', uri: a.checkpointsUri ?? checkpointsUri(deps.store, deps.config, organizationId, a.runId) },
    resources: { nodes: hardware.nodes, processes: hardware.processes, gpus_per_node: hardware.gpus_per_node, gpu_type: hardware.gpu_type, image: hardware.image },
  });
  const recordedEvents = new Set<string>();
  const handle = getClient().workflow.getHandle(a.progressWorkflowId);
  const logical = JobFiles.of(deps.store, deps.config, organizationId, jobNameOf(job.name));
  const signalProgress = async (p: TrainProgress | null, waiting: string | null, extra: Partial<Pick<TrainingProgressSignal, 'queue' | 'preemptions'>> = {}): Promise<void> => {
    const recoveries = visibleRecoveries(await readRecoveries(logical));
    const queue = waiting === null ? null : (extra.queue ?? null);
    await handle
      .signal(trainingProgressSignal, { step: p?.step ?? 0, max_steps: p?.max_steps ?? spec.hyperparameters.max_steps, last_checkpoint: p?.last_checkpoint ?? null, metrics: p?.metrics ?? {}, recoveries, waiting, queue, ...(extra.preemptions ? { preemptions: extra.preemptions } : {}) })
      .catch(() => undefined);
  };
  let lastSignal = 0;
  let lastCheckpoint: string | null = null;
  let lastWaiting: string | null = null;
  let phase: 'waiting' | 'running' | null = null;
  const startedAt = Date.now();
  const { result, files } = await runJobToCompletion(deps, {
    job,
    resultSchema: TrainResultSchema,
    ...(a.pollMs ? { pollMs: a.pollMs } : {}),
    onWaiting: async (why, queue) => {
      // Every new reason is reported at once: a pipeline stuck on an image pull, on capacity or in its queue says so.
      if (why === lastWaiting && Date.now() - lastSignal < PROGRESS_SIGNAL_EVERY_MS) return;
      lastWaiting = why;
      lastSignal = Date.now();
      phase = 'waiting';
      await a.onPhase?.('waiting', why, queue);
      await signalProgress(null, why, { queue });
    },
    onPreemptions: async (preemptions) => {
      await setRunTags(deps.db, a.runId, preemptions.map((p, i) => ({ key: `hanzo_ml.preemption.${i + 1}`, value: JSON.stringify(p) })));
      await signalProgress(null, lastWaiting, { preemptions });
    },
    checkpointIntervalSeconds: spec.checkpoint.every_seconds ?? undefined,
    onPoll: async (attempt) => {
      if (phase !== 'running') {
        phase = 'running';
        await a.onPhase?.('running', null);
      }
      const p = await readProgress(attempt);
      if (!p) return {};
      await a.onProgress?.(p);
      // Throttled: each signal is a history event; a new checkpoint is always reported.
      if (Date.now() - lastSignal > PROGRESS_SIGNAL_EVERY_MS || p.last_checkpoint !== lastCheckpoint || lastWaiting !== null) {
        lastSignal = Date.now();
        lastCheckpoint = p.last_checkpoint;
        lastWaiting = null;
        await signalProgress(p, null);
      }
      await recordTrainerEvents(deps, a.runId, p.events, recordedEvents);
      return { step: p.step, last_checkpoint: p.last_checkpoint };
    },
    recovery: {
      policy: spec.recovery,
      onFault: async (recovery, restarting, failure, attempt) => {
        await recordRecovery(deps, { runId: a.runId, organizationId, pipelineId: a.ownerId }, recovery, restarting, failure);
        await signalProgress(await readProgress(attempt), null);
      },
    },
  });
  await recordTrainerEvents(deps, a.runId, result.events, recordedEvents);
  await recordJobTotals(deps, { runId: a.runId, organizationId, pipelineId: a.ownerId }, {
    seconds: (Date.now() - startedAt) / 1000,
    deviceHours: result.totals?.device_hours ?? 0,
    costUsd: result.totals?.cost_usd ?? null,
    tokens: result.totals?.tokens ?? result.tokens_seen,
    gpuType: accountedGpuType(hardware),
    method: spec.method,
    baseModel: a.recipe.base_model,
  });
  return { result, files };
}

/** Trainer events (a checkpoint skipped on resume, ...) become run tags `hanzo_ml.event.<epoch ms>.<kind>`. */
async function recordTrainerEvents(deps: ActivityDeps, runId: string, events: TrainEvent[], recorded: Set<string>): Promise<void> {
  const fresh = events.map((e) => ({ key: `hanzo_ml.event.${Date.parse(e.at)}.${e.kind}`, value: JSON.stringify(e) })).filter((t) => !recorded.has(t.key));
  if (fresh.length === 0) return;
  await setRunTags(deps.db, runId, fresh);
  for (const t of fresh) recorded.add(t.key);
}

/**
 * A finished train job's usage: run tags (the usage report and the measured throughput of estimates read them
 * too: datasets/cost-estimate.ts) the metrics endpoint sums (hanzo_ml_gpu_hours_total,
 * hanzo_ml_job_duration_seconds) and the `job.completed` event billing consumes. Device-hours of a CPU job are
 * reported under gpu_type "cpu", so a cluster's GPU bill never includes them.
 */
async function recordJobTotals(deps: ActivityDeps, a: { runId: string; organizationId: string | undefined; pipelineId: string }, t: JobTotals): Promise<void> {
  await setRunTags(deps.db, a.runId, jobTotalTags(t));
  if (a.organizationId)
    await emitEvent(deps.db, a.organizationId, 'jobs', a.pipelineId, {
      event: 'job.completed',
      job_id: a.pipelineId,
      run_id: a.runId,
      type: 'train',
      duration_seconds: t.seconds,
      gpu_hours: t.deviceHours,
      gpu_type: t.gpuType,
      ...(t.costUsd !== null ? { cost_usd: t.costUsd } : {}),
    });
}

/** A restart after a fault (or the decision not to restart) as a run tag and a `jobs` event. */
async function recordRecovery(
  deps: ActivityDeps,
  a: { runId: string; organizationId: string | undefined; pipelineId: string },
  recovery: JobRecovery,
  restarting: boolean,
  failure: TrainerFailure | null,
): Promise<void> {
  const detail = { ...recovery, restarting, failure: failure?.message ?? null };
  await setRunTags(deps.db, a.runId, [{ key: `hanzo_ml.recovery.${recovery.restart}`, value: JSON.stringify(detail) }]);
  if (a.organizationId)
    await emitEvent(deps.db, a.organizationId, 'jobs', a.pipelineId, {
      event: restarting ? 'training.recovering' : recovery.kind === 'diverged' ? 'training.diverged' : 'training.failed',
      job_id: a.pipelineId,
      run_id: a.runId,
      ...detail,
    });
}

/** A checkpoint whose files do not match its manifest: never recorded, reported once. */
class CorruptCheckpointError extends Error {}

async function recordNewCheckpoints(
  deps: ActivityDeps,
  a: { pipelineId: string; runId: string; organizationId: string },
  root: string,
  recorded: Set<string>,
): Promise<number> {
  let objects = await deps.store.list(root);
  // A checkpoint exists once its manifest does (the job uploads it last): {root}/{step}/manifest.json.
  const steps = [...new Set(objects.map((o) => /\/(\d+)\/manifest\.json$/.exec(o.uri)?.[1]).filter((x): x is string => x !== undefined))].map(Number).sort((x, y) => x - y);
  let added = 0;
  const entries: { prefix: string; path: string; kind: 'checkpoint' | 'best_checkpoint'; name: string }[] = steps.map((step) => ({ prefix: `${root}/${step}`, path: `checkpoints/${stepName(step)}`, kind: 'checkpoint', name: stepName(step) }));
  // best/ (the lowest validation loss so far) is recorded under the name of the checkpoint it copies.
  const bestOf = await deps.store
    .readText(`${root}/best/manifest.json`)
    .then((t) => (t ? (JSON.parse(t) as { copy_of?: unknown }).copy_of : undefined))
    .catch(() => undefined);
  if (typeof bestOf === 'string' && /^step-\d+$/.test(bestOf) && !recorded.has(`checkpoints/best-${bestOf}`)) {
    // best/ is replaced whenever a better checkpoint comes: the artifact of record is a copy that never changes.
    const copy = await copyPrefix(deps.store, `${root}/best`, deps.config.storage.buckets.checkpoints, `${checkpointsKey(a.organizationId, a.runId)}/best-${bestOf}`).catch(() => null);
    if (copy) entries.push({ prefix: `${root}/best-${bestOf}`, path: `checkpoints/best-${bestOf}`, kind: 'best_checkpoint', name: 'best' });
  }
  if (entries.some((e) => e.kind === 'best_checkpoint')) objects = await deps.store.list(root);
  for (const { prefix, path, kind, name } of entries) {
    if (recorded.has(path)) continue;
    const ok = await recordCheckpoint(deps, a, prefix, objects, path, kind).catch(async (err: unknown) => {
      if (err instanceof CorruptCheckpointError) {
        recorded.add(path); // the same bytes will not verify on the next poll either
        await reportCorruptCheckpoint(deps, a, name, err.message);
        return false;
      }
      // The job may prune an old checkpoint (keep_last) or replace best/ while it is being read: skip it.
      deps.log.warn('checkpoint not recorded', { checkpoint: name, error: String(err) });
      return false;
    });
    if (ok) {
      recorded.add(path);
      added++;
    }
  }
  return added;
}

function stepName(step: number): string {
  return `step-${String(step).padStart(8, '0')}`;
}

/** Once per checkpoint, across watcher attempts: the run tag is the record that it was reported. */
async function reportCorruptCheckpoint(deps: ActivityDeps, a: { pipelineId: string; runId: string; organizationId: string }, name: string, message: string): Promise<void> {
  deps.log.error('checkpoint does not match its manifest: not recorded', { checkpoint: name, error: message });
  const key = `hanzo_ml.event.checkpoint_corrupt.${name}`;
  const tags = (await runDataOf(deps.db, [a.runId])).tags.get(a.runId) ?? [];
  if (tags.some((t) => t.key === key)) return;
  const event = { kind: 'checkpoint_corrupt', checkpoint: name, message, at: new Date().toISOString() };
  await setRunTags(deps.db, a.runId, [{ key, value: JSON.stringify(event) }]);
  await emitEvent(deps.db, a.organizationId, 'jobs', a.pipelineId, { event: 'checkpoint.corrupt', job_id: a.pipelineId, run_id: a.runId, checkpoint: name, message });
}

/** Records one checkpoint as a run artifact after checking every stored file against its manifest. */
async function recordCheckpoint(
  deps: ActivityDeps,
  a: { pipelineId: string; runId: string; organizationId: string },
  prefix: string,
  listed: { uri: string; size_bytes: number }[],
  path: string,
  kind: 'checkpoint' | 'best_checkpoint' = 'checkpoint',
): Promise<boolean> {
  const manifestText = await deps.store.readText(`${prefix}/manifest.json`);
  if (manifestText === null) return false; // a checkpoint without a manifest does not exist
  const manifest = CheckpointManifestSchema.parse(JSON.parse(manifestText));
  for (const f of manifest.files) {
    const uri = `${prefix}/${f.path}`;
    const obj = listed.find((o) => o.uri === uri);
    if (!obj || obj.size_bytes !== f.size_bytes) throw new CorruptCheckpointError(`${path}/${f.path}: stored object does not match the manifest (size ${obj?.size_bytes ?? 'missing'} != ${f.size_bytes})`);
    // Hashed as stored, streamed: the manifest is the trainer's word, this is what a resume will read.
    const sha256 = await sha256Stream(await deps.store.read(uri));
    if (sha256 !== f.sha256) throw new CorruptCheckpointError(`${path}/${f.path}: stored object does not match the manifest (sha256 ${sha256} != ${f.sha256})`);
  }
  await recordArtifact(deps.db, {
    runId: a.runId,
    path,
    uri: prefix,
    sizeBytes: manifest.files.reduce((n, f) => n + f.size_bytes, 0),
    sha256: sha256Text(manifestText),
    metadata: { step: manifest.step, files: manifest.files.length, kind },
  });
  deps.log.info('checkpoint recorded', { pipeline: a.pipelineId, step: manifest.step, kind });
  return true;
}

/** No new checkpoint within trainer.checkpoint_alert_after: a warning and a `checkpoint.stale` event. */
async function emitStaleCheckpointAlert(deps: ActivityDeps, a: { pipelineId: string; runId: string; organizationId: string }, sinceMs: number): Promise<void> {
  deps.log.warn('no checkpoint within the alert interval', { pipeline: a.pipelineId, after: deps.config.trainer.checkpoint_alert_after });
  await emitEvent(deps.db, a.organizationId, 'jobs', a.pipelineId, {
    event: 'checkpoint.stale',
    job_id: a.pipelineId,
    run_id: a.runId,
    seconds_since_last_checkpoint: Math.round(sinceMs / 1000),
  });
}

// train stage: the trainer runs as a job that survives worker restarts; the checkpoint watcher beside it
// records every complete checkpoint (manifest verified, copied to the object store) as a run artifact.
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Context, getClient, sleep } from '@temporalio/activity';
import type { ActivityDeps } from './deps.js';
import type { PipelineWorkflowInput } from '../contracts/pipeline.js';
import { CheckpointManifestSchema, HardwareSchema, RecoveryPolicySchema, TrainProgressSchema, TrainResultSchema, type TrainEvent, type TrainJobSpec, type TrainProgress, type TrainResult } from '../contracts/trainer-job.js';
import type { JobRecovery } from '../contracts/pipeline.js';
import { runJobToCompletion, trainerCommand, workdirFor, writeSpec } from './jobs.js';
import { readRecoveries, type TrainerFailure } from './recovery.js';
import { runDataOf, upsertTags } from '../db/repo/mlflow.js';
import { getRunById } from '../db/repo/tracking.js';
import { resolveBaseModel } from '../lib/base-models.js';
import { localPathFor } from '../lib/object-store.js';
import { artifactsOf, recordArtifact } from '../db/repo/tracking.js';
import { emitEvent } from '../db/repo/outbox.js';
import { durationMs } from '../lib/config.js';
import { sha256Text } from '../lib/hash.js';
import { trainingProgressSignal } from '../workflows/pipeline-messages.js';
import { pipelineWorkflowId } from '../contracts/pipeline.js';
import type { DatasetRef } from './datasets.js';

const PROGRESS_SIGNAL_EVERY_MS = 5000;

export interface TrainOutput extends Omit<TrainResult, 'adapter_path'> {
  adapter_path: string; // the pipeline only runs adapter methods
  workdir: string;
}

export function createTrainingActivities(deps: ActivityDeps) {
  async function datasetFile(pipelineId: string, uri: string): Promise<string> {
    return localPathFor(deps.store, uri, join(deps.home, 'work', pipelineId, 'data'));
  }

  async function readProgress(workdir: string): Promise<TrainProgress | null> {
    try {
      return TrainProgressSchema.parse(JSON.parse(await readFile(join(workdir, 'progress.json'), 'utf8')));
    } catch {
      return null; // not written yet, or being replaced this instant
    }
  }

  return {
    async trainModel(a: { pipelineId: string; runId: string; input: PipelineWorkflowInput; dataset: DatasetRef }): Promise<TrainOutput> {
      const workdir = workdirFor(deps, a.pipelineId, 'train');
      const spec: TrainJobSpec = {
        kind: 'train',
        job_name: `${a.pipelineId}-train`,
        run_id: a.runId,
        tracking_uri: deps.trackingUri,
        base_model_path: resolveBaseModel(a.input.base_model, deps.config, deps.bootstrap),
        train_path: await datasetFile(a.pipelineId, a.dataset.splits.train),
        validation_path: await datasetFile(a.pipelineId, a.dataset.splits.validation),
        output_dir: join(workdir, 'output'),
        checkpoint_dir: join(workdir, 'checkpoints'),
        method: a.input.method,
        hyperparameters: a.input.hyperparameters,
        ...(a.input.quantization ? { quantization: a.input.quantization } : {}),
        ...(a.input.adalora ? { adalora: a.input.adalora } : {}),
        ...(a.input.preference ? { preference: a.input.preference } : {}),
        data: a.input.data,
        checkpoint: a.input.checkpoint,
        // Parsed here too: a workflow started before these fields existed has neither in its input.
        recovery: RecoveryPolicySchema.parse(a.input.recovery ?? {}),
        hardware: HardwareSchema.parse({ ...a.input.hardware, price_per_device_hour_usd: a.input.hardware?.price_per_device_hour_usd ?? deps.config.trainer.gpu_hour_price_usd }),
        threads: deps.config.trainer.threads,
      };
      // A restart after out-of-memory or divergence rewrote spec.json with the adjusted hyperparameters: a
      // retried activity must keep them, not put the original ones back.
      if (!existsSync(join(workdir, 'spec.json')) || (await readRecoveries(workdir)).every((r) => !r.spec_after)) await writeSpec(workdir, spec);
      const organizationId = (await getRunById(deps.db, a.runId))?.organizationId;
      const recordedEvents = new Set<string>();
      const handle = getClient().workflow.getHandle(pipelineWorkflowId(a.pipelineId));
      let lastSignal = 0;
      let lastCheckpoint: string | null = null;
      const result = await runJobToCompletion(deps, {
        job: spec.job_name,
        request: trainerCommand(deps, 'train', workdir, spec.hardware.processes),
        resultPath: join(workdir, 'result.json'),
        resultSchema: TrainResultSchema,
        onPoll: async () => {
          const p = await readProgress(workdir);
          if (!p) return {};
          // Throttled: each signal is a history event; a new checkpoint is always reported.
          if (Date.now() - lastSignal > PROGRESS_SIGNAL_EVERY_MS || p.last_checkpoint !== lastCheckpoint) {
            lastSignal = Date.now();
            lastCheckpoint = p.last_checkpoint;
            const recoveries = (await readRecoveries(workdir)).map(({ failure_at: _f, spec_after: _s, ...r }) => r);
            await handle.signal(trainingProgressSignal, { step: p.step, max_steps: p.max_steps, last_checkpoint: p.last_checkpoint, metrics: p.metrics, recoveries }).catch(() => undefined);
          }
          await recordTrainerEvents(deps, a.runId, p.events, recordedEvents);
          return { step: p.step, last_checkpoint: p.last_checkpoint };
        },
        recovery: {
          policy: spec.recovery,
          onFault: async (recovery, restarting, failure) => {
            await recordRecovery(deps, { runId: a.runId, organizationId, pipelineId: a.pipelineId }, recovery, restarting, failure);
            const recoveries = (await readRecoveries(workdir)).map(({ failure_at: _f, spec_after: _s, ...r }) => r);
            const p = await readProgress(workdir);
            if (p) await handle.signal(trainingProgressSignal, { step: p.step, max_steps: p.max_steps, last_checkpoint: p.last_checkpoint, metrics: p.metrics, recoveries }).catch(() => undefined);
          },
        },
      });
      await recordTrainerEvents(deps, a.runId, result.events, recordedEvents);
      if (result.adapter_path === null) throw new Error(`${spec.method} training wrote no adapter (${workdir}/result.json)`);
      return { ...result, adapter_path: result.adapter_path, workdir };
    },

    /**
     * Records each new complete checkpoint. With once=false it runs until cancelled (training ended) and emits
     * a `checkpoint.stale` event when none appeared within trainer.checkpoint_alert_after.
     */
    async watchCheckpoints(a: { pipelineId: string; runId: string; organizationId: string; once: boolean }): Promise<{ checkpoints: { step: number; uri: string; sha256: string }[] }> {
      const dir = join(workdirFor(deps, a.pipelineId, 'train'), 'checkpoints');
      const recorded = new Set((await artifactsOf(deps.db, a.runId)).map((r) => r.path));
      const alertAfter = durationMs(deps.config.trainer.checkpoint_alert_after);
      let lastNew = Date.now();
      let alerted = false;
      for (;;) {
        const added = await recordNewCheckpoints(deps, a, dir, recorded);
        if (added > 0) {
          lastNew = Date.now();
          alerted = false;
        }
        if (a.once) break;
        if (!alerted && Date.now() - lastNew > alertAfter) {
          alerted = true;
          deps.log.warn('no checkpoint within the alert interval', { pipeline: a.pipelineId, after: deps.config.trainer.checkpoint_alert_after });
          await emitEvent(deps.db, a.organizationId, 'jobs', a.pipelineId, {
            event: 'checkpoint.stale',
            job_id: a.pipelineId,
            run_id: a.runId,
            seconds_since_last_checkpoint: Math.round((Date.now() - lastNew) / 1000),
          });
        }
        Context.current().heartbeat({ recorded: recorded.size });
        await sleep(2000);
      }
      const rows = (await artifactsOf(deps.db, a.runId)).filter((r) => r.path.startsWith('checkpoints/') && (r.metadata as { kind?: string }).kind !== 'best_checkpoint');
      return { checkpoints: rows.map((r) => ({ step: Number((r.metadata as { step: number }).step), uri: r.uri, sha256: r.sha256 })).sort((x, y) => x.step - y.step) };
    },
  };
}

/** Trainer events (a checkpoint skipped on resume, ...) become run tags `hanzo_ml.event.<epoch ms>.<kind>`. */
async function recordTrainerEvents(deps: ActivityDeps, runId: string, events: TrainEvent[], recorded: Set<string>): Promise<void> {
  const fresh = events.map((e) => ({ key: `hanzo_ml.event.${Date.parse(e.at)}.${e.kind}`, value: JSON.stringify(e) })).filter((t) => !recorded.has(t.key));
  if (fresh.length === 0) return;
  await upsertTags(deps.db, runId, fresh);
  for (const t of fresh) recorded.add(t.key);
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
  await upsertTags(deps.db, a.runId, [{ key: `hanzo_ml.recovery.${recovery.restart}`, value: JSON.stringify(detail) }]);
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
  dir: string,
  recorded: Set<string>,
): Promise<number> {
  if (!existsSync(dir)) return 0;
  let added = 0;
  const names = (await readdir(dir)).filter((n) => /^step-\d+$/.test(n)).sort();
  // best/ (the lowest validation loss so far) is recorded under the name of the checkpoint it copies.
  const bestOf = await readFile(join(dir, 'best', 'manifest.json'), 'utf8')
    .then((t) => (JSON.parse(t) as { copy_of?: unknown }).copy_of)
    .catch(() => undefined);
  const entries: { name: string; path: string; kind: 'checkpoint' | 'best_checkpoint' }[] = names.map((name) => ({ name, path: `checkpoints/${name}`, kind: 'checkpoint' }));
  if (typeof bestOf === 'string' && /^step-\d+$/.test(bestOf)) entries.push({ name: 'best', path: `checkpoints/best-${bestOf}`, kind: 'best_checkpoint' });
  for (const { name, path, kind } of entries) {
    if (recorded.has(path)) continue;
    const ok = await recordCheckpoint(deps, a, join(dir, name), path, kind).catch(async (err: unknown) => {
      if (err instanceof CorruptCheckpointError) {
        recorded.add(path); // the same bytes will not verify on the next poll either
        await reportCorruptCheckpoint(deps, a, name, err.message);
        return false;
      }
      // The trainer may prune an old checkpoint (keep_last) or replace best/ while it is being copied: skip it.
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

/** Once per checkpoint, across watcher attempts: the run tag is the record that it was reported. */
async function reportCorruptCheckpoint(deps: ActivityDeps, a: { pipelineId: string; runId: string; organizationId: string }, name: string, message: string): Promise<void> {
  deps.log.error('checkpoint does not match its manifest: not recorded', { checkpoint: name, error: message });
  const key = `hanzo_ml.event.checkpoint_corrupt.${name}`;
  const tags = (await runDataOf(deps.db, [a.runId])).tags.get(a.runId) ?? [];
  if (tags.some((t) => t.key === key)) return;
  const event = { kind: 'checkpoint_corrupt', checkpoint: name, message, at: new Date().toISOString() };
  await upsertTags(deps.db, a.runId, [{ key, value: JSON.stringify(event) }]);
  await emitEvent(deps.db, a.organizationId, 'jobs', a.pipelineId, { event: 'checkpoint.corrupt', job_id: a.pipelineId, run_id: a.runId, checkpoint: name, message });
}

/** Copies one checkpoint to the object store, checking every file against its manifest on the way. */
async function recordCheckpoint(
  deps: ActivityDeps,
  a: { pipelineId: string; runId: string; organizationId: string },
  ckptDir: string,
  path: string,
  kind: 'checkpoint' | 'best_checkpoint' = 'checkpoint',
): Promise<boolean> {
  const manifestText = await readFile(join(ckptDir, 'manifest.json'), 'utf8').catch(() => null);
  if (manifestText === null) return false; // a checkpoint without a manifest does not exist
  const manifest = CheckpointManifestSchema.parse(JSON.parse(manifestText));
  const prefix = `${a.organizationId}/${a.runId}/${path}`;
  const stored = await deps.store.putDirectory(deps.config.storage.buckets.checkpoints, prefix, ckptDir);
  for (const f of manifest.files) {
    const obj = stored.find((o) => o.uri.endsWith(`/${path}/${f.path}`));
    if (!obj || obj.sha256 !== f.sha256 || obj.size_bytes !== f.size_bytes)
      throw new CorruptCheckpointError(`${path}/${f.path}: stored copy does not match the manifest (sha256 ${obj?.sha256 ?? 'missing'} != ${f.sha256})`);
  }
  const uri = stored[0]!.uri.slice(0, stored[0]!.uri.indexOf(`/${path}/`) + path.length + 1);
  await recordArtifact(deps.db, {
    runId: a.runId,
    path,
    uri,
    sizeBytes: stored.reduce((n, o) => n + o.size_bytes, 0),
    sha256: sha256Text(manifestText),
    metadata: { step: manifest.step, files: manifest.files.length, kind },
  });
  deps.log.info('checkpoint recorded', { pipeline: a.pipelineId, step: manifest.step, kind });
  return true;
}

// train stage: the trainer runs as a job that survives worker restarts; the checkpoint watcher beside it
// records every complete checkpoint (manifest verified, copied to the object store) as a run artifact.
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Context, getClient, sleep } from '@temporalio/activity';
import type { ActivityDeps } from './deps.js';
import type { PipelineWorkflowInput } from '../contracts/pipeline.js';
import { CheckpointManifestSchema, TrainProgressSchema, TrainResultSchema, type TrainJobSpec, type TrainProgress, type TrainResult } from '../contracts/trainer-job.js';
import { runJobToCompletion, trainerCommand, workdirFor, writeSpec } from './jobs.js';
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

export interface TrainOutput extends TrainResult {
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
        checkpoint: a.input.checkpoint,
        threads: deps.config.trainer.threads,
      };
      await writeSpec(workdir, spec);
      const handle = getClient().workflow.getHandle(pipelineWorkflowId(a.pipelineId));
      let lastSignal = 0;
      let lastCheckpoint: string | null = null;
      const result = await runJobToCompletion(deps, {
        job: spec.job_name,
        request: trainerCommand(deps, 'train', workdir),
        resultPath: join(workdir, 'result.json'),
        resultSchema: TrainResultSchema,
        onPoll: async () => {
          const p = await readProgress(workdir);
          if (!p) return {};
          // Throttled: each signal is a history event; a new checkpoint is always reported.
          if (Date.now() - lastSignal > PROGRESS_SIGNAL_EVERY_MS || p.last_checkpoint !== lastCheckpoint) {
            lastSignal = Date.now();
            lastCheckpoint = p.last_checkpoint;
            await handle.signal(trainingProgressSignal, { step: p.step, max_steps: p.max_steps, last_checkpoint: p.last_checkpoint, metrics: p.metrics }).catch(() => undefined);
          }
          return { step: p.step, last_checkpoint: p.last_checkpoint };
        },
      });
      return { ...result, workdir };
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
      const rows = (await artifactsOf(deps.db, a.runId)).filter((r) => r.path.startsWith('checkpoints/'));
      return { checkpoints: rows.map((r) => ({ step: Number((r.metadata as { step: number }).step), uri: r.uri, sha256: r.sha256 })).sort((x, y) => x.step - y.step) };
    },
  };
}

async function recordNewCheckpoints(
  deps: ActivityDeps,
  a: { pipelineId: string; runId: string; organizationId: string },
  dir: string,
  recorded: Set<string>,
): Promise<number> {
  if (!existsSync(dir)) return 0;
  let added = 0;
  const names = (await readdir(dir)).filter((n) => /^step-\d+$/.test(n)).sort();
  for (const name of names) {
    const path = `checkpoints/${name}`;
    if (recorded.has(path)) continue;
    const ok = await recordCheckpoint(deps, a, join(dir, name), path).catch((err: unknown) => {
      // The trainer may prune an old checkpoint while it is being copied (keep_last): skip it.
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

/** Copies one checkpoint to the object store, checking every file against its manifest on the way. */
async function recordCheckpoint(deps: ActivityDeps, a: { pipelineId: string; runId: string; organizationId: string }, ckptDir: string, path: string): Promise<boolean> {
  const manifestText = await readFile(join(ckptDir, 'manifest.json'), 'utf8').catch(() => null);
  if (manifestText === null) return false; // a checkpoint without a manifest does not exist
  const manifest = CheckpointManifestSchema.parse(JSON.parse(manifestText));
  const prefix = `${a.organizationId}/${a.runId}/${path}`;
  const stored = await deps.store.putDirectory(deps.config.storage.buckets.checkpoints, prefix, ckptDir);
  for (const f of manifest.files) {
    const obj = stored.find((o) => o.uri.endsWith(`/${path}/${f.path}`));
    if (!obj || obj.sha256 !== f.sha256 || obj.size_bytes !== f.size_bytes)
      throw new Error(`${path}/${f.path}: stored copy does not match the manifest (sha256 ${obj?.sha256 ?? 'missing'} != ${f.sha256})`);
  }
  const uri = stored[0]!.uri.slice(0, stored[0]!.uri.indexOf(`/${path}/`) + path.length + 1);
  await recordArtifact(deps.db, {
    runId: a.runId,
    path,
    uri,
    sizeBytes: stored.reduce((n, o) => n + o.size_bytes, 0),
    sha256: sha256Text(manifestText),
    metadata: { step: manifest.step, files: manifest.files.length, kind: 'checkpoint' },
  });
  deps.log.info('checkpoint recorded', { pipeline: a.pipelineId, step: manifest.step });
  return true;
}

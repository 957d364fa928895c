// The cost of a training job before it starts: its exact steps and tokens (the trainer's own loader, example
// order and token count run on the job's data with the job's base model, `python -m hanzo_ml estimate-tokens`),
// device-hours from the measured throughput of earlier finished jobs of the same device type, method and base
// model (else trainer.tokens_per_gpu_second), and dollars from scheduler.gpu_prices_usd. Pipelines call it for a
// dry run and for the budget check; any job submission with a train spec can call it the same way.
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { extname, join } from 'node:path';
import { promisify } from 'node:util';
import { z } from 'zod';
import type { CostEstimate } from '../contracts/cost.js';
import type { SplitRatios } from '../contracts/datasets.js';
import { CheckpointPolicySchema, RecoveryPolicySchema, type TrainJobSpec } from '../contracts/trainer-job.js';
import { measuredThroughput } from '../db/repo/usage.js';
import { repoRoot, trainerPython, type Bootstrap } from '../lib/config.js';
import { preprocessDataset } from './ingest/preprocess.js';
import { localPathFor, type ObjectStore } from '../lib/object-store.js';
import type { Config } from '../contracts/config.js';
import type { Db } from '../db/client.js';
import { accountedGpuType, devicePriceUsd } from '../lib/prices.js';

const execFileAsync = promisify(execFile);

/** The training half of a train spec: what decides its tokens, steps and price. */
export type TrainingPlan = Pick<TrainJobSpec, 'method' | 'hyperparameters' | 'quantization' | 'adalora' | 'preference' | 'data' | 'hardware'>;

/** The data it trains on: a dataset version's split files, or a source file the job will preprocess first. */
export type EstimateData =
  | { splits: { train: string; validation: string } }
  | { source: { path: string; format?: 'jsonl' | 'csv'; seed: number; splits: SplitRatios } };

/** What an estimate reads: the catalogue (measured throughput), the store (the dataset's splits), the base models. */
export interface DatasetDeps {
  db: Db;
  store: ObjectStore;
  config: Config;
  home: string;
  bootstrap: Bootstrap;
}

export interface EstimateRequest {
  /** the base model's name (the throughput key) and its local directory (the tokenizer) */
  baseModel: { name: string; dir: string };
  plan: TrainingPlan;
  data: EstimateData;
}

const TokenEstimateSchema = z.object({ tokens: z.number().int().nonnegative(), steps: z.number().int().positive(), train_items: z.number().int().nonnegative(), epochs: z.number().nonnegative() });

export class EstimateError extends Error {}

export async function estimateTrainingCost(deps: DatasetDeps, req: EstimateRequest): Promise<CostEstimate> {
  const counted = await countTrainingTokens(deps, req);
  const gpuType = accountedGpuType(req.plan.hardware);
  const measured = await measuredThroughput(deps.db, { gpuType, method: req.plan.method, baseModel: req.baseModel.name });
  const tps = measured?.tokens_per_device_second ?? deps.config.trainer.tokens_per_gpu_second;
  const startup = measured?.startup_device_seconds ?? 0;
  const price = req.plan.hardware.price_per_device_hour_usd ?? devicePriceUsd(deps.config, req.plan.hardware);
  const gpuHours = (startup + counted.tokens / tps) / 3600;
  return {
    ...counted,
    gpu_type: gpuType,
    gpu_hours: gpuHours,
    usd: gpuHours * price,
    price_per_gpu_hour_usd: price,
    tokens_per_gpu_second: tps,
    startup_gpu_seconds: startup,
    basis: measured ? 'measured' : 'config',
    samples: measured?.samples ?? 0,
  };
}

/** Steps and tokens as the trainer will count them, run in a scratch directory that is removed afterwards. */
async function countTrainingTokens(deps: DatasetDeps, req: EstimateRequest): Promise<z.infer<typeof TokenEstimateSchema>> {
  const staging = join(deps.home, 'tmp', `estimate-${randomUUID()}`);
  await mkdir(staging, { recursive: true });
  try {
    const files = await localSplits(deps, req.data, staging);
    const spec: TrainJobSpec = {
      kind: 'train',
      job_name: 'estimate',
      run_id: 'estimate',
      tracking_uri: null,
      base_model_path: req.baseModel.dir,
      train_path: files.train,
      validation_path: files.validation,
      output_dir: join(staging, 'output'),
      checkpoint_dir: join(staging, 'checkpoints'),
      ...req.plan,
      checkpoint: CheckpointPolicySchema.parse({ every_steps: req.plan.hyperparameters.max_steps, keep_last: 1 }),
      recovery: RecoveryPolicySchema.parse({}),
      threads: deps.config.trainer.threads,
    };
    const specPath = join(staging, 'train-job.json');
    const output = join(staging, 'estimate.json');
    await writeFile(specPath, JSON.stringify(spec));
    try {
      await execFileAsync(trainerPython(deps), ['-m', 'hanzo_ml', 'estimate-tokens', '--spec', specPath, '--output', output], {
        // Not this process's environment: the tokenizer needs none of the API's secrets.
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? staging, PYTHONPATH: join(repoRoot, 'trainer'), HF_HUB_OFFLINE: '1', TRANSFORMERS_OFFLINE: '1' },
        maxBuffer: 4 << 20,
      });
    } catch (err) {
      const e = err as { stderr?: string; message: string };
      throw new EstimateError(`estimate: ${(e.stderr ?? e.message).trim().split('\n').slice(-2).join(' ').replaceAll(specPath, 'the train spec')}`);
    }
    return TokenEstimateSchema.parse(JSON.parse(await readFile(output, 'utf8')));
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}

/** Local train and validation files: a version's splits fetched, or a source file split as the pipeline will split it. */
async function localSplits(deps: DatasetDeps, data: EstimateData, staging: string): Promise<{ train: string; validation: string }> {
  if ('splits' in data) {
    const cache = join(staging, 'splits');
    return { train: await localPathFor(deps.store, data.splits.train, cache), validation: await localPathFor(deps.store, data.splits.validation, cache) };
  }
  const outDir = join(staging, 'prepared');
  const source = await localPathFor(deps.store, data.source.path, join(staging, 'source'));
  const format = data.source.format ?? (extname(source).toLowerCase() === '.csv' ? 'csv' : 'jsonl');
  const result = await preprocessDataset({ sourcePath: source, displayName: 'estimate', format, outDir, seed: data.source.seed, splits: data.source.splits });
  return { train: join(outDir, result.splits.train.path), validation: join(outDir, result.splits.validation.path) };
}

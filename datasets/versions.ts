// Creating an immutable dataset version: validate + normalise + dedup + split (datasets/ingest), count tokens with
// the base model's tokenizer (Python, tokenizers only), estimate cost, store the split files in the object
// store, then record the version and its event in one transaction. Used by POST /v1/files (POST /v1/datasets
// and the pipeline's preprocess stage prepare by a prepare-dataset job: activities/datasets.ts).
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import type { Config } from '../contracts/config.js';
import type { SplitRatios } from '../contracts/datasets.js';
import { TokenCountReportSchema, type TokenCountReport } from '../contracts/trainer-job.js';
import type { Db } from '../db/client.js';
import { insertDatasetVersion, type DatasetRow } from '../db/repo/datasets.js';
import { getDataset } from '../db/repo/datasets.js';
import { preprocessDataset } from './ingest/preprocess.js';
import { recordOrDeleteFiles, versionPrefix } from './derive.js';
import type { ObjectStore } from '../lib/object-store.js';
import { repoRoot, trainerPython, type Bootstrap } from '../lib/config.js';

const execFileAsync = promisify(execFile);

export interface CreateDatasetVersion {
  organizationId: string;
  createdBy: string;
  name: string;
  format: 'jsonl' | 'csv';
  sourcePath: string;
  displayName: string;
  seed: number;
  splits: SplitRatios;
  tokenizerDir: string;
  /** the base model the tokenizer is of: a derived version counts with it unless told otherwise */
  tokenizer?: string;
  tags: string[];
  transform: string;
  parentDatasets?: string[];
  /** Deterministic ID for idempotent retries (the pipeline derives it from its workflow ID). */
  id?: string;
  /** writes the audit row of an API upload in the transaction that records the version */
  audited?: (tx: Db, row: DatasetRow) => Promise<void>;
}

export interface DatasetDeps {
  db: Db;
  store: ObjectStore;
  config: Config;
  home: string;
  bootstrap: Bootstrap;
}

export async function createDatasetVersion(deps: DatasetDeps, req: CreateDatasetVersion): Promise<DatasetRow> {
  const id = req.id ?? randomUUID();
  if (req.id) {
    const existing = await getDataset(deps.db, req.organizationId, req.id);
    if (existing) return existing;
  }
  const staging = join(deps.home, 'tmp', `dataset-${id}`);
  await rm(staging, { recursive: true, force: true });
  await mkdir(staging, { recursive: true });
  try {
    const outDir = join(staging, 'splits');
    const result = await preprocessDataset({
      sourcePath: req.sourcePath,
      displayName: req.displayName,
      format: req.format,
      outDir,
      seed: req.seed,
      splits: req.splits,
    });
    const tokens = await countTokens(deps, req.tokenizerDir, outDir, staging);
    const prefix = versionPrefix({ ...req, id });
    const bucket = deps.config.storage.buckets.datasets;
    const stored = await deps.store.putDirectory(bucket, prefix, outDir);
    const uriOf = (file: string): string => stored.find((o) => o.uri.endsWith(`/${file}`))!.uri;
    const split = (name: 'train' | 'validation' | 'test') => ({
      ...result.splits[name],
      path: uriOf(result.splits[name].path),
      tokens: tokens.splits[name]?.tokens ?? null,
    });
    const trainTokens = tokens.splits.train?.tokens ?? 0;
    const gpuHours = trainTokens / deps.config.trainer.tokens_per_gpu_second / 3600;
    // Per epoch, before a method, a base model or hardware is chosen: the default price (a pipeline's dry run prices its own).
    const price = deps.config.scheduler.default_price_usd;
    const record = {
      id,
      organizationId: req.organizationId,
      name: req.name,
      format: req.format,
      storagePath: stored[0]!.uri.slice(0, stored[0]!.uri.lastIndexOf('/') + 1),
      sizeBytes: result.splits.train.size_bytes + result.splits.validation.size_bytes + result.splits.test.size_bytes,
      numRecords: result.num_records,
      sha256: result.sha256,
      schema: result.schema,
      splits: { train: split('train'), validation: split('validation'), test: split('test') },
      metadata: {
        source: { name: req.displayName, ...result.source },
        duplicates_removed: result.duplicates_removed,
        seed: req.seed,
        split_ratios: req.splits,
        ...(req.tokenizer ? { tokenizer: req.tokenizer } : {}),
        tokenizer_sha256: tokens.tokenizer_sha256,
        token_counts: Object.fromEntries(Object.entries(tokens.splits).map(([k, v]) => [k, v.tokens])),
        cost_estimate: {
          train_tokens_per_epoch: trainTokens,
          gpu_hours_per_epoch: Number(gpuHours.toFixed(6)),
          usd_per_epoch: Number((gpuHours * price).toFixed(4)),
          assumptions: `${deps.config.trainer.tokens_per_gpu_second} tokens/GPU-second at $${price}/GPU-hour`,
        },
      },
      tags: req.tags,
      lineage: { parent_datasets: req.parentDatasets ?? [], transform: req.transform },
      createdBy: req.createdBy,
    };
    return await recordOrDeleteFiles(deps, bucket, prefix, () => insertDatasetVersion(deps.db, record, req.audited));
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}

async function countTokens(deps: DatasetDeps, tokenizerDir: string, splitsDir: string, staging: string): Promise<TokenCountReport> {
  const specPath = join(staging, 'count-tokens.json');
  const output = join(staging, 'token-counts.json');
  const inputs = Object.fromEntries(['train', 'validation', 'test'].map((s) => [s, join(splitsDir, `${s}.jsonl`)]));
  await writeFile(specPath, JSON.stringify({ kind: 'count-tokens', job_name: `count-tokens-${basename(staging)}`, tokenizer_path: tokenizerDir, inputs, output_path: output }));
  try {
    await execFileAsync(trainerPython(deps), ['-m', 'hanzo_ml', 'count-tokens', '--spec', specPath], {
      // Not this process's environment: the tokenizer needs none of the API's secrets.
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? staging, PYTHONPATH: join(repoRoot, 'trainer'), HF_HUB_OFFLINE: '1', TRANSFORMERS_OFFLINE: '1' },
      maxBuffer: 4 << 20,
    });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`token counting failed: ${(e.stderr ?? e.message).trim().split('\n').slice(-3).join(' ')}`);
  }
  return TokenCountReportSchema.parse(JSON.parse(await readFile(output, 'utf8')));
}

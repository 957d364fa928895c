// POST /v1/datasets: upload a file (streamed to disk, never buffered whole) and get back an immutable version.
// JSONL and CSV are checked, normalised and split in the request (datasets/ingest); Parquet, Arrow, plain text
// and compressed files (.gz, .zst) are read by the trainer's prepare-dataset with no operations, the same command
// and version recording a derive uses (datasets/derive.ts), and bad input answers 400 with its issues.
import { createWriteStream } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { randomUUID } from 'node:crypto';
import type { Context, Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../../deps.js';
import { DatasetCreateQuerySchema, SplitRatiosSchema, type SplitRatios, type UploadFormat } from '../../../contracts/datasets.js';
import type { PrepareDatasetJobSpec } from '../../../contracts/data-prep.js';
import { createDatasetVersion } from '../../../datasets/versions.js';
import { PrepareIssuesError, runPrepareDataset, storePreparedVersion } from '../../../datasets/derive.js';
import { DatasetValidationError } from '../../../datasets/ingest/preprocess.js';
import { datasetView, type DatasetRow } from '../../../db/repo/datasets.js';
import type { Db } from '../../../db/client.js';
import { BaseModelError, DEFAULT_BASE_MODEL, resolveBaseModel } from '../../../lib/base-models.js';
import { ApiError, invalid } from '../../errors.js';
import { queryParams } from '../../validate.js';
import { requireRole } from '../../auth.js';
import { auditRow } from '../../audit.js';
import { checkBaseModel } from '../../input-policy.js';

const EXTENSION: Record<UploadFormat, string> = { jsonl: 'jsonl', csv: 'csv', parquet: 'parquet', arrow: 'arrow', text: 'txt' };
const COMPRESSED = { gzip: '.gz', zstd: '.zst' } as const;

/** The body's compression: the query's, else the file name's (.gz, .zst), else none. */
function compressionOf(query: 'none' | 'gzip' | 'zstd' | undefined, filename: string | undefined): 'none' | 'gzip' | 'zstd' {
  if (query) return query;
  if (filename && /\.gz$/i.test(filename)) return 'gzip';
  if (filename && /\.zst$/i.test(filename)) return 'zstd';
  return 'none';
}

export function uploadRoute(app: Hono<AppEnv>, deps: ApiDeps): void {
  app.post('/', async (c) => {
    const principal = requireRole(c, 'developer');
    const q = queryParams(c, DatasetCreateQuerySchema);
    const splits = SplitRatiosSchema.safeParse({ train: q.train, validation: q.validation, test: q.test });
    if (!splits.success) throw invalid(`query parameters train, validation, test: ${splits.error.issues[0]!.message}`);
    if (q.tokenizer !== undefined) checkBaseModel(deps.config, principal, 'tokenizer', q.tokenizer);
    const tokenizer = q.tokenizer ?? DEFAULT_BASE_MODEL;
    let tokenizerDir: string;
    try {
      tokenizerDir = resolveBaseModel(tokenizer, deps.config, deps.bootstrap);
    } catch (err) {
      if (err instanceof BaseModelError) throw invalid(`tokenizer: ${err.message}`);
      throw err;
    }
    const body = c.req.raw.body;
    if (!body) throw invalid('request body is empty: send the dataset file as the body');
    const filename = c.req.header('x-filename');
    const compression = compressionOf(q.compression, filename);
    const uploadDir = join(deps.home, 'tmp', 'uploads');
    await mkdir(uploadDir, { recursive: true });
    // The name tells prepare-dataset the format and the compression (it detects both from it).
    const upload = join(uploadDir, `${randomUUID()}.${EXTENSION[q.format]}${compression === 'none' ? '' : COMPRESSED[compression]}`);
    const tags = q.tags ? q.tags.split(',').map((t) => t.trim()).filter(Boolean) : [];
    const displayName = filename ?? `${q.name}.${EXTENSION[q.format]}`;
    // The audit row commits with the version's row, after the slow part (preprocessing, token counts, upload).
    const audited = (tx: Db, row: DatasetRow) => auditRow(c, 'dataset.create', row.id)(tx, { name: row.name, version: row.version, sha256: row.sha256 });
    try {
      await pipeline(Readable.fromWeb(body as import('node:stream/web').ReadableStream), createWriteStream(upload));
      const viaTrainer = compression !== 'none' || (q.format !== 'jsonl' && q.format !== 'csv');
      const row = viaTrainer
        ? await prepareUpload(c, deps, { name: q.name, format: q.format, upload, displayName, seed: q.seed, splits: splits.data, tokenizer, tokenizerDir, tags, audited })
        : await createDatasetVersion(deps, {
            organizationId: principal.organizationId,
            createdBy: principal.subject,
            name: q.name,
            format: q.format as 'jsonl' | 'csv',
            sourcePath: upload,
            displayName,
            seed: q.seed,
            splits: splits.data,
            tokenizer,
            tokenizerDir,
            tags,
            transform: `upload: validate, normalise to chat messages, dedup exact, split seed=${q.seed}`,
            audited,
          });
      return c.json(datasetView(row), 201);
    } catch (err) {
      if (err instanceof DatasetValidationError) throw new ApiError('INVALID_PARAMETER_VALUE', err.message);
      if (err instanceof PrepareIssuesError) throw new ApiError('INVALID_PARAMETER_VALUE', err.message);
      throw err;
    } finally {
      await rm(upload, { force: true });
    }
  });
}

interface PrepareUpload {
  name: string;
  format: UploadFormat;
  upload: string;
  displayName: string;
  seed: number;
  splits: SplitRatios;
  tokenizer: string;
  tokenizerDir: string;
  tags: string[];
  audited: (tx: Db, row: DatasetRow) => Promise<void>;
}

/** An upload the trainer reads: prepare-dataset with no operations and the requested split, in the request. */
async function prepareUpload(c: Context<AppEnv>, deps: ApiDeps, u: PrepareUpload): Promise<DatasetRow> {
  const principal = c.get('principal');
  const id = randomUUID();
  const staging = join(deps.home, 'tmp', `dataset-${id}`);
  await mkdir(join(staging, 'work'), { recursive: true });
  const outputDir = join(staging, 'out');
  try {
    const spec: PrepareDatasetJobSpec = {
      kind: 'prepare-dataset',
      job_name: `upload-${id}`,
      sources: [{ path: u.upload, format: u.format, display_name: u.displayName, text_unit: 'line', text_field: 'text' }],
      split_of: {},
      parents: [],
      operations: [],
      split: { seed: u.seed, ...u.splits },
      tokenizer_path: u.tokenizerDir,
      output_dir: outputDir,
      report_path: join(staging, 'report.json'),
      issues_path: join(staging, 'issues.json'),
      work_dir: join(staging, 'work'),
      memory_budget_mb: 1024,
      max_errors: 20,
      threads: deps.config.trainer.threads,
    };
    const report = await runPrepareDataset(deps, spec, join(staging, 'spec.json'));
    return await storePreparedVersion(
      deps,
      {
        id,
        organizationId: principal.organizationId,
        createdBy: principal.subject,
        name: u.name,
        format: u.format,
        tags: u.tags,
        transform: `upload (${u.format}): prepare-dataset, normalise to chat messages, split seed=${u.seed}`,
        parentDatasets: [],
        report,
        tokenizer: u.tokenizer,
        extraMetadata: { source: { name: u.displayName, format: u.format }, seed: u.seed, split_ratios: u.splits },
        audited: u.audited,
      },
      (bucket, prefix) => deps.store.putDirectory(bucket, prefix, outputDir),
    );
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}

// POST /v1/datasets: upload a file (streamed to the object store as it arrives, never buffered whole) and get back an immutable version.
// The request runs the structural checks that can run on the bytes (every JSONL / CSV line through the request's
// validators, a gzip- or zstd-compressed one's as it is decompressed; the magic bytes of Parquet and Arrow), stores
// the raw file and records the version preparing with its job: counting, exact dedup and splitting run as a
// prepare-dataset job (datasetPreparationWorkflow, the path a derive takes), which makes the version ready or
// failed with its issues.
// wait=false (the default): 201 at once with the version preparing and its job_id.
// wait=true (what older clients read counts from): the same job, waited on for at most wait_seconds: 201 with the
// ready version, 400 with the job's issues, or 202 with the version still preparing (its job goes on).
// Bad input answers 400 with `issues`: file, line or record, field, what was expected.
import { PassThrough, Readable } from 'node:stream';
import { randomUUID } from 'node:crypto';
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { tee } from '../../../lib/tee.js';
import type { StoredObject } from '../../../lib/object-store.js';
import type { Context, Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../../deps.js';
import { DatasetCreateQuerySchema, SplitRatiosSchema, expectedOf, type DatasetIssue, type SplitRatios, type UploadFormat } from '../../../contracts/datasets.js';
import { datasetPreparationWorkflowId } from '../../../contracts/data-prep.js';
import { PIPELINE_TASK_QUEUE } from '../../../contracts/pipeline.js';
import { FailureType } from '../../../contracts/failures.js';
import { PrepareIssuesError, preparationJob, rawPreparationInput, versionPrefix } from '../../../datasets/derive.js';
import { DatasetValidationError, validateDataset } from '../../../datasets/ingest/preprocess.js';
import { datasetView, getDatasetAnyStatus, insertDatasetVersion, type DatasetRow } from '../../../db/repo/datasets.js';
import { recordChildJob } from '../../../db/repo/child-jobs.js';
import type { datasetPreparationWorkflow } from '../../../workflows/dataset-prep.js';
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
    try {
      // Refused here rather than by the job: the job fetches the same base model's tokenizer.
      resolveBaseModel(tokenizer, deps.config, deps.bootstrap);
    } catch (err) {
      if (err instanceof BaseModelError) throw invalid(`tokenizer: ${err.message}`);
      throw err;
    }
    const body = c.req.raw.body;
    if (!body) throw invalid('request body is empty: send the dataset file as the body');
    const filename = c.req.header('x-filename');
    const compression = compressionOf(q.compression, filename);
    // The name tells prepare-dataset the format and the compression (it detects both from it).
    const suffix = `.${EXTENSION[q.format]}${compression === 'none' ? '' : COMPRESSED[compression]}`;
    const tags = q.tags ? q.tags.split(',').map((t) => t.trim()).filter(Boolean) : [];
    const displayName = filename ?? `${q.name}.${EXTENSION[q.format]}`;
    // The audit row commits with the version's row.
    const audited = (tx: Db, row: DatasetRow) => auditRow(c, 'dataset.create', row.id)(tx, { name: row.name, version: row.version, sha256: row.sha256 });
    let row: DatasetRow;
    try {
      const source = Readable.fromWeb(body as import('node:stream/web').ReadableStream);
      row = await acceptUpload(c, deps, { name: q.name, format: q.format, compression, source, suffix, displayName, seed: q.seed, splits: splits.data, tokenizer, tags, audited });
    } catch (err) {
      if (err instanceof DatasetValidationError) return issuesResponse(c, err.message, err.issues.map((i) => ({ file: i.file, line: i.line, field: i.field, expected: expectedOf(i.message), message: i.message })));
      throw err;
    }
    if (q.wait === 'false') return c.json(datasetView(row), 201);
    return awaitPreparation(c, deps, row, q.wait_seconds * 1000);
  });
}

/**
 * wait=true: the version's preparation job waited on, for at most `timeoutMs` (or until the client goes): 201 with
 * the ready version; 400 with the issues when the job refused the data; 202 with the version still preparing when
 * the wait ran out (the job goes on: GET /v1/datasets/{id} or /v1/jobs/{job_id} follows it).
 */
async function awaitPreparation(c: Context<AppEnv>, deps: ApiDeps, row: DatasetRow, timeoutMs: number): Promise<Response> {
  try {
    const { row: now, done } = await waitForPreparation(c, deps, row, timeoutMs);
    return c.json(datasetView(now), done ? 201 : 202);
  } catch (err) {
    if (err instanceof UploadRefusedError) return issuesResponse(c, err.message, err.issues);
    throw err;
  }
}

/** The preparation job refused the data: its issues, one per file, line or record and field. */
export class UploadRefusedError extends Error {
  constructor(
    message: string,
    readonly issues: DatasetIssue[],
  ) {
    super(message);
  }
}

/**
 * The version's preparation job waited on for at most `timeoutMs` (or until the client goes): the version as it
 * then stands and whether the job ended. Throws UploadRefusedError when the job refused the data; an ApiError
 * (409 when it was cancelled, else 500 saying why) when it failed otherwise.
 */
export async function waitForPreparation(c: Context<AppEnv>, deps: ApiDeps, row: DatasetRow, timeoutMs: number): Promise<{ row: DatasetRow; done: boolean }> {
  const handle = deps.temporal.workflow.getHandle<typeof datasetPreparationWorkflow>(datasetPreparationWorkflowId(row.id));
  // Stops the long poll too (no call left waiting on a job nobody waits for).
  const stop = new AbortController();
  const timer = setTimeout(() => stop.abort(), timeoutMs);
  const gone = () => stop.abort();
  c.req.raw.signal.addEventListener('abort', gone, { once: true });
  let done = false;
  try {
    await deps.temporal.withAbortSignal(stop.signal, () => handle.result());
    done = true;
  } catch (err) {
    if (!stop.signal.aborted) await preparationFailed(deps, row, err);
  } finally {
    clearTimeout(timer);
    c.req.raw.signal.removeEventListener('abort', gone);
  }
  return { row: (await getDatasetAnyStatus(deps.db, row.organizationId, row.id)) ?? row, done };
}

/** The preparation job failed: UploadRefusedError with the issues it found in the data, else an ApiError saying why. */
async function preparationFailed(deps: ApiDeps, row: DatasetRow, err: unknown): Promise<never> {
  if (!(err instanceof WorkflowFailedError)) throw err;
  const failed = await getDatasetAnyStatus(deps.db, row.organizationId, row.id);
  const cause = err.cause instanceof ApplicationFailure ? err.cause : err.cause?.cause instanceof ApplicationFailure ? err.cause.cause : null;
  const issues = (failed?.issues ?? []) as DatasetIssue[];
  if (cause?.type === FailureType.BadInput && issues.length) {
    const refused = new PrepareIssuesError(issues.map((i) => ({ file: i.file, record: i.record ?? i.line ?? null, field: i.field, message: i.message })));
    throw new UploadRefusedError(refused.message, issues);
  }
  const what = `the preparation job ${row.jobId} of version ${row.version} of "${row.name}"`;
  if (err.cause instanceof CancelledFailure || err.cause?.cause instanceof CancelledFailure) throw new ApiError('INVALID_STATE', `${what} was cancelled`);
  throw new ApiError('INTERNAL_ERROR', `${what} failed: ${cause?.message ?? err.message}`);
}

/** 400 in the API's error shape, with each issue as data a client can show one per line. */
function issuesResponse(c: Context<AppEnv>, message: string, issues: DatasetIssue[]): Response {
  return c.json({ error_code: 'INVALID_PARAMETER_VALUE', message, request_id: c.get('requestId') as string, issues }, 400);
}


/** What a file of each kind starts with; text and csv have none. */
const MAGIC: Record<string, { bytes: Buffer[]; expected: string }> = {
  gzip: { bytes: [Buffer.from([0x1f, 0x8b])], expected: 'gzip data (starting 1f 8b)' },
  zstd: { bytes: [Buffer.from([0x28, 0xb5, 0x2f, 0xfd])], expected: 'zstd data (starting 28 b5 2f fd)' },
  parquet: { bytes: [Buffer.from('PAR1')], expected: 'a Parquet file (starting PAR1)' },
  // An Arrow IPC file (and Feather v2) starts ARROW1; an IPC stream with the continuation marker, or (pre-0.15) a message length.
  arrow: { bytes: [Buffer.from('ARROW1'), Buffer.from([0xff, 0xff, 0xff, 0xff])], expected: 'an Arrow IPC file (starting ARROW1) or stream' },
};

/**
 * The cheap check of a file the request does not read line by line: its first bytes say what it is. The rest of the
 * stream is read past (the store reads the same bytes at the same pace).
 */
async function checkMagic(source: Readable, kind: string, displayName: string): Promise<void> {
  const magic = MAGIC[kind];
  let head = Buffer.alloc(0);
  const check = () => {
    if (!magic || magic.bytes.some((b) => head.subarray(0, b.length).equals(b))) return;
    throw new DatasetValidationError([{ file: displayName, line: 0, field: null, message: `expected ${magic.expected}, found bytes ${head.subarray(0, 4).toString('hex')}` }]);
  };
  let checked = false;
  for await (const chunk of source) {
    if (checked) continue;
    head = Buffer.concat([head, chunk as Buffer]).subarray(0, 8);
    if (head.length < 8) continue;
    check();
    checked = true;
  }
  if (!checked) check();
}

export interface AcceptUpload {
  name: string;
  format: UploadFormat;
  compression: 'none' | 'gzip' | 'zstd';
  /** the file's bytes, read once as they arrive */
  source: Readable;
  /** the bytes' SHA-256 as measured when they were received into a temporary file: what is stored must match it */
  sha256?: string;
  suffix: string;
  displayName: string;
  seed: number;
  splits: SplitRatios;
  tokenizer: string;
  tags: string[];
  audited: (tx: Db, row: DatasetRow) => Promise<void>;
}

/** A version's raw file, stored and structurally checked: its id and prefix are the version's. */
interface ReceivedUpload {
  id: string;
  prefix: string;
  raw: StoredObject;
  records: number;
}

/**
 * The file stored and checked in one pass, then the version recorded (preparing) with its job. Should the checks or
 * the store fail, or the client go away, nothing is left: no object, no row.
 */
export async function acceptUpload(c: Context<AppEnv>, deps: ApiDeps, u: AcceptUpload): Promise<DatasetRow> {
  return recordUpload(c, deps, u, await receiveUpload(c, deps, u));
}

/**
 * The request's bytes go once through a tee: into the object store under the version's raw key, and through the
 * structural checks (every JSONL / CSV line, decompressed on the way; the magic bytes otherwise), the slower of the
 * two setting the pace. The first failure aborts the other side; the raw object is then removed.
 */
async function receiveUpload(c: Context<AppEnv>, deps: ApiDeps, u: AcceptUpload): Promise<ReceivedUpload> {
  const id = randomUUID();
  const prefix = versionPrefix({ organizationId: c.get('principal').organizationId, name: u.name, id });
  const bucket = deps.config.storage.buckets.datasets;
  const stop = new AbortController();
  const gone = () => stop.abort(new ApiError('INVALID_PARAMETER_VALUE', 'request body: the client went away before the upload ended'));
  c.req.raw.signal.addEventListener('abort', gone, { once: true });
  const [toStore, toCheck] = [new PassThrough(), new PassThrough()];
  // The first failure is the one that says why: the others are the abort it caused.
  let first: { side: 'body' | 'store' | 'check'; err: unknown } | null = null;
  const failFast = <T>(side: 'body' | 'store' | 'check', p: Promise<T>): Promise<T> =>
    p.catch((err: unknown) => {
      first ??= { side, err };
      stop.abort(err);
      throw err;
    });
  const lineChecked = u.format === 'jsonl' || u.format === 'csv';
  const check = failFast(
    'check',
    lineChecked
      ? validateDataset({ source: toCheck, displayName: u.displayName, format: u.format as 'jsonl' | 'csv', compression: u.compression }).then((r) => r.records)
      : checkMagic(toCheck, u.compression === 'none' ? u.format : u.compression, u.displayName).then(() => 0),
  );
  // The store sees the end of the bytes only once the checks passed: a refused file never becomes a whole object.
  const [, stored, checked] = await Promise.allSettled([
    failFast('body', tee(u.source, [toStore, toCheck], stop.signal, { sink: toStore, until: check })),
    failFast('store', deps.store.putStream(bucket, `${prefix}/raw/source${u.suffix}`, toStore, { signal: stop.signal, maxBytes: deps.config.limits.max_upload_bytes })),
    check,
  ]).finally(() => c.req.raw.signal.removeEventListener('abort', gone));
  if (!first && stored.status === 'fulfilled' && checked.status === 'fulfilled') {
    if (u.sha256 === undefined || stored.value.sha256 === u.sha256) return { id, prefix, raw: stored.value, records: checked.value };
    first = { side: 'store', err: new Error(`the stored upload's sha256 ${stored.value.sha256} is not the ${u.sha256} of the bytes received: its temporary file changed`) };
  }
  await deps.store.deletePrefix(bucket, prefix).catch(() => undefined);
  throw whyRefused(first!);
}

/** The first failure as the answer's error: a request body that broke off (the client gone) is the request's fault. */
function whyRefused(first: { side: 'body' | 'store' | 'check'; err: unknown }): unknown {
  if (first.side !== 'body' || first.err instanceof ApiError || first.err instanceof DatasetValidationError) return first.err;
  return new ApiError('INVALID_PARAMETER_VALUE', `request body: the upload broke off before its end (${(first.err as Error).message})`);
}

/**
 * In one transaction the version (preparing), its queued job and the started workflow: should any of them fail, none
 * is there and the raw file is removed. The job makes the version ready (or failed) by updating this row.
 */
async function recordUpload(c: Context<AppEnv>, deps: ApiDeps, u: AcceptUpload, received: ReceivedUpload): Promise<DatasetRow> {
  const principal = c.get('principal');
  const { id, prefix, raw } = received;
  const bucket = deps.config.storage.buckets.datasets;
  const input = rawPreparationInput({
    id,
    organizationId: principal.organizationId,
    requestedBy: principal.subject,
    name: u.name,
    tokenizer: u.tokenizer,
    split: { seed: u.seed, ...u.splits },
    tags: u.tags,
    upload: { raw_uri: raw.uri, format: u.format, display_name: u.displayName },
  });
  const row = {
    id,
    organizationId: principal.organizationId,
    name: u.name,
    format: u.format,
    storagePath: `${raw.uri.slice(0, raw.uri.indexOf(`/${prefix}/`))}/${prefix}/`,
    sizeBytes: raw.size_bytes,
    numRecords: received.records,
    sha256: raw.sha256,
    schema: {},
    splits: null,
    metadata: { source: { name: u.displayName, format: u.format, compression: u.compression, sha256: raw.sha256, size_bytes: raw.size_bytes }, seed: u.seed, split_ratios: u.splits, tokenizer: u.tokenizer, job_id: input.job_id },
    tags: u.tags,
    lineage: { parent_datasets: [], transform: `upload (${u.format}): prepare-dataset, normalise to chat messages, dedup exact, split seed=${u.seed}` },
    status: 'preparing' as const,
    jobId: input.job_id,
    createdBy: principal.subject,
  };
  try {
    return await deps.db.transaction(async (tx) => {
      const inserted = await insertDatasetVersion(tx as unknown as Db, row, u.audited);
      await recordChildJob(tx as unknown as Db, preparationJob(input), 'queued');
      await deps.temporal.workflow.start<typeof datasetPreparationWorkflow>('datasetPreparationWorkflow', {
        taskQueue: PIPELINE_TASK_QUEUE,
        workflowId: datasetPreparationWorkflowId(id),
        args: [input],
        memo: { organization_id: principal.organizationId },
      });
      return inserted;
    });
  } catch (err) {
    await deps.store.deletePrefix(bucket, prefix).catch(() => undefined);
    throw err;
  }
}

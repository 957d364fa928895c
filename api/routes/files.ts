// /v1/files: OpenAI's Files API for training files (purpose "fine-tune"). An upload becomes a dataset version of the
// caller's organization through the same ingestion as POST /v1/datasets (every line checked in the request, then a
// preparation job: normalisation, exact dedup, splits, token counts), so its errors name the same lines and fields;
// a file id is the dataset version's id. The request waits for the job (OpenAI's clients create the fine-tuning job
// right after the upload): `processed` once it has ended, `uploaded` while it still runs after FILE_WAIT_MS (GET
// /v1/files/{id} follows it), `error` with the reason if it failed later.
import { createReadStream } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { PassThrough, type Readable } from 'node:stream';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { Hono, type Context } from 'hono';
import type { ApiDeps, AppEnv } from '../deps.js';
import { FILE_PURPOSE, FileListQuerySchema } from '../../contracts/openai.js';
import { getDatasetAnyStatus, listDatasetVersionsAfter, type DatasetRow } from '../../db/repo/datasets.js';
import { DEFAULT_BASE_MODEL } from '../../lib/base-models.js';
import type { DatasetIssue } from '../../contracts/datasets.js';
import { acceptUpload, UploadRefusedError, waitForPreparation } from './datasets/upload.js';
import { DatasetValidationError } from '../../datasets/ingest/preprocess.js';
import { auditRow } from '../audit.js';
import { requireRole } from '../auth.js';
import { ApiError, invalid, notFound } from '../errors.js';
import { queryParams } from '../validate.js';
import { boundaryOf, receiveMultipart, type MultipartUpload } from '../multipart.js';

const seconds = (d: Date): number => Math.floor(d.getTime() / 1000);

/** How long an upload waits for its preparation job: under the 300 s many HTTP clients wait for an answer. */
const FILE_WAIT_MS = 240_000;

/** A version's status as an OpenAI file's. */
const FILE_STATUS = { ready: 'processed', preparing: 'uploaded', failed: 'error' } as const;

/** A dataset version as OpenAI's file object (with the dataset it is, our addition). */
export function fileView(row: DatasetRow) {
  const source = (row.metadata as { source?: { name?: string } }).source;
  const issues = (row.issues ?? []) as DatasetIssue[];
  return {
    id: row.id,
    object: 'file' as const,
    bytes: row.sizeBytes,
    created_at: seconds(row.createdAt),
    filename: source?.name ?? `${row.name}.${row.format}`,
    purpose: FILE_PURPOSE,
    status: FILE_STATUS[row.status],
    status_details: row.status === 'failed' ? issues.map(issueText).join('; ') || 'the preparation job failed' : null,
    expires_at: null,
    dataset: { name: row.name, version: row.version, num_records: row.numRecords },
  };
}

const issueText = (i: DatasetIssue): string => [i.file, i.line ?? i.record, i.field].filter((x) => x !== null && x !== undefined).join(': ') + ` ${i.message}`;

/** The dataset a file is filed under: its name without the extension, in the characters dataset names allow. */
export function datasetNameOf(filename: string): string {
  const stem = filename.replace(/^.*[\\/]/, '').replace(/\.jsonl$/i, '');
  const name = stem.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^[^A-Za-z0-9]+/, '').slice(0, 128);
  return name || 'training-file';
}

/** The form's `purpose` field and the file's name, each checked by name. */
function checkFields(fields: Record<string, string>, filename: string | null): string {
  const purpose = fields.purpose;
  if (purpose === undefined) throw invalid('purpose: required ("fine-tune")');
  if (purpose !== FILE_PURPOSE) throw invalid(`purpose: "${purpose}" is not supported; training files are uploaded with purpose "${FILE_PURPOSE}"`);
  if (filename === null) throw invalid('file: required (a JSONL training file as a form file field)');
  if (!/\.jsonl$/i.test(filename)) throw invalid(`file: "${filename}" is not a .jsonl file; fine-tuning files are JSON Lines (one example per line)`);
  return filename;
}

/** The whole form, its file at a local path: the fields and the file checked by name. */
function checkForm(form: MultipartUpload): { filename: string } {
  const filename = checkFields(form.fields, form.file?.filename ?? null);
  if (form.file!.bytes === 0) throw invalid(`file: "${filename}" is empty`);
  return { filename };
}

type Ingest = (filename: string, source: Readable, sha256?: string) => Promise<DatasetRow>;

/**
 * The form read as it arrives. When its fields come before the file (the order of OpenAI's SDK and httpx), they are
 * checked at the file's start and the file part goes straight into the upload (stored and checked as it arrives);
 * otherwise the file lands in a temporary file (hashed on the way) and is uploaded from there once the form is whole.
 */
async function receiveFile(c: Context<AppEnv>, deps: ApiDeps, body: ReadableStream<Uint8Array>, contentType: string, ingest: Ingest): Promise<DatasetRow> {
  const uploadDir = join(deps.home, 'tmp', 'uploads');
  await mkdir(uploadDir, { recursive: true });
  const upload = join(uploadDir, `${randomUUID()}.jsonl`);
  let streamed: Promise<DatasetRow> | null = null;
  const streamFile = (file: { filename: string }, fields: Record<string, string>) => {
    if (fields.purpose === undefined) return null;
    const source = new PassThrough();
    streamed = ingest(checkFields(fields, file.filename), source);
    streamed.catch(() => undefined); // awaited below, after the form
    return source;
  };
  try {
    let form: MultipartUpload;
    try {
      form = await receiveMultipart(body, contentType, { fileField: 'file', filePath: upload, maxFieldBytes: 1024, streamFile });
    } catch (err) {
      // The upload's own failure (bad data) says more than the form's reader stopping because of it.
      if (streamed) await (streamed as Promise<DatasetRow>).catch((cause: unknown) => Promise.reject(cause instanceof DatasetValidationError ? cause : err));
      throw err;
    }
    if (streamed) return await streamed;
    const { filename } = checkForm(form);
    return await ingest(filename, createReadStream(upload), form.file!.sha256!);
  } finally {
    await rm(upload, { force: true });
  }
}

export function fileRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();

  async function owned(c: Context<AppEnv>, id: string): Promise<DatasetRow> {
    const row = await getDatasetAnyStatus(deps.db, c.get('principal').organizationId, id);
    if (!row) throw notFound(`file ${id}`);
    return row;
  }

  app.post('/', async (c) => {
    requireRole(c, 'developer');
    const contentType = c.req.header('content-type') ?? '';
    const body = c.req.raw.body;
    if (!boundaryOf(contentType) || !body) throw invalid('request body: expected multipart/form-data with the fields "file" and "purpose"');
    const ingest: Ingest = (filename, source, sha256) =>
      acceptUpload(c, deps, {
        name: datasetNameOf(filename),
        format: 'jsonl',
        compression: 'none',
        source,
        sha256,
        suffix: '.jsonl',
        displayName: filename,
        seed: 42,
        splits: { train: 0.8, validation: 0.1, test: 0.1 },
        tokenizer: DEFAULT_BASE_MODEL,
        tags: ['openai-file'],
        audited: (tx, r) => auditRow(c, 'dataset.create', r.id)(tx, { name: r.name, version: r.version, sha256: r.sha256, via: 'files' }),
      });
    try {
      const row = await receiveFile(c, deps, body, contentType, ingest);
      return c.json(fileView((await waitForPreparation(c, deps, row, FILE_WAIT_MS)).row), 200);
    } catch (err) {
      if (err instanceof DatasetValidationError || err instanceof UploadRefusedError) throw invalid(`file: ${err.message}`);
      throw err;
    }
  });

  app.get('/', async (c) => {
    const principal = requireRole(c, 'viewer');
    const q = queryParams(c, FileListQuerySchema);
    if (q.purpose !== undefined && q.purpose !== FILE_PURPOSE) return c.json({ object: 'list', data: [], has_more: false });
    const rows = await listDatasetVersionsAfter(deps.db, principal.organizationId, { afterId: q.after, order: q.order, limit: q.limit + 1 });
    return c.json({ object: 'list', data: rows.slice(0, q.limit).map(fileView), has_more: rows.length > q.limit });
  });

  app.get('/:id', async (c) => {
    requireRole(c, 'viewer');
    return c.json(fileView(await owned(c, c.req.param('id'))));
  });

  /** Dataset versions are immutable: jobs, runs and models name them as their lineage, so a file is never deleted. */
  app.delete('/:id', async (c) => {
    requireRole(c, 'developer');
    const row = await owned(c, c.req.param('id'));
    throw new ApiError('INVALID_STATE', `file ${row.id} is dataset ${row.name} version ${row.version}: dataset versions are immutable (jobs and models name them as their lineage), so it cannot be deleted`);
  });

  return app;
}

// /v1/files: OpenAI's Files API for training files (purpose "fine-tune"). An upload becomes a dataset version of the
// caller's organization through the same ingestion as POST /v1/datasets (validation, normalisation, splits, token
// counts), so its errors name the same lines and fields; a file id is the dataset version's id.
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { Hono, type Context } from 'hono';
import type { ApiDeps, AppEnv } from '../deps.js';
import { FILE_PURPOSE, FileListQuerySchema } from '../../contracts/openai.js';
import { createDatasetVersion } from '../../datasets/versions.js';
import { getDataset, listDatasetVersionsAfter, type DatasetRow } from '../../db/repo/datasets.js';
import { DEFAULT_BASE_MODEL, resolveBaseModel } from '../../lib/base-models.js';
import { DatasetValidationError } from '../../datasets/ingest/preprocess.js';
import { auditRow } from '../audit.js';
import { requireRole } from '../auth.js';
import { ApiError, invalid, notFound } from '../errors.js';
import { queryParams } from '../validate.js';
import { boundaryOf, receiveMultipart, type MultipartUpload } from '../multipart.js';

const seconds = (d: Date): number => Math.floor(d.getTime() / 1000);

/** A dataset version as OpenAI's file object (with the dataset it is, our addition). */
export function fileView(row: DatasetRow) {
  const source = (row.metadata as { source?: { name?: string } }).source;
  return {
    id: row.id,
    object: 'file' as const,
    bytes: row.sizeBytes,
    created_at: seconds(row.createdAt),
    filename: source?.name ?? `${row.name}.${row.format}`,
    purpose: FILE_PURPOSE,
    status: 'processed' as const,
    status_details: null,
    expires_at: null,
    dataset: { name: row.name, version: row.version, num_records: row.numRecords },
  };
}

/** The dataset a file is filed under: its name without the extension, in the characters dataset names allow. */
export function datasetNameOf(filename: string): string {
  const stem = filename.replace(/^.*[\\/]/, '').replace(/\.jsonl$/i, '');
  const name = stem.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^[^A-Za-z0-9]+/, '').slice(0, 128);
  return name || 'training-file';
}

/** The form's `purpose` and `file` fields, each checked by name; the file is already at `path`. */
function checkForm(form: MultipartUpload): { filename: string } {
  const purpose = form.fields.purpose;
  if (purpose === undefined) throw invalid('purpose: required ("fine-tune")');
  if (purpose !== FILE_PURPOSE) throw invalid(`purpose: "${purpose}" is not supported; training files are uploaded with purpose "${FILE_PURPOSE}"`);
  if (!form.file) throw invalid('file: required (a JSONL training file as a form file field)');
  if (!/\.jsonl$/i.test(form.file.filename)) throw invalid(`file: "${form.file.filename}" is not a .jsonl file; fine-tuning files are JSON Lines (one example per line)`);
  if (form.file.bytes === 0) throw invalid(`file: "${form.file.filename}" is empty`);
  return { filename: form.file.filename };
}

export function fileRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();

  async function owned(c: Context<AppEnv>, id: string): Promise<DatasetRow> {
    const row = await getDataset(deps.db, c.get('principal').organizationId, id);
    if (!row) throw notFound(`file ${id}`);
    return row;
  }

  app.post('/', async (c) => {
    const principal = requireRole(c, 'developer');
    const contentType = c.req.header('content-type') ?? '';
    const body = c.req.raw.body;
    if (!boundaryOf(contentType) || !body) throw invalid('request body: expected multipart/form-data with the fields "file" and "purpose"');
    const uploadDir = join(deps.home, 'tmp', 'uploads');
    await mkdir(uploadDir, { recursive: true });
    const upload = join(uploadDir, `${randomUUID()}.jsonl`);
    try {
      const { filename } = checkForm(await receiveMultipart(body, contentType, { fileField: 'file', filePath: upload, maxFieldBytes: 1024 }));
      const row = await createDatasetVersion(deps, {
        organizationId: principal.organizationId,
        createdBy: principal.subject,
        name: datasetNameOf(filename),
        format: 'jsonl',
        sourcePath: upload,
        displayName: filename,
        seed: 42,
        splits: { train: 0.8, validation: 0.1, test: 0.1 },
        tokenizerDir: resolveBaseModel(DEFAULT_BASE_MODEL, deps.config, deps.bootstrap),
        tags: ['openai-file'],
        transform: 'upload (/v1/files, purpose fine-tune): validate, normalise to chat messages, dedup exact, split seed=42',
        audited: (tx, r) => auditRow(c, 'dataset.create', r.id)(tx, { name: r.name, version: r.version, sha256: r.sha256, via: 'files' }),
      });
      return c.json(fileView(row), 200);
    } catch (err) {
      if (err instanceof DatasetValidationError) throw invalid(`file: ${err.message}`);
      throw err;
    } finally {
      await rm(upload, { force: true });
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

// /v1/datasets: upload a file (streamed to disk, never buffered whole) and get back an immutable version.
import { createWriteStream } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { randomUUID } from 'node:crypto';
import { Hono } from 'hono';
import { z } from 'zod';
import type { ApiDeps, AppEnv } from '../deps.js';
import { DatasetCreateQuerySchema, SplitRatiosSchema } from '../../contracts/datasets.js';
import { createDatasetVersion } from '../../datasets/versions.js';
import { DatasetValidationError } from '../../datasets/ingest/preprocess.js';
import { datasetView, getDataset, listDatasets } from '../../db/repo/datasets.js';
import { BaseModelError, DEFAULT_BASE_MODEL, resolveBaseModel } from '../../lib/base-models.js';
import { ApiError, invalid, notFound } from '../errors.js';
import { queryParams } from '../validate.js';
import { requireRole } from '../auth.js';
import { auditRow } from '../audit.js';
import { checkBaseModel } from '../input-policy.js';

const ListQuerySchema = z.strictObject({
  name: z.string().optional(),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
  offset: z.coerce.number().int().min(0).default(0),
});

export function datasetRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();

  app.post('/', async (c) => {
    const principal = requireRole(c, 'developer');
    const q = queryParams(c, DatasetCreateQuerySchema);
    const splits = SplitRatiosSchema.safeParse({ train: q.train, validation: q.validation, test: q.test });
    if (!splits.success) throw invalid(`query parameters train, validation, test: ${splits.error.issues[0]!.message}`);
    if (q.tokenizer !== undefined) checkBaseModel(deps.config, principal, 'tokenizer', q.tokenizer);
    let tokenizerDir: string;
    try {
      tokenizerDir = resolveBaseModel(q.tokenizer ?? DEFAULT_BASE_MODEL, deps.config, deps.bootstrap);
    } catch (err) {
      if (err instanceof BaseModelError) throw invalid(`tokenizer: ${err.message}`);
      throw err;
    }
    const body = c.req.raw.body;
    if (!body) throw invalid('request body is empty: send the dataset file as the body');
    const uploadDir = join(deps.home, 'tmp', 'uploads');
    await mkdir(uploadDir, { recursive: true });
    const upload = join(uploadDir, `${randomUUID()}.${q.format}`);
    try {
      await pipeline(Readable.fromWeb(body as import('node:stream/web').ReadableStream), createWriteStream(upload));
      const row = await createDatasetVersion(deps, {
        organizationId: principal.organizationId,
        createdBy: principal.subject,
        name: q.name,
        format: q.format,
        sourcePath: upload,
        displayName: c.req.header('x-filename') ?? `${q.name}.${q.format}`,
        seed: q.seed,
        splits: splits.data,
        tokenizerDir,
        tags: q.tags ? q.tags.split(',').map((t) => t.trim()).filter(Boolean) : [],
        transform: `upload: validate, normalise to chat messages, dedup exact, split seed=${q.seed}`,
        // The audit row commits with the version's row, after the slow part (preprocessing, token counts, upload).
        audited: (tx, row) => auditRow(c, 'dataset.create', row.id)(tx, { name: row.name, version: row.version, sha256: row.sha256 }),
      });
      return c.json(datasetView(row), 201);
    } catch (err) {
      if (err instanceof DatasetValidationError) throw new ApiError('INVALID_PARAMETER_VALUE', err.message);
      throw err;
    } finally {
      await rm(upload, { force: true });
    }
  });

  app.get('/', async (c) => {
    const principal = requireRole(c, 'viewer');
    const q = queryParams(c, ListQuerySchema);
    const rows = await listDatasets(deps.db, principal.organizationId, q);
    return c.json({ datasets: rows.map(datasetView) });
  });

  app.get('/:id', async (c) => {
    const principal = requireRole(c, 'viewer');
    const row = await getDataset(deps.db, principal.organizationId, c.req.param('id'));
    if (!row) throw notFound(`dataset ${c.req.param('id')}`);
    return c.json(datasetView(row));
  });

  return app;
}

// Reading dataset versions: the list (by name, by any of some tags), one version, a split's first records, and a
// split's download URL. Another organization's version is "not found", never "forbidden". An upload's version is
// listed and readable from the request on (status preparing, then ready or failed with its issues); its records
// (preview, download) only once it is ready.
import { Readable } from 'node:stream';
import { Hono, type Context } from 'hono';
import { stream } from 'hono/streaming';
import type { ApiDeps, AppEnv } from '../../deps.js';
import { DatasetDownloadQuerySchema, DatasetListQuerySchema, DatasetPreviewQuerySchema, DOWNLOAD_URL_TTL_SECONDS, SplitNameSchema, type SplitName } from '../../../contracts/datasets.js';
import { checkFileDownload, downloadSigningKey, presignS3Get, signedDownloadPath, signFileDownload } from '../../../datasets/downloads.js';
import { firstRecords } from '../../../datasets/preview.js';
import { datasetView, getDatasetAnyOrganization, getDatasetAnyStatus, listDatasets, type DatasetRow } from '../../../db/repo/datasets.js';
import { audit } from '../../../db/repo/auth.js';
import { S3ObjectStore } from '../../../lib/object-store.js';
import { ApiError, notFound } from '../../errors.js';
import { queryParams } from '../../validate.js';
import { requireRole } from '../../auth.js';
import { auditContext } from '../identity.js';

type Split = { path: string; sha256: string; size_bytes: number };

export function readRoutes(app: Hono<AppEnv>, deps: ApiDeps): void {
  app.get('/', async (c) => {
    const principal = requireRole(c, 'viewer');
    const q = queryParams(c, DatasetListQuerySchema);
    const tags = q.tags?.split(',').map((t) => t.trim()).filter(Boolean);
    const rows = await listDatasets(deps.db, principal.organizationId, { name: q.name, tags, limit: q.limit, offset: q.offset });
    return c.json({ datasets: rows.map(datasetView) });
  });

  // A version being derived answers 404 until its files are stored and its row exists (POST .../derive says so).
  app.get('/:id', async (c) => c.json(datasetView(await ownVersion(c, deps))));

  app.get('/:id/preview', async (c) => {
    const row = readyVersion(await ownVersion(c, deps));
    const q = queryParams(c, DatasetPreviewQuerySchema);
    const records = await firstRecords(deps.store, splitOf(row, q.split).path, q.n);
    await auditRead(c, deps, 'dataset.preview', row, { split: q.split, n: records.length });
    return c.json({ id: row.id, split: q.split, records });
  });

  app.get('/:id/download', async (c) => {
    const row = readyVersion(await ownVersion(c, deps));
    const { split } = queryParams(c, DatasetDownloadQuerySchema);
    const file = splitOf(row, split);
    // One signing time for the URL and the expires_at reported beside it (SigV4 dates are to the second).
    const now = new Date(Math.floor(Date.now() / 1000) * 1000);
    const expires = now.getTime() / 1000 + DOWNLOAD_URL_TTL_SECONDS;
    // The file store's URL is on the origin the caller reached this API by (server.public_url is the trainers').
    const url =
      deps.store instanceof S3ObjectStore
        ? await presignS3Get(deps.store.client, deps.config.storage, file.path, DOWNLOAD_URL_TTL_SECONDS, now)
        : `${new URL(c.req.url).origin}${signedDownloadPath(row.id, split)}?${signFileDownload(await downloadSigningKey(deps.home), row.id, split, expires)}`;
    await auditRead(c, deps, 'dataset.download', row, { split });
    return c.json({ url, expires_at: new Date(expires * 1000).toISOString(), split, sha256: file.sha256, size_bytes: file.size_bytes });
  });
}

/**
 * The file store's downloads, served outside /v1: the signed URL is the credential (no bearer token), so the
 * signature covers the version, the split and the expiry, and a changed or expired URL is refused.
 */
export function signedDownloadRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();
  app.get('/:id/:split', async (c) => {
    const split = SplitNameSchema.safeParse(c.req.param('split'));
    const expires = Number(c.req.query('expires'));
    const signature = c.req.query('signature') ?? '';
    if (!split.success || !Number.isInteger(expires) || !/^[0-9a-f]{64}$/.test(signature)) throw new ApiError('PERMISSION_DENIED', 'not a signed download URL: ask GET /v1/datasets/{id}/download for one');
    const refused = checkFileDownload(await downloadSigningKey(deps.home), c.req.param('id'), split.data, expires, signature, Math.floor(Date.now() / 1000));
    if (refused) throw new ApiError('PERMISSION_DENIED', `${refused}: ask GET /v1/datasets/{id}/download for a new one`);
    const row = await getDatasetAnyOrganization(deps.db, c.req.param('id'));
    if (!row) throw notFound(`dataset ${c.req.param('id')}`);
    const file = splitOf(row, split.data);
    const body = await deps.store.read(file.path);
    c.header('content-type', 'application/x-ndjson');
    c.header('content-length', String(file.size_bytes));
    c.header('content-disposition', `attachment; filename="${row.name}-v${row.version}-${split.data}.jsonl"`);
    return stream(c, async (s) => {
      for await (const chunk of body as Readable) await s.write(chunk as Uint8Array);
    });
  });
  return app;
}

async function ownVersion(c: Context<AppEnv>, deps: ApiDeps): Promise<DatasetRow> {
  const principal = requireRole(c, 'viewer');
  const row = await getDatasetAnyStatus(deps.db, principal.organizationId, c.req.param('id')!);
  if (!row) throw notFound(`dataset ${c.req.param('id')}`);
  return row;
}

/** Records exist only in a ready version: one preparing or failed has none yet (409, saying which). */
function readyVersion(row: DatasetRow): DatasetRow {
  if (row.status === 'ready') return row;
  const why = row.status === 'preparing' ? `its preparation job ${row.jobId ?? ''} is still running` : 'its preparation failed (see its issues)';
  throw new ApiError('INVALID_STATE', `dataset version ${row.id} has no records to read: ${why}`);
}

function splitOf(row: DatasetRow, split: SplitName): Split {
  return (row.splits as Record<SplitName, Split>)[split];
}

/** Reads that hand out records are audited by name (the trail's generic row is skipped for them). */
async function auditRead(c: Context<AppEnv>, deps: ApiDeps, action: string, row: DatasetRow, detail: Record<string, unknown>): Promise<void> {
  await audit(deps.db, { ...auditContext(c, c.get('principal')), action, target: row.id, detail: { name: row.name, version: row.version, ...detail } });
  c.set('audited', true);
}

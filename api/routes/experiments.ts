// /v1/experiments (spec 000): list, create, get, and the runs of an experiment with params and latest metrics.
// The same rows the MLflow API serves; here in the /v1 shapes.
import { artifactRootUri } from '../../lib/object-store.js';
import { randomUUID } from 'node:crypto';
import { Hono } from 'hono';
import { z } from 'zod';
import type { ApiDeps, AppEnv } from '../deps.js';
import { createExperiment, getExperiment, searchExperiments, type ExperimentRow } from '../../db/repo/experiments.js';
import { countRuns, runColumnsOf, searchRuns, type RunColumns, type RunCursor } from '../../db/repo/run-search.js';
import { runDataOf, type RunRow } from '../../db/repo/runs.js';
import { RunsPageQuerySchema, type RunsPage, type RunsPageQuery, type RunsTableRow, type WireDouble } from '../../contracts/console.js';
import { parseFilter, parseOrderBy, SearchFilterError, type Comparison, type OrderClause } from '../../lib/search-filter.js';
import { ApiError, invalid, notFound } from '../errors.js';
import { wireDouble } from './mlflow/common.js';
import { jsonBody, queryParams } from '../validate.js';
import { requireRole } from '../auth.js';

const PageSchema = z.strictObject({
  limit: z.coerce.number().int().min(1).max(1000).default(100),
  offset: z.coerce.number().int().min(0).default(0),
});
const CreateSchema = z.strictObject({
  name: z.string().min(1).max(500),
  tags: z.record(z.string().min(1).max(250), z.string().max(5000)).default({}),
});

const view = (e: ExperimentRow) => ({
  id: e.id,
  name: e.name,
  artifact_location: e.artifactLocation,
  lifecycle_stage: e.lifecycleStage,
  created_at: e.createdAt.toISOString(),
});

export function experimentRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();

  app.get('/', async (c) => {
    const principal = requireRole(c, 'viewer');
    const page = queryParams(c, PageSchema);
    const { rows, more } = await searchExperiments(deps.db, principal.organizationId, { filter: [], orderBy: [], view: 'ACTIVE_ONLY', ...page });
    return c.json({ experiments: rows.map(view), next_offset: more ? page.offset + page.limit : null });
  });

  app.post('/', async (c) => {
    const principal = requireRole(c, 'developer');
    const body = await jsonBody(c, CreateSchema);
    const id = randomUUID().replaceAll('-', '');
    const created = await createExperiment(deps.db, {
      id,
      organizationId: principal.organizationId,
      name: body.name,
      artifactLocation: `${artifactRootUri(deps)}/experiments/${id}`,
      tags: Object.entries(body.tags).map(([key, value]) => ({ key, value })),
    });
    if (!created) throw new ApiError('RESOURCE_ALREADY_EXISTS', `experiment "${body.name}" already exists`);
    return c.json(view((await getExperiment(deps.db, principal.organizationId, id))!), 201);
  });

  app.get('/:id', async (c) => {
    const principal = requireRole(c, 'viewer');
    const e = await getExperiment(deps.db, principal.organizationId, c.req.param('id'));
    if (!e) throw notFound(`experiment ${c.req.param('id')}`);
    return c.json(view(e));
  });

  app.get('/:id/runs', async (c) => {
    const principal = requireRole(c, 'viewer');
    const q = queryParams(c, RunsPageQuerySchema);
    const e = await getExperiment(deps.db, principal.organizationId, c.req.param('id'));
    if (!e) throw notFound(`experiment ${c.req.param('id')}`);
    const search = parseSearch(q);
    const after = q.cursor === undefined ? null : decodeRunsCursor(q.cursor, q);
    if (after && q.offset > 0) throw invalid('offset: page by cursor or by offset, not both');
    const scope = { experimentIds: [e.id], filter: search.filter, view: 'ACTIVE_ONLY' as const };
    const [{ rows, next }, total] = await Promise.all([
      searchRuns(deps.db, principal.organizationId, { ...scope, orderBy: search.orderBy, limit: q.limit, offset: q.offset, after }),
      countRuns(deps.db, principal.organizationId, scope),
    ]);
    const page: RunsPage = {
      runs: await tableRows(deps, rows, parseColumns(q.columns)),
      total,
      next_cursor: next ? encodeRunsCursor(next, q) : null,
      next_offset: next && !after ? q.offset + q.limit : null,
    };
    return c.json(page);
  });

  return app;
}

/** The filter and ORDER BY of a runs page, MLflow's syntax; a bad one is a 400 naming the parameter. */
function parseSearch(q: RunsPageQuery): { filter: Comparison[]; orderBy: OrderClause[] } {
  const named = <T>(param: string, parse: () => T): T => {
    try {
      return parse();
    } catch (err) {
      if (err instanceof SearchFilterError || err instanceof ApiError) throw invalid(`${param}: ${err.message}`);
      throw err;
    }
  };
  return { filter: named('filter', () => parseFilter(q.filter)), orderBy: q.order_by ? [named('order_by', () => parseOrderBy(q.order_by!))] : [] };
}

/**
 * `columns=metrics.loss,params.lr,tags.team`: the keys of each kind to answer; absent, every param, tag and latest
 * metric (the listing as it was); empty, the attributes alone.
 */
function parseColumns(columns: string | undefined): RunColumns | null {
  if (columns === undefined) return null;
  const out: RunColumns = { metrics: [], params: [], tags: [] };
  for (const column of columns.split(',').map((s) => s.trim()).filter(Boolean)) {
    const m = /^(metrics|params|tags)\.(.+)$/.exec(column);
    if (!m) throw invalid(`columns: "${column}" is not metrics.<key>, params.<key> or tags.<key>`);
    out[m[1] as keyof RunColumns].push(m[2]!);
  }
  return out;
}

/**
 * A page's cursor: its last run's sort keys, with the order and filter it was made for (a cursor of another
 * order would compare the wrong columns), as base64url JSON.
 */
function encodeRunsCursor(keys: RunCursor, q: RunsPageQuery): string {
  return Buffer.from(JSON.stringify({ o: q.order_by ?? '', f: q.filter ?? '', k: keys })).toString('base64url');
}

function decodeRunsCursor(cursor: string, q: RunsPageQuery): RunCursor {
  let parsed: { o?: unknown; f?: unknown; k?: unknown };
  try {
    parsed = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as typeof parsed;
  } catch {
    throw invalid('cursor: not a cursor this listing answered');
  }
  if (!Array.isArray(parsed.k) || !parsed.k.every((v) => v === null || typeof v === 'string')) throw invalid('cursor: not a cursor this listing answered');
  if (parsed.o !== (q.order_by ?? '') || parsed.f !== (q.filter ?? '')) throw invalid('cursor: it was made for another order_by or filter; start again without it');
  return parsed.k as RunCursor;
}

/** The rows of a page: attributes, and the asked columns (or every param, tag and latest metric). */
async function tableRows(deps: ApiDeps, rows: RunRow[], columns: RunColumns | null): Promise<RunsTableRow[]> {
  const ids = rows.map((r) => r.id);
  const data = columns ? await runColumnsOf(deps.db, ids, columns) : await runDataOf(deps.db, ids);
  const pairs = (list: { key: string; value: string }[] | undefined) => Object.fromEntries((list ?? []).map((p) => [p.key, p.value]));
  return rows.map((r) => ({
    id: r.id,
    name: r.name,
    status: r.status,
    start_time: r.startTime.toISOString(),
    end_time: r.endTime?.toISOString() ?? null,
    user_id: r.userId,
    params: pairs(data.params.get(r.id)),
    tags: pairs(data.tags.get(r.id)),
    metrics: Object.fromEntries((data.metrics.get(r.id) ?? []).map((m) => [m.key, wireDouble(m.value) as WireDouble])),
  }));
}

// /v1/experiments (spec 000): list, create, get, and the runs of an experiment with params and latest metrics.
// The same rows the MLflow API serves; here in the /v1 shapes.
import { artifactRootUri } from '../../lib/object-store.js';
import { randomUUID } from 'node:crypto';
import { Hono } from 'hono';
import { z } from 'zod';
import type { ApiDeps, AppEnv } from '../deps.js';
import { createExperiment, getExperiment, searchExperiments, type ExperimentRow } from '../../db/repo/experiments.js';
import { searchRuns } from '../../db/repo/run-search.js';
import { runDataOf } from '../../db/repo/runs.js';
import { ApiError, notFound } from '../errors.js';
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
    const page = queryParams(c, PageSchema);
    const e = await getExperiment(deps.db, principal.organizationId, c.req.param('id'));
    if (!e) throw notFound(`experiment ${c.req.param('id')}`);
    const { rows, more } = await searchRuns(deps.db, principal.organizationId, { experimentIds: [e.id], filter: [], orderBy: [], view: 'ACTIVE_ONLY', ...page });
    const data = await runDataOf(deps.db, rows.map((r) => r.id));
    return c.json({
      runs: rows.map((r) => ({
        id: r.id,
        name: r.name,
        status: r.status,
        start_time: r.startTime.toISOString(),
        end_time: r.endTime?.toISOString() ?? null,
        params: Object.fromEntries(data.params.get(r.id)!.map((p) => [p.key, p.value])),
        metrics: Object.fromEntries(data.metrics.get(r.id)!.map((m) => [m.key, m.value])),
      })),
      next_offset: more ? page.offset + page.limit : null,
    });
  });

  return app;
}

// Downsampled metric series for the console's charts (contracts/console.ts): one run's key over a step range, and
// the batch form that draws a compare page (up to 100 runs x 50 keys) in one call. Zoom is the same call with a
// narrower range. The catalogue buckets the points (db/repo/series.ts); the JSON arrays it writes go out as they are.
import { and, eq, inArray } from 'drizzle-orm';
import { Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../deps.js';
import { SeriesBatchRequestSchema, SeriesQuerySchema } from '../../contracts/console.js';
import { getRun } from '../../db/repo/runs.js';
import { downsampledSeries, seriesJson } from '../../db/repo/series.js';
import { runs } from '../../db/schema/index.js';
import { requireRole } from '../auth.js';
import { notFound } from '../errors.js';
import { jsonBody, queryParams } from '../validate.js';

const json = (body: string) => new Response(body, { headers: { 'content-type': 'application/json' } });

export function seriesRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();

  // Keys may hold slashes (eval/loss, system/gpu_0_utilization_percentage): the key is everything up to /series.
  app.get('/:id/metrics/:key{.+}/series', async (c) => {
    const principal = requireRole(c, 'viewer');
    const q = queryParams(c, SeriesQuerySchema);
    const run = await getRun(deps.db, principal.organizationId, c.req.param('id'));
    if (!run) throw notFound(`run ${c.req.param('id')}`);
    const [series] = await downsampledSeries(deps.db, { series: [{ runId: run.id, key: c.req.param('key') }], fromStep: q.from_step, toStep: q.to_step, points: q.points, precision: q.precision });
    return json(seriesJson(series!));
  });

  app.post('/series', async (c) => {
    const principal = requireRole(c, 'viewer');
    const body = await jsonBody(c, SeriesBatchRequestSchema);
    const runIds = [...new Set(body.run_ids)];
    const keys = [...new Set(body.keys)];
    // Another organization's run is absent, as everywhere: the first one not found is named.
    const found = await deps.db.select({ id: runs.id }).from(runs).where(and(eq(runs.organizationId, principal.organizationId), inArray(runs.id, runIds)));
    const known = new Set(found.map((r) => r.id));
    const missing = runIds.find((id) => !known.has(id));
    if (missing !== undefined) throw notFound(`run_ids: run ${missing}`);
    const series = await downsampledSeries(deps.db, {
      series: runIds.flatMap((runId) => keys.map((key) => ({ runId, key }))),
      fromStep: body.from_step,
      toStep: body.to_step,
      points: body.points,
      precision: body.precision,
    });
    return json(`{"series":[${series.map(seriesJson).join(',')}]}`);
  });

  return app;
}

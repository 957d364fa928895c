// /v1/runs: a run with its params, latest metrics and artifacts; metric history paged by cursor; batch logging.
import { Hono } from 'hono';
import { z } from 'zod';
import type { ApiDeps, AppEnv } from '../deps.js';
import { artifactsOf, getRun, latestMetricsOf, logMetrics, metricHistoryPage, paramsOf } from '../../db/repo/tracking.js';
import { notFound } from '../errors.js';
import { jsonBody, queryParams } from '../validate.js';
import { requireRole } from '../auth.js';

export const MetricPointSchema = z.strictObject({
  key: z.string().min(1).max(250),
  value: z.number(),
  step: z.number().int().nonnegative().default(0),
  timestamp: z.number().int().nonnegative().optional(),
});
const LogMetricsSchema = z.strictObject({ metrics: z.array(MetricPointSchema).min(1).max(1000) });
const HistoryQuerySchema = z.strictObject({
  key: z.string().min(1),
  limit: z.coerce.number().int().min(1).max(25_000).default(1000),
  page_token: z.string().optional(),
});

const encodeCursor = (p: { step: number; timestamp: number }): string => Buffer.from(`${p.step}:${p.timestamp}`).toString('base64url');
function decodeCursor(token: string): { step: number; timestamp: number } {
  const [step, timestamp] = Buffer.from(token, 'base64url').toString().split(':').map(Number);
  if (!Number.isFinite(step) || !Number.isFinite(timestamp)) throw new Error('bad cursor');
  return { step: step!, timestamp: timestamp! };
}

export function runRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();

  app.get('/:id', async (c) => {
    const principal = requireRole(c, 'viewer');
    const run = await getRun(deps.db, principal.organizationId, c.req.param('id'));
    if (!run) throw notFound(`run ${c.req.param('id')}`);
    const [params, metrics, artifacts] = await Promise.all([paramsOf(deps.db, run.id), latestMetricsOf(deps.db, run.id), artifactsOf(deps.db, run.id)]);
    return c.json({
      id: run.id,
      experiment_id: run.experimentId,
      name: run.name,
      status: run.status,
      start_time: run.startTime.toISOString(),
      end_time: run.endTime?.toISOString() ?? null,
      user_id: run.userId,
      organization: run.organizationId,
      params,
      metrics,
      artifacts: artifacts.map((a) => ({ key: a.path, path: a.uri, size_bytes: a.sizeBytes, sha256: a.sha256, metadata: a.metadata })),
    });
  });

  app.get('/:id/metrics', async (c) => {
    const principal = requireRole(c, 'viewer');
    const q = queryParams(c, HistoryQuerySchema);
    const run = await getRun(deps.db, principal.organizationId, c.req.param('id'));
    if (!run) throw notFound(`run ${c.req.param('id')}`);
    let after;
    try {
      after = q.page_token ? decodeCursor(q.page_token) : undefined;
    } catch {
      return c.json({ error_code: 'INVALID_PARAMETER_VALUE', message: 'page_token is not a token this server issued', request_id: c.get('requestId') }, 400);
    }
    const page = await metricHistoryPage(deps.db, run.id, q.key, { after, limit: q.limit });
    const last = page.at(-1);
    return c.json({ metrics: page, next_page_token: page.length === q.limit && last ? encodeCursor(last) : null });
  });

  app.post('/:id/metrics', async (c) => {
    const principal = requireRole(c, 'developer');
    const body = await jsonBody(c, LogMetricsSchema);
    const run = await getRun(deps.db, principal.organizationId, c.req.param('id'));
    if (!run) throw notFound(`run ${c.req.param('id')}`);
    const now = Date.now();
    await logMetrics(deps.db, run.id, body.metrics.map((m) => ({ key: m.key, value: m.value, step: m.step, timestamp: m.timestamp ?? now })));
    return c.json({});
  });

  return app;
}

// The MLflow REST wire format for the calls the trainer makes (runs/log-batch), so trainer scripts can use
// the stock mlflow client too. Values arrive as numbers or as MLflow's "NaN"/"Infinity" strings.
import { Hono } from 'hono';
import { z } from 'zod';
import type { ApiDeps, AppEnv } from '../deps.js';
import { getRun, logMetrics, logParams } from '../../db/repo/tracking.js';
import { notFound } from '../errors.js';
import { jsonBody } from '../validate.js';
import { requireRole } from '../auth.js';

const mlflowNumber = z.union([
  z.number(),
  z.enum(['NaN', 'Infinity', '-Infinity']).transform((s) => (s === 'NaN' ? NaN : s === 'Infinity' ? Infinity : -Infinity)),
]);
const LogBatchSchema = z.object({
  run_id: z.string().min(1),
  metrics: z
    .array(z.object({ key: z.string().min(1).max(250), value: mlflowNumber, timestamp: z.coerce.number().int(), step: z.coerce.number().int().default(0) }))
    .max(1000)
    .default([]),
  params: z.array(z.object({ key: z.string().min(1).max(250), value: z.string().max(6000) })).max(100).default([]),
  tags: z.array(z.object({ key: z.string(), value: z.string() })).default([]),
});

export function mlflowRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();
  app.post('/runs/log-batch', async (c) => {
    const principal = requireRole(c, 'developer');
    const body = await jsonBody(c, LogBatchSchema);
    const run = await getRun(deps.db, principal.organizationId, body.run_id);
    if (!run) throw notFound(`Run with id=${body.run_id} not found`);
    await logParams(deps.db, run.id, Object.fromEntries(body.params.map((p) => [p.key, p.value])));
    await logMetrics(deps.db, run.id, body.metrics);
    return c.json({});
  });
  return app;
}

// The MLflow tracking REST API (served under /api/2.0/mlflow and /ajax-api/2.0/mlflow), so the stock mlflow
// client works against this server by changing only MLFLOW_TRACKING_URI.
import { Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../../deps.js';
import { experimentRoutes } from './experiments.js';
import { mlflowRunRoutes } from './runs.js';

export function mlflowRoutes(deps: ApiDeps): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  experimentRoutes(app, deps);
  mlflowRunRoutes(app, deps);
  return app;
}

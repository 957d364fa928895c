// The MLflow tracking REST API (served under /api/2.0/mlflow and /ajax-api/2.0/mlflow), so the stock mlflow
// client works against this server by changing only MLFLOW_TRACKING_URI.
import { Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../../deps.js';
import { experimentRoutes } from './experiments.js';
import { mlflowRunRoutes } from './runs.js';
import { mlflowRegistryRoutes } from './registry.js';
import { mlflowArtifactRoutes } from './artifacts.js';
import { loggedModelRoutes } from './logged-models.js';
import { mlflowInputRoutes } from './inputs.js';

export function mlflowRoutes(deps: ApiDeps): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  experimentRoutes(app, deps);
  mlflowRunRoutes(app, deps);
  mlflowRegistryRoutes(app, deps);
  mlflowArtifactRoutes(app, deps);
  loggedModelRoutes(app, deps);
  mlflowInputRoutes(app, deps);
  return app;
}

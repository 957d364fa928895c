// /v1/datasets: upload a file as a new immutable version (upload.ts), derive a version from another (derive.ts),
// list and read versions, preview a split's first records, and hand out expiring download URLs (read.ts).
import { Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../../deps.js';
import { uploadRoute } from './upload.js';
import { deriveRoute } from './derive.js';
import { readRoutes } from './read.js';

export function datasetRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();
  uploadRoute(app, deps);
  readRoutes(app, deps);
  deriveRoute(app, deps);
  return app;
}

export { signedDownloadRoutes } from './read.js';

// /v1/models: the model registry (versions, stages, artifacts with checksums).
import { Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../deps.js';
import { listModels, listVersions, modelVersionView } from '../../db/repo/models.js';
import { notFound } from '../errors.js';
import { requireRole } from '../auth.js';

export function modelRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();
  app.get('/', async (c) => {
    const principal = requireRole(c, 'viewer');
    return c.json({ models: await listModels(deps.db, principal.organizationId) });
  });
  app.get('/:name/versions', async (c) => {
    const principal = requireRole(c, 'viewer');
    const name = c.req.param('name');
    const versions = await listVersions(deps.db, principal.organizationId, name);
    if (!versions) throw notFound(`model "${name}"`);
    return c.json({ versions: versions.map((v) => modelVersionView(name, v)) });
  });
  app.get('/:name/versions/:version', async (c) => {
    const principal = requireRole(c, 'viewer');
    const name = c.req.param('name');
    const versions = await listVersions(deps.db, principal.organizationId, name);
    const v = versions?.find((x) => String(x.version) === c.req.param('version'));
    if (!v) throw notFound(`model "${name}" version ${c.req.param('version')}`);
    return c.json(modelVersionView(name, v));
  });
  return app;
}

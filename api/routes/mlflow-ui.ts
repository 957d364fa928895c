// The MLflow UI as a read-only frontend at /mlflow/ (spec 000): the static build that ships in the pinned `mlflow`
// package (mlflow/server/js/build, extracted from its wheel by the bootstrap), never a copy in this repository.
// The UI calls its API relative to the page (`ajax-api/2.0/mlflow/...`, `get-artifact`, `graphql`), so those calls arrive under
// /mlflow/ and are answered by the API itself, with the caller's credentials, when they only read: GETs and the
// search RPCs the UI posts. Anything that writes is refused, so the UI cannot change what it shows. A browser signed
// in to the console reaches it with the console's session cookie (api/routes/console-session.ts).
import { existsSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Hono } from 'hono';
import type { AppEnv } from '../deps.js';
import { errorResponse } from '../errors.js';
import { staticFiles } from '../static-files.js';
import { readOnlyUiEnv } from '../auth.js';

/**
 * The UI build the bootstrap extracted from the pinned mlflow wheel (`uiDir`), else the one of the mlflow package
 * installed beside `python` (a venv's bin/python), or null.
 */
export function mlflowUiBuildDir(uiDir: string | undefined, python: string | undefined): string | null {
  if (uiDir && existsSync(join(uiDir, 'index.html'))) return uiDir;
  if (!python) return null;
  const lib = join(dirname(dirname(python)), 'lib');
  if (!existsSync(lib)) return null;
  for (const py of readdirSync(lib).filter((d) => d.startsWith('python')).sort()) {
    const build = join(lib, py, 'site-packages', 'mlflow', 'server', 'js', 'build');
    if (existsSync(join(build, 'index.html'))) return build;
  }
  return null;
}

/** The POSTs the UI sends that only read: searches, bulk reads, and GraphQL (whose every operation reads). */
const READ_POSTS = /\/(search|search-datasets|get-history-bulk-interval|graphql)$/;

export function mlflowUiRoutes(app: Hono<AppEnv>, buildDir: string | null): void {
  if (!buildDir) return;
  const file = staticFiles(buildDir, (relative) => (relative === 'index.html' ? 'no-cache' : 'max-age=3600'));

  app.get('/mlflow', (c) => c.redirect('/mlflow/'));
  app.get('/mlflow/', async (c) => (await file('index.html')) ?? c.notFound());
  app.get('/mlflow/static-files/*', async (c) => (await file(decodeURIComponent(c.req.path.slice('/mlflow/static-files/'.length)))) ?? c.notFound());
  // The UI's API calls: answered by the app itself at the same path without the /mlflow prefix.
  for (const prefix of ['/mlflow/ajax-api/*', '/mlflow/api/*', '/mlflow/get-artifact', '/mlflow/graphql'])
    app.all(prefix, async (c) => {
      const path = c.req.path.slice('/mlflow'.length);
      const reads = c.req.method === 'GET' || (c.req.method === 'POST' && READ_POSTS.test(path));
      if (!reads) return errorResponse(c, 'PERMISSION_DENIED', 'The MLflow UI is a read-only frontend here: use the API or a client to make changes.');
      const url = new URL(c.req.url);
      url.pathname = path;
      const forwarded = new Request(url, { method: c.req.method, headers: c.req.raw.headers, body: c.req.method === 'GET' ? undefined : await c.req.arrayBuffer() });
      // Marked as a read of this frontend: a cookie session's reads need no CSRF header (api/auth.ts).
      return app.fetch(forwarded, readOnlyUiEnv(c.env));
    });
}

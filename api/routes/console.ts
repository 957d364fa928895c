// The web console (console/, built by scripts/bootstrap.sh) at /, on the API's own origin so it uses the same
// tokens, roles and limits. Its hashed assets are cached for a year; every other path that is not the API's
// answers index.html, so each page of the console is a deep link; the API's, MLflow's and OpenAPI's paths keep
// their own 404s. Each console response carries a strict Content-Security-Policy: scripts, styles and requests
// from this origin only, no inline script or style, and no framing.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Context, Hono } from 'hono';
import type { Bootstrap } from '../../lib/config.js';
import type { AppEnv } from '../deps.js';
import { staticFiles } from '../static-files.js';

export const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const SECURITY_HEADERS = {
  'content-security-policy': CONSOLE_CSP,
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'same-origin',
};

/** Paths the API, the MLflow UI and the probes own: an unknown one is their 404, never the console's page. */
const NOT_CONSOLE = /^\/(v1|api|ajax-api|mlflow|get-artifact|graphql|downloads|openapi\.json|alive|ready|metrics)(\/|$)/;

/** The console's build: server.console_dir, else the one the bootstrap built, or null when there is none. */
export function consoleBuildDir(configured: string | undefined, bootstrap: Pick<Bootstrap, 'console'>): string | null {
  const dir = configured ?? bootstrap.console;
  return dir && existsSync(join(dir, 'index.html')) ? dir : null;
}

/**
 * Serves the build's assets and returns the page handler for paths no route answered (the app's notFound calls
 * it): index.html for a GET of a console path, else null.
 */
export function consoleRoutes(app: Hono<AppEnv>, buildDir: string | null): (c: Context<AppEnv>) => Promise<Response | null> {
  if (!buildDir) return async () => null;
  // Vite names every asset by its content's hash: a changed file is a new URL, so the old one may be kept forever.
  const file = staticFiles(buildDir, (relative) => (relative.startsWith('assets/') ? 'public, max-age=31536000, immutable' : 'no-cache'));
  app.get('/assets/*', async (c) => (await file(decodeURIComponent(c.req.path.slice(1)), SECURITY_HEADERS)) ?? c.notFound());
  return async (c) => {
    if ((c.req.method !== 'GET' && c.req.method !== 'HEAD') || NOT_CONSOLE.test(c.req.path) || c.req.path.startsWith('/assets/')) return null;
    return file('index.html', SECURITY_HEADERS);
  };
}

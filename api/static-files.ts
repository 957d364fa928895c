// Files of a static build directory (the MLflow UI's, the console's) as responses, with paths that cannot leave it.
import { readFile } from 'node:fs/promises';
import { join, normalize, sep } from 'node:path';

const TYPES: Record<string, string> = {
  html: 'text/html; charset=utf-8',
  js: 'text/javascript; charset=utf-8',
  css: 'text/css; charset=utf-8',
  json: 'application/json',
  map: 'application/json',
  svg: 'image/svg+xml',
  png: 'image/png',
  ico: 'image/x-icon',
  woff: 'font/woff',
  woff2: 'font/woff2',
  ttf: 'font/ttf',
  txt: 'text/plain; charset=utf-8',
};

/** A file of the build by its path relative to the build (already URL-decoded), or null when it is not one. */
export type StaticFile = (relative: string, headers?: Record<string, string>) => Promise<Response | null>;

/**
 * Reads files under `buildDir` only: a path that normalizes outside it (`..`, an absolute path) or names no
 * readable file answers null, and the caller answers its own 404. `cacheControl` picks the caching per path.
 */
export function staticFiles(buildDir: string, cacheControl: (relative: string) => string): StaticFile {
  const root = normalize(buildDir) + sep;
  return async (relative, headers = {}) => {
    if (relative.includes('\0')) return null;
    const path = normalize(join(root, relative));
    if (!path.startsWith(root)) return null;
    try {
      const body = await readFile(path);
      const ext = path.slice(path.lastIndexOf('.') + 1).toLowerCase();
      return new Response(body, { headers: { 'content-type': TYPES[ext] ?? 'application/octet-stream', 'cache-control': cacheControl(relative), ...headers } });
    } catch {
      return null;
    }
  };
}

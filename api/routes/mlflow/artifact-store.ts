// The artifact area shared by the MLflow artifact proxy, logged models and the /v1 run artifact routes: objects
// in the checkpoints bucket, catalogued in artifact_objects. Proxy path P is object key `experiments/P`, and a
// run whose artifact URI lies in the bucket keeps its artifacts under that URI's key. Uploads stream through a
// temporary file (hashing on the way) and downloads stream from the store: no file is ever held in memory.
import { randomUUID } from 'node:crypto';
import { writeMeasured } from '../../../lib/hash.js';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { Context } from 'hono';
import type { Db } from '../../../db/client.js';
import type { ApiDeps, AppEnv } from '../../deps.js';
import { ApiError, invalid } from '../../errors.js';
import { artifactRootUri } from '../../../lib/object-store.js';
import { checkLocation, LocationError } from '../../../lib/locations.js';
import {
  artifactDirectoryExists,
  artifactObjectOf,
  deleteArtifactObjects,
  existingArtifactKeys,
  foreignArtifactsUnder,
  listArtifactChildren,
  recordArtifactObject,
} from '../../../db/repo/artifacts.js';
import type { FileInfo } from '../../../contracts/mlflow-artifacts.js';

export const PROXY_SCHEME = 'mlflow-artifacts:';
const INVALID_PATH = 'Invalid path';

/**
 * MLflow's validate_path_is_safe, by checkLocation: a relative path with no `..` segment at any depth of decoding,
 * no `%2f` inside a segment, no backslash (MLflow refuses it on Windows; we refuse it everywhere), no drive letter,
 * no control characters, no NFKC look-alike of `.` or `/`, and no `#`. Returns the decoded path with empty and `.`
 * segments dropped ('' is the root). Refusals say MLflow's "Invalid path", which names the field `path`.
 */
export function safeArtifactPath(raw: string): string {
  let path: string;
  try {
    path = checkLocation(raw, { field: 'path', accept: ['relative'], allowEmpty: true }).path;
  } catch (err) {
    if (err instanceof LocationError) throw invalid(INVALID_PATH);
    throw err;
  }
  if (path.includes('#')) throw invalid(INVALID_PATH);
  return path;
}

/**
 * A model version's source (`runs:/`, `models:/`, `mlflow-artifacts:`, a URI or a path), checked as its readers
 * will see it. A `..` at any depth of decoding gets MLflow's own message; other refusals keep its opening words.
 */
export function checkVersionSource(source: string): void {
  try {
    checkLocation(source, { field: 'source', accept: ['relative', 'absolute', 'uri'], allowEmpty: true });
  } catch (err) {
    if (!(err instanceof LocationError)) throw err;
    throw invalid(`Invalid model version source: '${source}'. ${err.escapes ? 'Relative paths are not allowed.' : `It ${err.problem}.`}`);
  }
}

/**
 * The path after `anchor` in the request target as the client sent it. Node's URL parsing resolves `..` and
 * `%2E%2E` before routing, which would hide a traversal attempt, so the raw target is read when there is one.
 */
export function rawPathAfter(c: Context<AppEnv>, anchor: string): string {
  const raw = (c.env as { incoming?: { url?: string } } | undefined)?.incoming?.url ?? new URL(c.req.url).pathname;
  const pathname = raw.split('?')[0]!;
  const at = pathname.indexOf(anchor);
  return at < 0 ? '' : pathname.slice(at + anchor.length);
}

/** The object key of a stored artifact URI, when it lies in this server's artifact bucket (else null). */
export function keyOfUri(deps: Pick<ApiDeps, 'config' | 'home'>, uri: string): string | null {
  const root = `${artifactRootUri(deps)}/`;
  const rest = uri.startsWith(PROXY_SCHEME) ? uri.slice(PROXY_SCHEME.length).replace(/^\/+/, '') : uri.startsWith(root) ? uri.slice(root.length) : null;
  if (rest === null) return null;
  // A key that climbs out once decoded (`%2e%2e`) is no key of ours: the store would resolve it elsewhere.
  const key = decodedKey(rest);
  return key === null ? null : uri.startsWith(PROXY_SCHEME) ? `experiments/${key}` : key;
}

/** A key after checkLocation (decoded, empty segments dropped), or null when it is refused. */
function decodedKey(rest: string): string | null {
  try {
    return checkLocation(rest, { field: 'key', accept: ['relative'], allowEmpty: true }).path;
  } catch (err) {
    if (err instanceof LocationError) return null;
    throw err;
  }
}

/** An experiment's artifact location as MLflow clients see it: the proxy URI when it lies in our bucket. */
export function wireExperimentLocation(stored: string, wireExperimentId: string): string {
  return /^(file|s3):\/\//.test(stored) && stored.endsWith(`/experiments/${wireExperimentId}`) ? `${PROXY_SCHEME}/${wireExperimentId}` : stored;
}

/** A run's artifact URI as MLflow clients see it (`mlflow-artifacts:/<exp>/<run>/artifacts`). */
export function wireRunArtifactUri(stored: string, wireExperimentId: string, runId: string): string {
  const tail = `${wireExperimentId}/${runId}/artifacts`;
  return /^(file|s3):\/\//.test(stored) && stored.endsWith(`/experiments/${tail}`) ? `${PROXY_SCHEME}/${tail}` : stored;
}

const joinKey = (...parts: string[]): string => parts.filter((p) => p !== '').join('/');

/** MLflow's TEXT_EXTENSIONS: served as text/plain (MLmodel and MLproject have no extension and count by name). */
const TEXT_EXTENSIONS = new Set(
  'txt log err cfg conf cnf cf ini properties prop hocon toml yaml yml xml json js py py3 csv tsv md rst mlmodel mlproject'.split(' '),
);
/**
 * Python's mimetypes table for the files models and runs hold. HTML and SVG are served as text/plain: MLflow sends
 * them as text/html and image/svg+xml, which a browser opening the link may render; as attachments with nosniff
 * that is harmless, but plain text is safer still.
 */
const CONTENT_TYPES: Record<string, string> = {
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  bmp: 'image/bmp',
  tif: 'image/tiff',
  tiff: 'image/tiff',
  webp: 'image/webp',
  ico: 'image/vnd.microsoft.icon',
  pdf: 'application/pdf',
  zip: 'application/zip',
  tar: 'application/x-tar',
  mp4: 'video/mp4',
  mp3: 'audio/mpeg',
  wav: 'audio/x-wav',
  html: 'text/plain',
  htm: 'text/plain',
  svg: 'text/plain',
};

/** MLflow's _guess_mime_type: text by extension (or by the whole name when it has none), else mimetypes, else binary. */
export function artifactContentType(name: string): string {
  const dot = name.lastIndexOf('.');
  const ext = dot > 0 ? name.slice(dot + 1) : name;
  if (TEXT_EXTENSIONS.has(ext.toLowerCase())) return 'text/plain';
  return (dot > 0 && CONTENT_TYPES[ext.toLowerCase()]) || 'application/octet-stream';
}

/** `attachment; filename=...` as Flask's send_file writes it: bare when a token, quoted otherwise, RFC 5987 for non-ASCII. */
export function attachmentDisposition(name: string): string {
  if (/^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/.test(name)) return `attachment; filename=${name}`;
  const ascii = name.replace(/[^\x20-\x7e]/g, '_').replace(/["\\]/g, '\\$&');
  const extended = /[^\x20-\x7e]/.test(name) ? `; filename*=UTF-8''${encodeURIComponent(name)}` : '';
  return `attachment; filename="${ascii}"${extended}`;
}

export interface StoredArtifact {
  key: string;
  sizeBytes: number;
  sha256: string;
}

/** Writes the audit row of an artifact change in the transaction of its catalogue change. */
export type AuditHook = (tx: Db, what: Record<string, unknown>) => Promise<void>;

/**
 * A path that holds another organization's objects is answered as one that does not exist, so the answer does not
 * say whose it is; it is still never written or deleted (object keys are shared by path across organizations).
 */
const notFound = (key: string): ApiError => new ApiError('RESOURCE_DOES_NOT_EXIST', `No such artifact: '${key}'`);

export function artifactArea(deps: ApiDeps) {
  const bucket = deps.config.storage.buckets.checkpoints;
  const uriOf = (key: string): string => `${artifactRootUri(deps)}/${key}`;

  /**
   * Streams a request body into the store at `key` for the caller's organization. The catalogue row that makes
   * the object exist and `audited`'s audit row commit together, after the bytes are stored: a transaction is
   * not held open while a body streams, and a failed upload leaves neither row.
   */
  async function put(organizationId: string, key: string, body: ReadableStream<Uint8Array> | null, audited: AuditHook): Promise<StoredArtifact> {
    const existing = await artifactObjectOf(deps.db, key);
    if (existing && existing.organizationId !== organizationId) throw notFound(key);
    // A path is a file or a directory, never both: refuse a file over a directory or under a file.
    if (!existing && (await artifactDirectoryExists(deps.db, key))) throw invalid(`Artifact path refers to a directory, not a file: '${key}'`);
    const parts = key.split('/');
    const [fileAbove] = await existingArtifactKeys(deps.db, parts.slice(1, -1).map((_, i) => parts.slice(0, i + 2).join('/')));
    if (fileAbove) throw invalid(`Artifact path '${key}' lies under '${fileAbove}', which is a file`);
    const tmpDir = join(deps.home, 'tmp');
    await mkdir(tmpDir, { recursive: true });
    const tmp = join(tmpDir, `artifact-${randomUUID()}`);
    try {
      const source = body ? Readable.fromWeb(body as unknown as WebReadableStream<Uint8Array>) : Readable.from([]);
      const { sha256, size_bytes: size } = await writeMeasured(source, tmp);
      await deps.store.putFile(bucket, key, tmp, sha256);
      await deps.db.transaction(async (tx) => {
        if (!(await recordArtifactObject(tx as unknown as Db, { key, organizationId, sizeBytes: size, sha256 })))
          throw notFound(key);
        await audited(tx as unknown as Db, { key, sizeBytes: size, sha256 });
      });
      return { key, sizeBytes: size, sha256 };
    } finally {
      await rm(tmp, { force: true });
    }
  }

  /** A streamed download of one file, or RESOURCE_DOES_NOT_EXIST naming `shownPath`. */
  async function download(organizationId: string, key: string, shownPath: string): Promise<Response> {
    const row = await artifactObjectOf(deps.db, key);
    if (!row || row.organizationId !== organizationId) {
      const isDir = (await listArtifactChildren(deps.db, organizationId, key)).length > 0;
      if (isDir) throw invalid(`Artifact path refers to a directory, not a file: '${shownPath}'`);
      throw new ApiError('RESOURCE_DOES_NOT_EXIST', `No such artifact: '${shownPath}'`);
    }
    const stream = await deps.store.read(uriOf(key));
    const name = key.split('/').pop()!;
    return new Response(Readable.toWeb(stream as Readable) as unknown as ReadableStream, {
      status: 200,
      headers: {
        'content-type': artifactContentType(name),
        'content-length': String(row.sizeBytes),
        'content-disposition': attachmentDisposition(name),
        'x-content-type-options': 'nosniff',
      },
    });
  }

  /** The immediate children of directory `dirKey`; paths are `shownPrefix/<name>`. */
  async function list(organizationId: string, dirKey: string, shownPrefix: string): Promise<FileInfo[]> {
    const children = await listArtifactChildren(deps.db, organizationId, dirKey);
    return children.map((ch) => ({
      path: joinKey(shownPrefix, ch.name),
      is_dir: ch.isDir,
      ...(ch.isDir ? {} : { file_size: ch.sizeBytes ?? 0 }),
    }));
  }

  /**
   * Deletes a file or a whole directory of the caller's organization: the catalogue rows and the audit row in
   * one transaction, then the objects (an object without its row is unreachable, so a failure there hides
   * nothing and loses nothing a caller could still read).
   */
  async function remove(organizationId: string, key: string, audited: AuditHook): Promise<void> {
    // The store deletes by prefix, so a directory holding another organization's objects is refused whole.
    if (await foreignArtifactsUnder(deps.db, organizationId, key)) throw notFound(key);
    const gone = await deps.db.transaction(async (tx) => {
      const n = await deleteArtifactObjects(tx as unknown as Db, organizationId, key);
      await audited(tx as unknown as Db, { key, removed: n });
      return n;
    });
    if (gone > 0) await deps.store.deletePrefix(bucket, key);
  }

  return { put, download, list, remove, uriOf };
}

export type ArtifactArea = ReturnType<typeof artifactArea>;

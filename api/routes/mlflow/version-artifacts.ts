// A registered version's files of record through the MLflow artifact proxy. Registration copies a version's files
// under its own prefix in the models bucket (api/model-files.ts), and `model-versions/get-download-uri` answers
// `mlflow-artifacts:/model-versions/<name>/<version>/<format>`, so that the stock client (load_model,
// download_artifacts of `models:/...`) downloads that copy through the proxy rather than the run's artifacts, which
// may have been overwritten since. The namespace is read-only and per organization: a version is looked up for the
// caller's organization, so another organization's caller gets 404 like for any version it cannot see.
import type { ApiDeps } from '../../deps.js';
import { ApiError, invalid } from '../../errors.js';
import { getVersion, type ModelVersionRow } from '../../../db/repo/models.js';
import { ModelManifestSchema } from '../../../contracts/models.js';
import type { FileInfo } from '../../../contracts/mlflow-artifacts.js';
import { downloadFormatFile, formatOf } from '../../model-files.js';
import { MANIFEST_FILE, orderFormats, recordedFormats } from '../../../lib/model-artifacts.js';
import { artifactContentType, attachmentDisposition, PROXY_SCHEME } from './artifact-store.js';

/** The first segment of proxy paths that name a version's files rather than an uploaded artifact. */
export const VERSION_FILES_ROOT = 'model-versions';

/** Whether a (safe, normalized) proxy path lies in the read-only namespace of version files. */
export function isVersionFilesPath(path: string): boolean {
  return path === VERSION_FILES_ROOT || path.startsWith(`${VERSION_FILES_ROOT}/`);
}

/**
 * The proxy URI of a ready version's files of record: its primary format (merged weights before an adapter before
 * a quantization). Null when it has none: registered from a location outside our store, or not ready.
 */
export function versionDownloadUri(name: string, v: ModelVersionRow): string | null {
  if (v.status !== 'ready') return null;
  const [primary] = orderFormats(Object.keys(recordedFormats(v.artifacts as Record<string, unknown>)));
  return primary ? `${PROXY_SCHEME}/${VERSION_FILES_ROOT}/${encodeURIComponent(name)}/${v.version}/${primary}` : null;
}

interface VersionPath {
  name: string;
  version: number;
  format: string | null;
  rest: string;
}

/** `model-versions/<name>/<version>[/<format>[/<path in the format>]]`; null above a version. */
function parseVersionPath(path: string): VersionPath | null {
  const [, name, version, format, ...rest] = path.split('/');
  if (!name || version === undefined) return null;
  if (!/^[1-9]\d*$/.test(version)) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `No such artifact: '${path}'`);
  return { name, version: Number(version), format: format ?? null, rest: rest.join('/') };
}

export function versionFilesArea(deps: ApiDeps) {
  async function versionAt(organizationId: string, path: string, where: VersionPath): Promise<ModelVersionRow> {
    const found = await getVersion(deps.db, organizationId, where.name, where.version);
    if (!found) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `No such artifact: '${path}'`);
    return found.version;
  }

  /** One file of a version's format, with the headers the proxy sends for any artifact. */
  async function download(organizationId: string, path: string): Promise<Response> {
    const where = parseVersionPath(path);
    if (!where || !where.format || !where.rest) throw invalid(`Artifact path refers to a directory, not a file: '${path}'`);
    const version = await versionAt(organizationId, path, where);
    const res = await downloadFormatFile(deps, { name: where.name, version, format: where.format, rawPath: where.rest });
    const file = where.rest.split('/').pop()!;
    return new Response(res.body, {
      status: 200,
      headers: { 'content-type': artifactContentType(file), 'content-disposition': attachmentDisposition(file), 'x-content-type-options': 'nosniff' },
    });
  }

  /** The immediate children of a directory of version files; paths relative to it, as the proxy lists. */
  async function list(organizationId: string, path: string): Promise<FileInfo[]> {
    const where = parseVersionPath(path);
    if (!where) return [];
    const version = await versionAt(organizationId, path, where);
    if (version.status !== 'ready') return [];
    if (!where.format) return Object.keys(recordedFormats(version.artifacts as Record<string, unknown>)).sort().map((format) => ({ path: format, is_dir: true }));
    const artifact = formatOf(where.name, version, where.format);
    const text = await deps.store.readText(artifact.manifest);
    const manifest = text === null ? null : ModelManifestSchema.safeParse(JSON.parse(text));
    if (!manifest?.success) throw new ApiError('INTERNAL_ERROR', `the manifest of ${where.name} v${where.version} ${where.format} is missing or unreadable`);
    const files = [...manifest.data.files, { path: MANIFEST_FILE, size_bytes: Buffer.byteLength(text!) }];
    return childrenOf(files, where.rest);
  }

  return { download, list };
}

/** Files and directories directly under `dir` among the listed files (sorted, as the proxy lists). */
function childrenOf(files: { path: string; size_bytes: number }[], dir: string): FileInfo[] {
  const prefix = dir ? `${dir}/` : '';
  const children = new Map<string, FileInfo>();
  for (const f of files) {
    if (!f.path.startsWith(prefix)) continue;
    const [head, ...below] = f.path.slice(prefix.length).split('/');
    children.set(head!, below.length ? { path: head!, is_dir: true } : { path: head!, is_dir: false, file_size: f.size_bytes });
  }
  return [...children.values()].sort((a, b) => (a.path < b.path ? -1 : 1));
}

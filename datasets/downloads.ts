// Download URLs for a dataset version's split files, valid for DOWNLOAD_URL_TTL_SECONDS and usable without a token.
// S3: a SigV4 pre-signed GET against storage.public_endpoint (the address users reach; storage.endpoint may be a
// cluster-internal one). The file store: a URL the API serves itself (GET /downloads/datasets/{id}/{split}), its
// expiry and target signed with an HMAC key of this installation, so a changed id, split or expiry is refused.
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { S3Client } from '@aws-sdk/client-s3';
import type { Config } from '../contracts/config.js';
import type { SplitName } from '../contracts/datasets.js';

/** The path the API serves signed file-store downloads under (outside /v1: the signature is the credential). */
export const signedDownloadPath = (datasetId: string, split: SplitName): string => `/downloads/datasets/${encodeURIComponent(datasetId)}/${split}`;

/** The installation's download-signing key, made on first use under HANZO_ML_HOME (readable by its owner only). */
export async function downloadSigningKey(home: string): Promise<Buffer> {
  const path = join(home, 'secrets', 'dataset-download.key');
  const existing = await readFile(path).catch(() => null);
  if (existing && existing.length >= 32) return existing;
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  // 'wx': two requests racing to make it keep the first one written.
  await writeFile(path, randomBytes(32), { flag: 'wx', mode: 0o600 }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'EEXIST') throw err;
  });
  await chmod(path, 0o600);
  return readFile(path);
}

const macOf = (key: Buffer, datasetId: string, split: SplitName, expires: number): string =>
  createHmac('sha256', key).update(`dataset-download\n${datasetId}\n${split}\n${expires}`).digest('hex');

/** The query of a signed file-store URL. */
export function signFileDownload(key: Buffer, datasetId: string, split: SplitName, expires: number): string {
  return `expires=${expires}&signature=${macOf(key, datasetId, split, expires)}`;
}

/** Why a signed file-store URL is refused, or null when it is valid now. */
export function checkFileDownload(key: Buffer, datasetId: string, split: SplitName, expires: number, signature: string, nowSeconds: number): string | null {
  const expected = Buffer.from(macOf(key, datasetId, split, expires), 'hex');
  const given = Buffer.from(signature, 'hex');
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return 'the signature does not match this URL';
  if (expires < nowSeconds) return `the URL expired at ${new Date(expires * 1000).toISOString()}`;
  return null;
}

/**
 * A SigV4 query-signed GET of s3://bucket/key (path-style, as the store addresses its buckets). Written here
 * rather than with @aws-sdk/s3-request-presigner, which the project does not carry: presigning is the documented
 * SigV4 algorithm over one canonical request, and the credentials are the store client's own.
 */
export async function presignS3Get(client: S3Client, storage: Config['storage'], uri: string, expiresSeconds: number, now = new Date()): Promise<string> {
  const m = /^s3:\/\/([^/]+)\/(.+)$/.exec(uri);
  if (!m) throw new Error(`not an s3:// object URI: ${uri}`);
  const endpoint = new URL(storage.public_endpoint ?? storage.endpoint!);
  const path = `${endpoint.pathname.replace(/\/$/, '')}/${rfc3986(m[1]!)}/${m[2]!.split('/').map(rfc3986).join('/')}`;
  return presignGet({ origin: `${endpoint.protocol}//${endpoint.host}`, host: endpoint.host, path, region: storage.region, credentials: await client.config.credentials(), expiresSeconds, now });
}

export interface PresignRequest {
  origin: string;
  host: string;
  /** already URI-encoded */
  path: string;
  region: string;
  credentials: { accessKeyId: string; secretAccessKey: string; sessionToken?: string };
  expiresSeconds: number;
  now: Date;
}

/** SigV4 query signing of a GET (AWS S3 API reference, "Authenticating Requests: Using Query Parameters"). */
export function presignGet(r: PresignRequest): string {
  const amzDate = r.now.toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '');
  const day = amzDate.slice(0, 8);
  const scope = `${day}/${r.region}/s3/aws4_request`;
  const query: Record<string, string> = {
    'X-Amz-Algorithm': 'AWS4-HMAC-SHA256',
    'X-Amz-Credential': `${r.credentials.accessKeyId}/${scope}`,
    'X-Amz-Date': amzDate,
    'X-Amz-Expires': String(r.expiresSeconds),
    'X-Amz-SignedHeaders': 'host',
    ...(r.credentials.sessionToken ? { 'X-Amz-Security-Token': r.credentials.sessionToken } : {}),
  };
  const canonicalQuery = Object.keys(query)
    .sort()
    .map((k) => `${rfc3986(k)}=${rfc3986(query[k]!)}`)
    .join('&');
  // A pre-signed URL signs no body: its payload hash is the literal UNSIGNED-PAYLOAD.
  const canonicalRequest = ['GET', r.path, canonicalQuery, `host:${r.host}`, '', 'host', 'UNSIGNED-PAYLOAD'].join('\n');
  const toSign = ['AWS4-HMAC-SHA256', amzDate, scope, createHash('sha256').update(canonicalRequest).digest('hex')].join('\n');
  const hmac = (k: Buffer | string, s: string): Buffer => createHmac('sha256', k).update(s).digest();
  const signingKey = hmac(hmac(hmac(hmac(`AWS4${r.credentials.secretAccessKey}`, day), r.region), 's3'), 'aws4_request');
  return `${r.origin}${r.path}?${canonicalQuery}&X-Amz-Signature=${hmac(signingKey, toSign).toString('hex')}`;
}

/** SigV4's URI encoding: RFC 3986 unreserved characters stay, everything else is percent-encoded. */
const rfc3986 = (s: string): string => encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);

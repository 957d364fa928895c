// Download URLs for a dataset version's split files, valid for DOWNLOAD_URL_TTL_SECONDS and usable without a token.
// S3: a SigV4 pre-signed GET (the SDK's presigner) against storage.public_endpoint (the address users reach; storage.endpoint may be a
// cluster-internal one). The file store: a URL the API serves itself (GET /downloads/datasets/{id}/{split}), its
// expiry and target signed with an HMAC key of this installation, so a changed id, split or expiry is refused.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
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
 * The client that signs download URLs: the store's own credentials and region, addressed at storage.public_endpoint
 * (path-style, as the store addresses its buckets), since a pre-signed URL's host is part of what it signs. Made once
 * per store client and endpoint: it only signs, never sends.
 */
const presigners = new WeakMap<S3Client, Map<string, S3Client>>();

/**
 * A SigV4 query-signed GET of s3://bucket/key, valid for expiresSeconds from `now`. The SDK is loaded on first use,
 * as the S3 store loads it: an installation on the file store never pays for it.
 */
export async function presignS3Get(client: S3Client, storage: Config['storage'], uri: string, expiresSeconds: number, now = new Date()): Promise<string> {
  const m = /^s3:\/\/([^/]+)\/(.+)$/.exec(uri);
  if (!m) throw new Error(`not an s3:// object URI: ${uri}`);
  const [s3, { getSignedUrl }] = await Promise.all([import('@aws-sdk/client-s3'), import('@aws-sdk/s3-request-presigner')]);
  const endpoint = storage.public_endpoint ?? storage.endpoint;
  if (!endpoint) throw new Error('storage.endpoint or storage.public_endpoint is needed to sign an S3 download URL');
  const byEndpoint = presigners.get(client) ?? new Map<string, S3Client>();
  presigners.set(client, byEndpoint);
  let presigner = byEndpoint.get(endpoint);
  if (!presigner) {
    presigner = new s3.S3Client({ endpoint, region: client.config.region, credentials: client.config.credentials, forcePathStyle: true });
    byEndpoint.set(endpoint, presigner);
  }
  return getSignedUrl(presigner, new s3.GetObjectCommand({ Bucket: m[1]!, Key: m[2]! }), { expiresIn: expiresSeconds, signingDate: now });
}

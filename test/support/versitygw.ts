// A second real S3-protocol server, versitygw (built by scripts/bootstrap.sh --tests), on a free loopback port over a
// fresh directory. Unlike moto_server it verifies SigV4 query-string signatures and X-Amz-Expires, so the tests of
// pre-signed URLs use it; moto stays for the tests that need IAM. Buckets are made by the store's own ensureBucket
// (the root account may create them).
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './ports.js';

export interface Versitygw {
  endpoint: string;
  region: string;
  credentials: { accessKeyId: string; secretAccessKey: string };
  /** HANZO_ML_STORAGE_* settings that point the object store at it */
  env: Record<string, string>;
  stop(): void;
}

const ACCESS_KEY = 'hanzo-test-root';
const SECRET_KEY = 'hanzo-test-root-secret';
const REGION = 'us-east-1';

export async function startVersitygw(bin: string | undefined): Promise<Versitygw> {
  if (!bin || !existsSync(bin)) throw new Error('versitygw is missing: run scripts/bootstrap.sh --tests');
  const dir = mkdtempSync(join(tmpdir(), 'versitygw-'));
  // Object metadata in a sidecar directory rather than extended attributes, which not every temporary filesystem has.
  for (const sub of ['data', 'meta']) mkdirSync(join(dir, sub));
  const port = await freePort();
  const endpoint = `http://127.0.0.1:${port}`;
  const args = ['--access', ACCESS_KEY, '--secret', SECRET_KEY, '--region', REGION, '--port', `127.0.0.1:${port}`, '--health', '/health', '--quiet', 'posix', '--sidecar', join(dir, 'meta'), join(dir, 'data')];
  // Its settings come from these flags only: versitygw also reads ROOT_ACCESS_KEY, VGW_* and the like from the environment.
  const child: ChildProcess = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { PATH: process.env.PATH ?? '', HOME: dir } });
  let stderr = '';
  child.stderr!.on('data', (b: Buffer) => (stderr = (stderr + b.toString()).slice(-4000)));
  const stop = () => {
    child.kill();
    rmSync(dir, { recursive: true, force: true });
  };
  for (let i = 0; !(await fetch(`${endpoint}/health`).then((r) => r.ok, () => false)); i++) {
    if (child.exitCode !== null || i > 150) {
      stop();
      throw new Error(`versitygw did not start (exit ${child.exitCode}): ${stderr.trim()}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return {
    endpoint,
    region: REGION,
    credentials: { accessKeyId: ACCESS_KEY, secretAccessKey: SECRET_KEY },
    env: { HANZO_ML_STORAGE_ENDPOINT: endpoint, HANZO_ML_STORAGE_ACCESS_KEY: ACCESS_KEY, HANZO_ML_STORAGE_SECRET_KEY: SECRET_KEY, HANZO_ML_STORAGE_REGION: REGION },
    stop,
  };
}

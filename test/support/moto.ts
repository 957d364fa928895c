// A real S3-protocol server (moto_server from the test venv) on a free port, for tests of the S3 object store.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { freePort } from './ports.js';

export interface Moto {
  endpoint: string;
  /** HANZO_ML_STORAGE_* settings that point the object store at it */
  env: Record<string, string>;
  stop(): void;
}

export async function startMoto(bin: string | undefined): Promise<Moto> {
  if (!bin || !existsSync(bin)) throw new Error('moto_server is missing: run scripts/bootstrap.sh --tests');
  const port = await freePort();
  const child: ChildProcess = spawn(bin, ['-H', '127.0.0.1', '-p', String(port)], { stdio: 'ignore' });
  const endpoint = `http://127.0.0.1:${port}`;
  for (let i = 0; !(await fetch(endpoint).then(() => true, () => false)); i++) {
    if (i > 150) throw new Error('moto_server did not start');
    await new Promise((r) => setTimeout(r, 200));
  }
  return { endpoint, env: { HANZO_ML_STORAGE_ENDPOINT: endpoint, HANZO_ML_STORAGE_ACCESS_KEY: 'test', HANZO_ML_STORAGE_SECRET_KEY: 'test' }, stop: () => child.kill() };
}

/**
 * Turns on moto's IAM enforcement (INITIAL_NO_AUTH_ACTION_COUNT = 0, through its /moto-api/reset-auth): from
 * now on every request is checked against the caller's IAM policies. Before it, requests set the store up freely.
 * The enforcing store of the tenancy tests is moto (already a test server, Apache-2.0; MinIO's server is AGPL):
 * it evaluates identity and role policies with object-level ARNs (bucket/org/*) for assumed-role credentials, but
 * not session policies, Condition blocks (s3:prefix) or credential expiry (moto 5.2.5, moto/iam/access_control.py).
 */
export async function enforceIam(endpoint: string): Promise<void> {
  const res = await fetch(`${endpoint}/moto-api/reset-auth`, { method: 'POST', body: '0' });
  if (!res.ok) throw new Error(`moto reset-auth answered ${res.status}`);
}

/** The python of moto_server's virtual environment, which has boto3 (for IAM set-up calls the tests make). */
export function motoPython(bin: string): string {
  return join(dirname(bin), 'python');
}

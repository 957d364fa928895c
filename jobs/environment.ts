// The environment a job runs with, besides its own secrets.
import { join } from 'node:path';
import { repoRoot, storageEncryption } from '../lib/config.js';
import type { JobDeps } from './deps.js';

/** The environment every job gets, wherever it runs (no secrets: those are per job). */
export function jobEnvironment(deps: Pick<JobDeps, 'config'>): Record<string, string> {
  const env: Record<string, string> = {
    HF_HUB_OFFLINE: '1',
    TRANSFORMERS_OFFLINE: '1',
    HF_DATASETS_OFFLINE: '1',
    OMP_NUM_THREADS: String(deps.config.trainer.threads),
    PYTHONUNBUFFERED: '1',
    HANZO_ML_STORAGE_REGION: deps.config.storage.region,
  };
  if (deps.config.storage.endpoint) env.HANZO_ML_STORAGE_ENDPOINT = deps.config.storage.endpoint;
  // The job's own writes (checkpoints, adapters, logs) are encrypted at rest as the control plane's are.
  const sse = storageEncryption(deps.config.storage);
  if (sse.mode !== 'none') env.HANZO_ML_STORAGE_ENCRYPTION = sse.mode;
  if (sse.kmsKeyId) env.HANZO_ML_STORAGE_KMS_KEY_ID = sse.kmsKeyId;
  return env;
}

/** Local jobs run the repository's trainer; pods run the image's (its PYTHONPATH is set there). */
export function localJobEnvironment(deps: Pick<JobDeps, 'bootstrap' | 'config'>): Record<string, string> {
  const env: Record<string, string> = { PYTHONPATH: join(repoRoot, 'trainer'), HANZO_ML_CANDLE: deps.config.trainer.candle ?? deps.bootstrap.candle };
  // A local job reaches an S3 server with the credentials of the configuration (a pod gets a Secret's).
  if (deps.config.storage.access_key) env.AWS_ACCESS_KEY_ID = deps.config.storage.access_key;
  if (deps.config.storage.secret_key) env.AWS_SECRET_ACCESS_KEY = deps.config.storage.secret_key;
  return env;
}

// Configuration: YAML file (HANZO_ML_CONFIG, else $HANZO_ML_HOME/config.yaml when present), then
// HANZO_ML_{SECTION}_{KEY} environment overrides, validated once with zod. Errors name the key.
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { ConfigSchema, type Config } from '../contracts/config.js';

export class ConfigError extends Error {}

/** Variables that are not configuration keys. */
const RESERVED_ENV = new Set(['HANZO_ML_HOME', 'HANZO_ML_CONFIG', 'HANZO_ML_CACHE', 'HANZO_ML_TOKEN', 'HANZO_ML_API_URL']);

export interface LoadedConfig {
  config: Config;
  home: string;
  bootstrap: Bootstrap;
}

export interface Bootstrap {
  python: string;
  temporal: string;
  candle: string;
  base_models_dir: string;
  base_model: string;
  pg_bin?: string;
  moto_server?: string;
  /** versitygw, an S3-protocol server that verifies pre-signed URLs (signature and expiry), for the download tests. */
  versitygw?: string;
  /** Python of the venv with the pinned mlflow client (test/mlflow-client.lock), for the compatibility test. */
  mlflow_python?: string;
  /** Python of the venv with the pinned openai client (test/openai-client.lock), for the fine-tuning compatibility test. */
  openai_python?: string;
  /** The MLflow UI's static build (from the pinned mlflow wheel), served read-only at /mlflow/. */
  mlflow_ui?: string;
  /** The web console's build (scripts/bootstrap.sh, keyed by the hash of console/ and the lock), served at /. */
  console?: string;
  /** Apache Kafka jars (test/kafka/pom.xml) for the event tests' broker. */
  kafka_libs?: string;
  /** pytest and its dependencies for MLflow's own server tests, put on PYTHONPATH beside mlflow_python. */
  mlflow_suite_pythonpath?: string;
}

export const repoRoot = fileURLToPath(new URL('..', import.meta.url));

export function loadConfig(env: NodeJS.ProcessEnv = process.env): LoadedConfig {
  const home = resolve(env.HANZO_ML_HOME ?? './.hanzo-ml');
  const file = env.HANZO_ML_CONFIG ?? resolve(home, 'config.yaml');
  const raw = readYaml(file, env.HANZO_ML_CONFIG !== undefined);
  applyEnvOverrides(raw, env);
  const parsed = ConfigSchema.safeParse(raw);
  if (!parsed.success) throw new ConfigError(describeIssues(parsed.error, existsSync(file) ? file : 'environment'));
  checkCombinations(parsed.data);
  return { config: parsed.data, home, bootstrap: readBootstrap() };
}

/** Settings that are each valid but cannot work together: refused at start-up, not at the first job. */
export function checkCombinations(config: Config): void {
  if (config.auth.console_client_id && !config.auth.iam_url)
    throw new ConfigError('invalid configuration:\n  auth.console_client_id (HANZO_ML_AUTH_CONSOLE_CLIENT_ID): the console signs in through an IAM; set auth.iam_url (HANZO_ML_AUTH_IAM_URL)');
  if (config.scheduler.executor === 'kubernetes' && !config.storage.endpoint)
    throw new ConfigError(
      'invalid configuration:\n  scheduler.executor (HANZO_ML_SCHEDULER_EXECUTOR): "kubernetes" needs an S3 object store that pods can reach; set storage.endpoint (HANZO_ML_STORAGE_ENDPOINT)',
    );
  // A pod gets no shared storage key: it reads and writes with its organization's role, assumed per job.
  if (config.scheduler.executor === 'kubernetes' && !config.storage.job_access.role_arn)
    throw new ConfigError(
      'invalid configuration:\n  storage.job_access.role_arn (HANZO_ML_STORAGE_JOB_ACCESS_ROLE_ARN): "kubernetes" jobs get object-store credentials of their organization\'s role only; set the role ARN with {organization}',
    );
  if (config.storage.job_access.role_arn && !config.storage.endpoint)
    throw new ConfigError('invalid configuration:\n  storage.job_access.role_arn (HANZO_ML_STORAGE_JOB_ACCESS_ROLE_ARN): set without storage.endpoint (HANZO_ML_STORAGE_ENDPOINT); file:// objects have no access to mint');
  // The file store's downloads are served by the API itself: a public S3 endpoint would sign for nothing.
  if (config.storage.public_endpoint && !config.storage.endpoint)
    throw new ConfigError('invalid configuration:\n  storage.public_endpoint (HANZO_ML_STORAGE_PUBLIC_ENDPOINT): set without storage.endpoint (HANZO_ML_STORAGE_ENDPOINT); file:// datasets are downloaded through the API');
  // An IAM token accepted without checking its signature is anyone's claim to be anyone.
  if (!config.auth.verify_tokens)
    throw new ConfigError('invalid configuration:\n  auth.verify_tokens (HANZO_ML_AUTH_VERIFY_TOKENS): false is not supported; IAM tokens are always verified against the issuer\'s JWKS');
  // An unsigned reload hook would let anyone who can reach the serving layer make it load whatever they name.
  if (config.promotion.webhook_url && !config.promotion.webhook_secret)
    throw new ConfigError('invalid configuration:\n  promotion.webhook_secret (HANZO_ML_PROMOTION_WEBHOOK_SECRET): required with promotion.webhook_url; the hook\'s body is signed with it');
  if (config.promotion.webhook_secret && !config.promotion.webhook_url)
    throw new ConfigError('invalid configuration:\n  promotion.webhook_secret (HANZO_ML_PROMOTION_WEBHOOK_SECRET): set without promotion.webhook_url (HANZO_ML_PROMOTION_WEBHOOK_URL), so nothing would be signed with it');
  // Private targets make every organization admin able to reach the servers on this network: a loopback server only.
  if (config.webhooks.allow_private_targets && !isLoopbackHost(config.server.host))
    throw new ConfigError(`invalid configuration:\n  webhooks.allow_private_targets (HANZO_ML_WEBHOOKS_ALLOW_PRIVATE_TARGETS): true is refused on a server reachable from other machines (server.host ${config.server.host}): organization admins could aim webhooks at private addresses`);
  checkTemporalTls(config.temporal);
  checkStorageEncryption(config.storage);
  checkIam(config);
}

/** A loopback address: only this machine's own programs reach a server listening there. */
export const isLoopbackHost = (host: string): boolean => /^(127\.\d+\.\d+\.\d+|::1|\[::1\]|localhost)$/.test(host);

/** IAM settings do nothing without an issuer; an exposed server must check that tokens were minted for it. */
function checkIam(config: Config): void {
  const a = config.auth;
  const refuse = (key: string, why: string): never => {
    throw new ConfigError(`invalid configuration:\n  auth.${key} (HANZO_ML_AUTH_${key.toUpperCase()}): ${why}`);
  };
  if (!a.iam_url) {
    if (a.jwks_url) refuse('jwks_url', 'needs auth.iam_url, the issuer its keys sign for');
    if (a.audience) refuse('audience', 'set without auth.iam_url, so no token would be checked against it');
    if (Object.keys(a.organizations).length) refuse('organizations', 'set without auth.iam_url, so no IAM organization would be mapped');
    return;
  }
  // Without an audience, a token the same IAM minted for any other application would be accepted here.
  if (!a.audience && !isLoopbackHost(config.server.host))
    refuse('audience', `required with auth.iam_url on a server reachable from other machines (server.host ${config.server.host}): the "aud" IAM puts in tokens for this API`);
}

/** TLS to Temporal: a client certificate comes with its key, TLS files only with tls: true, and a cluster to use them on. */
function checkTemporalTls(t: Config['temporal']): void {
  const refuse = (key: string, why: string): never => {
    throw new ConfigError(`invalid configuration:\n  temporal.${key} (HANZO_ML_TEMPORAL_${key.toUpperCase()}): ${why}`);
  };
  if (Boolean(t.tls_cert) !== Boolean(t.tls_key)) refuse(t.tls_cert ? 'tls_key' : 'tls_cert', 'a client certificate needs both tls_cert and tls_key');
  const files = (['tls_cert', 'tls_key', 'tls_ca', 'tls_server_name'] as const).filter((k) => t[k]);
  if (!t.tls && files.length) refuse(files[0]!, 'set without temporal.tls: true, so the connection would not use it');
  if (t.tls && !t.address) refuse('tls', 'needs temporal.address: the embedded dev server speaks plaintext');
}

/** Server-side encryption is a property of an S3 store and its key; the file store has neither. */
function checkStorageEncryption(s: Config['storage']): void {
  const refuse = (key: string, why: string): never => {
    throw new ConfigError(`invalid configuration:\n  storage.${key} (HANZO_ML_STORAGE_${key.toUpperCase()}): ${why}`);
  };
  if (!s.endpoint && s.encryption && s.encryption !== 'none')
    refuse('encryption', `"${s.encryption}" needs an S3 store (storage.endpoint): the file store writes plain files; encrypt the disk under HANZO_ML_HOME instead`);
  if (s.encryption === 'sse-kms' && !s.kms_key_id) refuse('kms_key_id', 'required with encryption: sse-kms (the key objects are encrypted with)');
  if (s.kms_key_id && s.encryption !== 'sse-kms') refuse('kms_key_id', 'set without storage.encryption: sse-kms, so no object would use it');
}

/** The server-side encryption objects are written with: none for the file store, sse-s3 unless configured. */
export function storageEncryption(s: Pick<Config['storage'], 'endpoint' | 'encryption' | 'kms_key_id'>): { mode: 'sse-s3' | 'sse-kms' | 'none'; kmsKeyId?: string } {
  if (!s.endpoint) return { mode: 'none' };
  const mode = s.encryption ?? 'sse-s3';
  return mode === 'sse-kms' ? { mode, kmsKeyId: s.kms_key_id! } : { mode };
}

function readYaml(file: string, required: boolean): Record<string, unknown> {
  if (!existsSync(file)) {
    if (required) throw new ConfigError(`config file ${file} does not exist (HANZO_ML_CONFIG)`);
    return {};
  }
  let doc: unknown;
  try {
    doc = parseYaml(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new ConfigError(`${file}: not valid YAML: ${(err as Error).message}`);
  }
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== 'object' || Array.isArray(doc)) throw new ConfigError(`${file}: expected a mapping of sections`);
  return doc as Record<string, unknown>;
}

/** Every leaf key path of the schema, e.g. ["storage","buckets","models"], keyed by its env-var spelling. */
function envKeyPaths(): Map<string, string[]> {
  const out = new Map<string, string[]>();
  const walk = (schema: z.ZodType, path: string[]): void => {
    const shape = objectShape(schema);
    if (!shape) {
      out.set('HANZO_ML_' + path.join('_').toUpperCase(), path);
      return;
    }
    for (const [key, child] of Object.entries(shape)) walk(child as z.ZodType, [...path, key]);
  };
  walk(ConfigSchema, []);
  return out;
}

function objectShape(schema: z.ZodType): Record<string, unknown> | null {
  let s: z.ZodType = schema;
  // Unwrap defaults/prefaults/optionals down to the object, if any.
  for (let i = 0; i < 5; i++) {
    if (s instanceof z.ZodObject) return s.shape as Record<string, unknown>;
    const inner = (s as unknown as { def: { innerType?: z.ZodType } }).def.innerType;
    if (!inner) return null;
    s = inner;
  }
  return null;
}

function applyEnvOverrides(raw: Record<string, unknown>, env: NodeJS.ProcessEnv): void {
  const paths = envKeyPaths();
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith('HANZO_ML_') || RESERVED_ENV.has(name) || value === undefined) continue;
    const path = paths.get(name);
    if (!path) throw new ConfigError(`${name}: unknown configuration key (expected HANZO_ML_{SECTION}_{KEY}, e.g. HANZO_ML_SERVER_PORT)`);
    setPath(raw, path, ['gpu_types', 'source_allow_list'].includes(path.at(-1)!) ? value.split(',').filter(Boolean) : value);
  }
}

function setPath(obj: Record<string, unknown>, path: string[], value: unknown): void {
  let cur = obj;
  for (const key of path.slice(0, -1)) {
    const next = cur[key];
    if (typeof next !== 'object' || next === null) cur[key] = {};
    cur = cur[key] as Record<string, unknown>;
  }
  cur[path.at(-1)!] = value;
}

function describeIssues(error: z.ZodError, source: string): string {
  const lines = error.issues.map((i) => {
    const key = i.path.join('.');
    const env = 'HANZO_ML_' + i.path.join('_').toUpperCase();
    return `  ${key || '(root)'} (${env}): ${i.message}`;
  });
  return `invalid configuration (${source}):\n${lines.join('\n')}`;
}

/**
 * What scripts/bootstrap.sh installed. An API or worker image has no bootstrap (it runs no trainer and no
 * embedded Temporal): there every path is empty, and whatever needs one says so (requireBootstrapped).
 */
function readBootstrap(): Bootstrap {
  const file = resolve(repoRoot, '.bootstrap.json');
  if (!existsSync(file)) return { python: '', temporal: '', candle: '', base_models_dir: '', base_model: '' };
  return JSON.parse(readFileSync(file, 'utf8')) as Bootstrap;
}

/** The Python that runs the trainer's modules here: trainer.python (the control-plane image sets it), else the bootstrap's venv. */
export function trainerPython(deps: { config: Pick<Config, 'trainer'>; bootstrap: Pick<Bootstrap, 'python'> }): string {
  return deps.config.trainer.python ?? deps.bootstrap.python;
}

export function requireBootstrapped(bootstrap: Bootstrap, what: string): void {
  if (!bootstrap.python) throw new ConfigError(`${resolve(repoRoot, '.bootstrap.json')} is missing: ${what} needs scripts/bootstrap.sh to have run`);
}

/** "90s" | "10m" | "72h" | "2d" | "500ms" -> milliseconds. */
export function durationMs(text: string): number {
  const m = /^(\d+)(ms|s|m|h|d)$/.exec(text);
  if (!m) throw new ConfigError(`bad duration "${text}"`);
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] as 'ms'];
  return Number(m[1]) * unit;
}

// The configuration file of spec 000 ("Configuration"), every key overridable by HANZO_ML_{SECTION}_{KEY}.
// Parsed once at start-up (lib/config.ts); an unknown or malformed key is a start-up error naming the key.
import { z } from 'zod';

// Environment overrides arrive as strings: "false" must mean false (z.coerce.boolean would say true).
const bool = z.preprocess((v) => (v === 'true' ? true : v === 'false' ? false : v), z.boolean());
/**
 * The image names scripts/images.sh builds and tags (podman stores them as localhost/hanzoai/...), and the
 * deployment manifests run: the repository, then the product version (package.json).
 */
export const CONTROL_PLANE_IMAGE = 'hanzoai/ml:0.1.0';
export const TRAINER_IMAGE = 'hanzoai/ml-trainer:0.1.0';

const duration = z.string().regex(/^\d+(ms|s|m|h|d)$/, 'expected a duration such as "90s", "10m", "72h"');
const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
/** A duration's milliseconds, for bounds checked in the schema (the duration regex has passed). */
const msOf = (d: string): number => Number(/^\d+/.exec(d)?.[0] ?? NaN) * UNIT_MS[(/[a-z]+$/.exec(d)?.[0] ?? 'ms') as keyof typeof UNIT_MS];
/** Seconds of a duration. */
const durationSeconds = (d: string): number => msOf(d) / 1000;

/** The JWS algorithms an IAM token may use: asymmetric ones only (a public JWKS verifies them, nobody shares a secret). */
export const JWT_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'] as const;
const JWT_ALGORITHM_ERROR = `expected an asymmetric JWS algorithm (${JWT_ALGORITHMS.join(', ')}): HS* would let whoever holds the shared secret, or reads the public key as one, mint tokens, and "none" signs nothing`;
/** A tenant id, as POST /v1/organizations accepts it. */
const tenantId = z
  .string()
  .max(64)
  .regex(/^[a-z0-9][a-z0-9-]*$/, 'a tenant id: lower-case letters, digits and "-"');
/** "a,b" from the environment -> ["a", "b"]; a YAML list passes as is. */
const commaList = (v: unknown): unknown => (typeof v === 'string' ? v.split(',').map((s) => s.trim()).filter(Boolean) : v);
/** "k=v,k2=v2" from the environment -> {k: v, k2: v2}; a YAML mapping passes as is. */
const commaPairs = (v: unknown): unknown => {
  if (typeof v !== 'string') return v;
  const pairs = v.split(',').map((s) => s.trim()).filter(Boolean).map((s) => s.split('=').map((x) => x.trim()));
  return pairs.every((p) => p.length === 2 && p[0] && p[1]) ? Object.fromEntries(pairs) : v;
};
/** S3's bounds on a part of a multipart upload or copy (the last part may be smaller). */
export const MIN_PART_BYTES = 5 * 1024 * 1024;
export const MAX_PART_BYTES = 5 * 1024 * 1024 * 1024;

/** Job priorities, highest first: each is a Kueue WorkloadPriorityClass (jobs/queue/kueue-objects.ts). */
export const JOB_PRIORITIES = ['high', 'medium', 'low'] as const;
export const JobPrioritySchema = z.enum(JOB_PRIORITIES);
export type JobPriority = z.infer<typeof JobPrioritySchema>;

/**
 * One organization's share of the cluster (spec 000, "GPU Scheduling"). max_gpus is its nominal quota in the
 * cohort: guaranteed, lent while idle, reclaimed when it asks. A number applies to each of scheduler.gpu_types;
 * a mapping sets it per type.
 */
export const OrganizationQuotaSchema = z.strictObject({
  max_gpus: z.union([z.number().int().min(0), z.record(z.string(), z.number().int().min(0))]),
  max_concurrent_jobs: z.number().int().positive(),
  priority: JobPrioritySchema.default('medium').describe('the priority of its jobs unless a job asks for a lower one'),
  preemptible: z.boolean().default(false).describe('true: its jobs may borrow idle quota and be preempted to give it back'),
  weight: z.number().positive().default(1).describe('its weight in fair sharing of borrowed capacity (Kueue ClusterQueue fairSharing.weight)'),
});
export type OrganizationQuota = z.infer<typeof OrganizationQuotaSchema>;

/** A per-type max_gpus must name configured gpu_types, and a per-type quota needs gpu_types at all. */
function checkQuotaGpuTypes(s: { gpu_types: string[]; quotas: Record<string, OrganizationQuota> }, ctx: z.RefinementCtx): void {
  for (const [org, quota] of Object.entries(s.quotas)) {
    if (typeof quota.max_gpus === 'number') continue;
    for (const type of Object.keys(quota.max_gpus))
      if (!s.gpu_types.includes(type))
        ctx.addIssue({ code: 'custom', path: ['quotas', org, 'max_gpus', type], message: `unknown gpu_type "${type}": scheduler.gpu_types is [${s.gpu_types.join(', ')}]` });
  }
}

/** A GPU price names a configured gpu_type: a misspelt key would price every job of that type at the default. */
function checkGpuPrices(s: { gpu_types: string[]; gpu_prices_usd: Record<string, number> }, ctx: z.RefinementCtx): void {
  for (const type of Object.keys(s.gpu_prices_usd))
    if (!s.gpu_types.includes(type))
      ctx.addIssue({ code: 'custom', path: ['gpu_prices_usd', type], message: `unknown gpu_type "${type}": scheduler.gpu_types is [${s.gpu_types.join(', ')}]` });
}

/** An organization id usable in Kubernetes names: its namespace is <scheduler.namespace>-<id>. */
const OrganizationId = z.string().regex(/^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$/, 'an organization id usable in Kubernetes names (lower-case letters, digits, "-")');
const ServiceAccountRef = z.string().regex(/^[a-z0-9][a-z0-9-]*\/[a-z0-9][a-z0-9.-]*$/, 'expected "namespace/name" of a ServiceAccount');

/** The name of the scheduler.images entry a job runs when hardware.image names none. */
export const DEFAULT_IMAGE_NAME = 'trainer';
const IMAGE_NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;
/** An image reference pinned by its content: repository@sha256:<64 hex>. */
const PINNED_IMAGE = /^[^\s@]+@sha256:[a-f0-9]{64}$/;

/** HANZO_ML_SCHEDULER_IMAGES arrives as a string: "name=ref,name=ref". */
function imagesFromEnv(v: unknown): unknown {
  if (typeof v !== 'string') return v;
  return Object.fromEntries(v.split(',').filter(Boolean).map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]));
}

/**
 * Jobs run only images an operator listed, each pinned by digest: a tag can be moved to other content after the
 * operator checked it. The one tag-only entry accepted is the product's own trainer image at this version
 * (TRAINER_IMAGE, scripts/images.sh builds it into local storage, where it has no registry digest until pushed):
 * it is the release the operator installs, as trusted as the control-plane image beside it.
 */
function checkImages(s: { executor: string; images: Record<string, string> }, ctx: z.RefinementCtx): void {
  if (!s.images[DEFAULT_IMAGE_NAME]) ctx.addIssue({ code: 'custom', path: ['images'], message: `needs an entry "${DEFAULT_IMAGE_NAME}": the image of jobs that name none` });
  if (s.executor !== 'kubernetes') return;
  for (const [name, ref] of Object.entries(s.images))
    if (!PINNED_IMAGE.test(ref) && ref !== TRAINER_IMAGE && ref !== `localhost/${TRAINER_IMAGE}`)
      ctx.addIssue({ code: 'custom', path: ['images', name], message: `"${ref}" is not pinned by digest: expected repository@sha256:<64 hex digits> (a tag can be moved to other content)` });
}

/** The image reference of an allow-listed name, or null when scheduler.images has no such name. */
export function allowedImage(images: Record<string, string>, name: string | null): string | null {
  return Object.hasOwn(images, name ?? DEFAULT_IMAGE_NAME) ? images[name ?? DEFAULT_IMAGE_NAME]! : null;
}

/**
 * Egress the job NetworkPolicy allows to one service: addresses (cidrs) or pods (namespace and/or pod_labels), on
 * ports (unset: the port of its URL).
 */
export const EgressPeerSchema = z.strictObject({
  cidrs: z.array(z.string().regex(/^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/, 'an IPv4 CIDR such as 10.0.0.0/16')).default([]),
  namespace: z.string().optional().describe('pods of this namespace'),
  pod_labels: z.record(z.string(), z.string()).optional().describe('pods with these labels'),
  ports: z.array(z.number().int().min(1).max(65535)).optional(),
});
export type EgressPeer = z.infer<typeof EgressPeerSchema>;

export const ConfigSchema = z.strictObject({
  server: z
    .strictObject({
      host: z.string().default('127.0.0.1'),
      port: z.coerce.number().int().min(1).max(65535).default(8057),
      workers: z.coerce.number().int().positive().default(4),
      public_url: z.string().url().optional().describe('URL trainers use to reach this API; default http://host:port'),
      mlflow_ui_dir: z
        .string()
        .optional()
        .describe('the MLflow UI\'s static build, served at /mlflow/; unset: the build in the mlflow package beside the bootstrap\'s mlflow client (the control-plane image sets it)'),
      console_dir: z
        .string()
        .optional()
        .describe('the web console\'s build (index.html and assets/), served at /; unset: the one scripts/bootstrap.sh built (the control-plane image sets it)'),
    })
    .prefault({}),
  database: z
    .strictObject({
      url: z.string().optional().describe('postgres://... ; unset means embedded PGlite in HANZO_ML_HOME/pg'),
    })
    .prefault({}),
  storage: z
    .strictObject({
      endpoint: z.string().optional().describe('S3 endpoint URL; unset means file:// under HANZO_ML_HOME/objects'),
      public_endpoint: z
        .string()
        .url()
        .optional()
        .describe('s3: the endpoint that dataset download URLs are signed for, as users reach it (storage.endpoint may be an address inside the cluster); unset: storage.endpoint. The file store serves downloads through the API instead'),
      access_key: z.string().optional(),
      secret_key: z.string().optional(),
      region: z.string().default('us-east-1'),
      multipart_threshold: z.coerce
        .number()
        .int()
        .min(MIN_PART_BYTES, 'at least 5 MiB (5242880): S3 refuses smaller parts')
        .max(MAX_PART_BYTES, 'at most 5 GiB (5368709120): the largest object S3 copies in one request')
        .default(64 * 1024 * 1024)
        .describe('s3: an object larger than this (bytes) is copied server-side in parts of this size (UploadPartCopy), a smaller one in one CopyObject; file:// always streams'),
      encryption: z
        .enum(['sse-s3', 'sse-kms', 'none'])
        .optional()
        .describe(
          's3: server-side encryption of every object written (ServerSideEncryption AES256, or aws:kms with kms_key_id); default sse-s3 with storage.endpoint; the file store cannot encrypt (see README, "Encryption at rest") and refuses sse-*',
        ),
      kms_key_id: z.string().min(1).optional().describe('s3: the KMS key (id or ARN) objects are encrypted with; only with encryption: sse-kms'),
      buckets: z
        .strictObject({
          datasets: z.string().default('hanzo-ml-datasets'),
          checkpoints: z.string().default('hanzo-ml-checkpoints'),
          models: z.string().default('hanzo-models'),
        })
        .prefault({}),
      job_access: z
        .strictObject({
          role_arn: z
            .string()
            .regex(/^arn:[^:]+:iam::[^:]*:role\/.*\{organization\}/, 'an IAM role ARN containing {organization}, e.g. arn:aws:iam::123456789012:role/hanzo-ml-jobs-{organization}')
            .optional()
            .describe('kubernetes: the role the worker assumes (STS AssumeRole, with storage.access_key) for each job, {organization} replaced by the job\'s organization; its policy grants that organization\'s prefixes only. A job pod gets these temporary credentials and no other key'),
          sts_endpoint: z.string().url().optional().describe('STS endpoint of the AssumeRole call; unset: storage.endpoint (MinIO, moto), or AWS STS when that is unset too'),
          duration: duration
            .refine((d) => msOf(d) >= 900_000 && msOf(d) <= 43_200_000, 'between 15m and 12h: the range STS grants')
            .default('12h')
            .describe('how long a job\'s credentials are valid after the job is prepared (STS DurationSeconds; the role\'s maximum session duration must allow it)'),
        })
        .prefault({}),
    })
    .prefault({}),
  stream: z
    .strictObject({
      brokers: z.string().optional().describe('Kafka brokers (host:port,...); unset keeps events in the outbox, readable as SSE at GET /v1/events'),
      topic_prefix: z.string().default('hanzo.ml'),
      client_id: z.string().default('hanzo-ml'),
      retention: duration.default('7d').describe('outbox rows older than this are deleted once published (without brokers: once older)'),
      relay_batch: z.coerce.number().int().positive().max(10_000).default(500).describe('outbox rows the relay publishes per round'),
    })
    .prefault({}),
  auth: z
    .strictObject({
      iam_url: z.string().url().optional().describe('Hanzo IAM issuer: bearer JWTs are verified against its JWKS (iss must equal it)'),
      jwks_url: z.string().url().optional().describe('JWKS of the issuer; default {iam_url}/.well-known/jwks'),
      audience: z
        .string()
        .min(1)
        .optional()
        .describe('required "aud" of IAM tokens; unset: not checked, which only a loopback-only server accepts (lib/config.ts)'),
      algorithms: z
        .preprocess(commaList, z.array(z.enum(JWT_ALGORITHMS, { error: JWT_ALGORITHM_ERROR })).min(1))
        .default(['RS256', 'ES256', 'EdDSA'])
        .describe('JWS algorithms IAM tokens may be signed with (comma-separated in the environment); asymmetric only, so neither a shared-secret HS* token nor an unsigned "alg: none" one is ever accepted'),
      clock_skew: duration
        .refine((d) => durationSeconds(d) <= 300, 'at most 5m: a larger skew keeps expired tokens alive')
        .default('60s')
        .describe('tolerance for the clocks of IAM and this server when checking "exp" (required) and "nbf"'),
      organizations: z
        .preprocess(commaPairs, z.record(z.string().min(1), tenantId, { error: 'expected a mapping of IAM organization to tenant id ("iam-acme=acme,..." in the environment)' }))
        .default({})
        .describe(
          'IAM organization (the token\'s "org" or "owner" claim) -> tenant id here ("iam-acme=acme,..." in the environment). A token of an organization not listed is refused (403): no claim can name a tenant, the operator organization included, unless the operator mapped it here',
        ),
      verify_tokens: bool.default(true).describe('false is refused at start-up: an unverified bearer token is no identity'),
      dev_token: z.string().min(8).default('hanzo-ml-dev-token').describe('token of the development organization'),
      dev_organization: z.string().min(1).default('dev'),
      anonymous_role: z
        .enum(['none', 'viewer', 'developer'])
        .optional()
        .describe('role of a request without a token, in the dev organization; default developer when the API listens on loopback only (as a local mlflow server), else none'),
      console_client_id: z
        .string()
        .min(1)
        .optional()
        .describe("the console's OIDC client id at the IAM (a public client: authorization code with PKCE, no secret); with auth.iam_url, the login page signs in through the IAM; its redirect URI is <server.public_url or the request's origin>/v1/session/oidc/callback"),
      session_secret: z
        .string()
        .min(32, 'expected at least 32 characters: it keys the console\'s session cookies')
        .optional()
        .describe('keys the console\'s session cookies (set it with HANZO_ML_AUTH_SESSION_SECRET from a Secret, not in the file); the same on every API replica, so a login made on one is valid on all. Unset: a key made once in HANZO_ML_HOME/secrets, right for one API process'),
      session_ttl: duration
        .refine((d) => durationSeconds(d) >= 60 && durationSeconds(d) <= 7 * 86400, 'between 1m and 7d')
        .default('12h')
        .describe('how long a console login (its HttpOnly session cookie) lasts; the token behind it is checked on every request, so revoking it ends the session at once'),
    })
    .prefault({}),
  limits: z
    .strictObject({
      max_body_bytes: z.coerce.number().int().positive().default(16 * 1024 * 1024).describe('largest JSON request body, counted while it streams'),
      max_upload_bytes: z.coerce.number().int().positive().default(20 * 1024 ** 3).describe('largest dataset or artifact upload'),
      max_processes: z.coerce.number().int().positive().default(8).describe('largest hardware.processes of a job'),
      max_nodes: z.coerce.number().int().positive().default(16).describe('largest hardware.nodes of a job'),
      min_schedule_interval: duration.default('15m').describe('shortest interval between two runs of a retraining schedule'),
      source_allow_list: z
        .array(z.string().min(1))
        .default([])
        .describe('URI prefixes (file:///data/, s3://shared-corpora/) any organization may read datasets and base models from, beside its own prefix'),
      graphql_max_depth: z.coerce.number().int().min(2).default(10).describe('deepest nesting of fields a GraphQL query may ask for (the MLflow UI\'s queries go 5 deep)'),
      graphql_max_cost: z.coerce
        .number()
        .int()
        .positive()
        .default(2500)
        .describe('most internal calls one GraphQL query may make, counted worst case before it runs (the UI\'s largest, SearchRuns over a default page of 1,000 runs, costs 2,001)'),
      event_streams_per_token: z.coerce.number().int().positive().default(8).describe('server-sent-event streams (GET /v1/events, /v1/stream, /v1/jobs/{id}/events and /v1/jobs/{id}/logs) one caller (organization and subject) may hold open at once; more answer 429'),
    })
    .prefault({}),
  scheduler: z
    .strictObject({
      executor: z.enum(['local', 'kubernetes']).default('local').describe('local: jobs are processes on the worker\'s machine; kubernetes: batch/v1 Jobs'),
      namespace: z
        .string()
        .regex(/^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?$/, 'a prefix of Kubernetes namespace names (at most 20 lower-case letters, digits, "-")')
        .default('hanzo-ml')
        .describe('kubernetes: the prefix of the job namespaces: each organization\'s jobs run in <namespace>-<organization>, made by hanzo-ml cluster apply'),
      images: z
        .preprocess(imagesFromEnv, z.record(z.string().regex(IMAGE_NAME, 'an image name: lower-case letters, digits, ".", "_", "-"'), z.string().min(1)))
        .default({ [DEFAULT_IMAGE_NAME]: TRAINER_IMAGE })
        .describe(`kubernetes: the images jobs may run, name -> reference pinned by digest (repo@sha256:...); a job picks a name (hardware.image), "${DEFAULT_IMAGE_NAME}" when it names none. Env: name=ref,name=ref`),
      organizations: z
        .array(OrganizationId)
        .default([])
        .describe('kubernetes: organizations whose jobs run on the cluster without a queue (each scheduler.quotas organization is one too): hanzo-ml cluster apply gives each its namespace'),
      worker_service_account: ServiceAccountRef.optional().describe('kubernetes: "namespace/name" of the worker\'s ServiceAccount: hanzo-ml cluster apply grants it the running of Jobs in each organization\'s namespace'),
      api_service_account: ServiceAccountRef.optional().describe('kubernetes: "namespace/name" of the API\'s ServiceAccount: hanzo-ml cluster apply lets it read the Kueue Workloads of each organization\'s namespace (GET /v1/queues)'),
      job_network: z
        .strictObject({
          object_store: EgressPeerSchema.prefault({}).describe('where job pods reach storage.endpoint; unset: its host, when it is an IP address'),
          api: EgressPeerSchema.prefault({}).describe('where job pods reach server.public_url; unset: its host, when it is an IP address'),
          dns: EgressPeerSchema.prefault({ namespace: 'kube-system', pod_labels: { 'k8s-app': 'kube-dns' }, ports: [53] }).describe('the cluster DNS (UDP and TCP)'),
        })
        .prefault({})
        .describe('kubernetes: the egress the NetworkPolicy of each organization\'s namespace allows job pods, beside their own gang peers'),
      gpu_types: z.array(z.string()).default([]),
      max_concurrent_jobs: z.coerce.number().int().positive().default(32).describe('job activities one worker runs at once (its job task queue slots); per-organization limits are scheduler.quotas'),
      checkpoint_bucket: z.string().default('hanzo-ml-checkpoints'),
      kubeconfig: z.string().optional().describe('kubernetes: a kubeconfig file; unset: $KUBECONFIG, else the in-cluster service account'),
      service_account: z.string().optional().describe('kubernetes: service account of job pods; unset: the namespace default'),
      image_pull_policy: z.enum(['Always', 'IfNotPresent', 'Never']).default('IfNotPresent'),
      gpu_prices_usd: z
        .record(z.string(), z.number().nonnegative())
        .default({})
        .describe('gpu_type -> price of one device-hour in USD: what estimates (dry runs) and finished jobs cost; each key must be one of scheduler.gpu_types'),
      default_price_usd: z.coerce
        .number()
        .nonnegative()
        .default(2.5)
        .describe('price of one device-hour of a CPU job, or of a GPU job whose gpu_type scheduler.gpu_prices_usd does not list'),
      monthly_budgets_usd: z
        .record(OrganizationId, z.number().nonnegative())
        .default({})
        .describe('organization -> USD it may spend per calendar month (UTC): a pipeline whose estimate exceeds what is left is refused (402); unlisted: no budget'),
      quotas: z
        .record(OrganizationId, OrganizationQuotaSchema)
        .default({})
        .describe('organization -> quota; empty: no queues (jobs start as soon as they are created)'),
      preemption: z
        .strictObject({
          enabled: bool.default(true),
          grace_period: duration.default('300s').describe('SIGTERM to SIGKILL for a stopped or preempted job: the time it has to write its emergency checkpoint'),
          policy: z.enum(['lowest_priority_first']).default('lowest_priority_first').describe('victims: lowest priority first, then the most recently started'),
        })
        .prefault({}),
      cohort: z.string().default('hanzo-ml').describe('kubernetes: the Kueue cohort every organization\'s ClusterQueue lends and borrows in'),
      local_gpus: z.coerce.number().int().min(0).optional().describe('local: GPUs jobs may use on this machine; unset: counted with nvidia-smi (0 without it)'),
      image_pull_timeout: duration.default('5m').describe('a job whose image cannot be pulled for this long fails'),
      cpu_per_job: z.string().default('2').describe('kubernetes: CPU request of a job pod'),
      memory_per_job: z.string().default('8Gi').describe('kubernetes: memory request of a job pod'),
    })
    .prefault({})
    .superRefine(checkQuotaGpuTypes)
    .superRefine(checkGpuPrices)
    .superRefine(checkImages),
  temporal: z
    .strictObject({
      address: z.string().optional().describe('host:port of a Temporal cluster; unset starts the embedded dev server'),
      namespace: z.string().default('default'),
      port: z.coerce.number().int().default(7233),
      ui_port: z.coerce.number().int().min(0).default(8233).describe('0 runs the dev server headless'),
      heartbeat_timeout: duration.default('30s'),
      tls: bool.default(false).describe('connect to temporal.address over TLS (the embedded dev server is plaintext)'),
      tls_cert: z.string().optional().describe('PEM client certificate for mTLS; with tls_key'),
      tls_key: z.string().optional().describe('PEM private key of tls_cert'),
      tls_ca: z.string().optional().describe('PEM CA certificate(s) that verify the server; unset: the system\'s roots'),
      tls_server_name: z.string().optional().describe('the name the server\'s certificate carries, when not the host of temporal.address'),
    })
    .prefault({}),
  trainer: z
    .strictObject({
      python: z.string().optional().describe('python of the trainer venv; default from the bootstrap'),
      candle: z.string().optional().describe('hanzo-ml-candle binary; default from the bootstrap'),
      base_models_dir: z.string().optional(),
      threads: z.coerce.number().int().positive().default(2),
      checkpoint_alert_after: duration.default('10m'),
      tokens_per_gpu_second: z.coerce
        .number()
        .positive()
        .default(3000)
        .describe('training throughput per device that estimates assume until finished jobs of the same gpu_type, method and base model have measured one'),
    })
    .prefault({}),
  promotion: z
    .strictObject({
      approval_timeout: duration.default('72h'),
      webhook_url: z
        .string()
        .url()
        .regex(/^https?:\/\//, 'expected an http:// or https:// URL')
        .optional()
        .describe('reload hook: POSTed a signed JSON body whenever the production version changes (a pipeline\'s promotion, a manual stage change or `production` alias move, a rollback), once the change committed; unset: no hook'),
      webhook_secret: z
        .string()
        .min(16, 'expected at least 16 characters: it keys the HMAC-SHA256 receivers verify')
        .optional()
        .describe('HMAC-SHA256 key of the X-Hanzo-Signature header; required with webhook_url (set it with HANZO_ML_PROMOTION_WEBHOOK_SECRET, not in the file)'),
      webhook_deadline: duration
        .refine((d) => !/^0+(ms|s|m|h|d)$/.test(d), 'expected a deadline longer than 0 (Temporal reads a zero timeout as none)')
        .default('1h')
        .describe('the hook is retried (exponential backoff, interval capped at a tenth of this, at most 5m) until it answers 2xx or this passes; then the pipeline shows it failed, the promotion stands'),
    })
    .prefault({}),
  registry: z
    .strictObject({
      require_gate_for_production: bool
        .default(true)
        .describe(
          'true: a model version with no eval gate decision of record (registered by hand through /v1 or MLflow, or by a ' +
            'conversion job) may go to staging but not to production (stage change or `production` alias) until ' +
            '`hanzo-ml model evaluate` passes it or an admin overrides with a reason. false: such versions are promoted ' +
            'as in stock MLflow; it exists for MLflow\'s own registry tests, which promote versions they registered by hand',
        ),
    })
    .prefault({}),
  webhooks: z
    .strictObject({
      allow_private_targets: bool
        .default(false)
        .describe('true: webhook endpoints may resolve to private, loopback or link-local addresses (a receiver on this machine or its network); refused unless server.host is a loopback address, since an organization admin could then probe the servers beside this one'),
      max_attempts: z.coerce.number().int().min(1).max(50).default(12).describe('attempts per delivery before it is marked failed'),
      initial_backoff: duration.default('5s').describe('wait before the second attempt; each later wait doubles, capped at 1h'),
      timeout: duration.default('10s').describe('how long one attempt may take, connection included'),
    })
    .prefault({}),
  hpo: z
    .strictObject({
      max_concurrent_trials: z.coerce.number().int().positive().default(8),
      default_strategy: z.enum(['grid', 'random', 'bayesian', 'pbt']).default('bayesian'),
    })
    .prefault({}),
  metrics: z
    .strictObject({
      enabled: bool.default(true),
      port: z.coerce.number().int().default(9090),
      path: z.string().default('/metrics'),
    })
    .prefault({}),
  logging: z
    .strictObject({
      level: z.enum(['debug', 'info', 'warn', 'error']).default('info'),
      format: z.enum(['json', 'text']).default('text'),
    })
    .prefault({}),
});
export type Config = z.infer<typeof ConfigSchema>;

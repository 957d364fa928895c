// Object-store access of one job: temporary credentials of its organization's role, minted by the worker when it
// prepares the job (STS AssumeRole), valid for storage.job_access.duration, and narrowed by a session policy to
// the job's own files. A job pod receives these and no other key.
//
// Why STS and a role per organization: the store must refuse another organization's objects itself. Every object
// a job touches sits under its organization's prefix (datasets/{org}/, models/{org}/, checkpoints bucket
// jobs/{org}/ and checkpoints/{org}/; lib/job-files.ts) or is a shared read-only input. The organization's role
// policy (organizationStoragePolicy, attached by the operator) grants only those prefixes; the session policy
// (jobStoragePolicy) narrows a job's writes further to its own job files and checkpoints where the store honours
// session policies (AWS STS does). moto, the enforcing store the tests use, evaluates a role's
// policies with object-level resource ARNs (arn:aws:s3:::bucket/org/*) but ignores session policies, `Condition`
// blocks (so `s3:prefix` on ListBucket: listing is bucket-wide there) and credential expiry: the proof against it
// rests on the role policy.
import { AssumeRoleCommand, STSClient } from '@aws-sdk/client-sts';
import type { Config } from '../contracts/config.js';
import { durationMs } from '../lib/config.js';
import { jobNameOf } from '../lib/job-files.js';

export interface JobScope {
  name: string;
  organizationId: string;
  runId?: string | null;
}

interface Statement {
  Effect: 'Allow';
  Action: string[];
  Resource: string[];
  Condition?: Record<string, Record<string, string[]>>;
}
export interface PolicyDocument {
  Version: '2012-10-17';
  Statement: Statement[];
}

const READ = ['s3:GetObject'];
const WRITE = ['s3:GetObject', 's3:PutObject', 's3:DeleteObject', 's3:AbortMultipartUpload', 's3:ListMultipartUploadParts'];
/** What may appear in a key prefix of a policy: `*` or `?` in an organization id would widen its grant. */
const SAFE_SEGMENT = /^[A-Za-z0-9._-]+$/;

function segment(what: string, value: string): string {
  if (!SAFE_SEGMENT.test(value) || value === '.' || value === '..') throw new Error(`${what} '${value}' cannot scope object-store access: expected letters, digits, '.', '_' or '-'`);
  return value;
}

const objects = (bucket: string, prefix: string): string => `arn:aws:s3:::${bucket}/${prefix}*`;

/** s3:// prefixes of limits.source_allow_list, as bucket and key prefix (file:// entries are not the store's). */
function sharedSources(config: Config): { bucket: string; prefix: string }[] {
  return config.limits.source_allow_list
    .filter((u) => u.startsWith('s3://'))
    .map((u) => {
      const [bucket = '', ...rest] = u.slice('s3://'.length).split('/');
      return { bucket, prefix: rest.join('/') };
    })
    .filter((s) => s.bucket && !/[*?]/.test(s.bucket + s.prefix));
}

/** Listing, where the store honours it, only under the prefixes read (AWS evaluates s3:prefix; moto ignores it). */
function listing(byBucket: Map<string, string[]>): Statement[] {
  return [...byBucket].map(([bucket, prefixes]) => ({
    Effect: 'Allow',
    Action: ['s3:ListBucket'],
    Resource: [`arn:aws:s3:::${bucket}`],
    Condition: { StringLike: { 's3:prefix': prefixes.map((p) => `${p}*`) } },
  }));
}

function policyOf(read: { bucket: string; prefix: string }[], write: { bucket: string; prefix: string }[]): PolicyDocument {
  const byBucket = new Map<string, string[]>();
  for (const { bucket, prefix } of [...read, ...write]) byBucket.set(bucket, [...(byBucket.get(bucket) ?? []), prefix]);
  const statements: Statement[] = [];
  if (write.length) statements.push({ Effect: 'Allow', Action: WRITE, Resource: write.map((w) => objects(w.bucket, w.prefix)) });
  if (read.length) statements.push({ Effect: 'Allow', Action: READ, Resource: read.map((r) => objects(r.bucket, r.prefix)) });
  return { Version: '2012-10-17', Statement: [...statements, ...listing(byBucket)] };
}

/** Inputs every organization reads: published base models and bundled eval data, and the source allow-list. */
function sharedReads(config: Config): { bucket: string; prefix: string }[] {
  const models = config.storage.buckets.models;
  return [{ bucket: models, prefix: 'base-models/' }, { bucket: models, prefix: 'eval-data/' }, ...sharedSources(config)];
}

/**
 * The policy of an organization's role, which the operator attaches to the role storage.job_access.role_arn
 * names for it: read its datasets and shared inputs; read and write its models prefix, its job files and its
 * checkpoints.
 */
export function organizationStoragePolicy(config: Config, organizationId: string): PolicyDocument {
  const org = segment('organization', organizationId);
  const { datasets, checkpoints, models } = config.storage.buckets;
  return policyOf(
    [{ bucket: datasets, prefix: `${org}/` }, ...sharedReads(config)],
    [{ bucket: models, prefix: `${org}/` }, { bucket: checkpoints, prefix: `jobs/${org}/` }, { bucket: checkpoints, prefix: `checkpoints/${org}/` }],
  );
}

/**
 * The session policy of one job: its organization's prefixes, writing only its own job files (jobs/{org}/{name}
 * covers its restarts, {name}-r2 ...) and its run's checkpoints; it reads its organization's job files and
 * checkpoints (a merge or eval job reads a training job's outputs, a population-based member another's checkpoint).
 */
export function jobStoragePolicy(config: Config, job: JobScope): PolicyDocument {
  const org = segment('organization', job.organizationId);
  const { datasets, checkpoints, models } = config.storage.buckets;
  const write = [{ bucket: models, prefix: `${org}/` }, { bucket: checkpoints, prefix: `jobs/${org}/${jobNameOf(job.name)}` }];
  if (job.runId) write.push({ bucket: checkpoints, prefix: `checkpoints/${org}/${segment('run', job.runId)}/` });
  const read = [{ bucket: datasets, prefix: `${org}/` }, { bucket: checkpoints, prefix: `jobs/${org}/` }, { bucket: checkpoints, prefix: `checkpoints/${org}/` }];
  return policyOf([...read, ...sharedReads(config)], write);
}

/** The role a job of `organizationId` assumes. */
export function organizationRoleArn(config: Config, organizationId: string): string {
  const template = config.storage.job_access.role_arn;
  if (!template) throw new Error('storage.job_access.role_arn is not set: jobs have no object-store access to mint');
  return template.replaceAll('{organization}', segment('organization', organizationId));
}

/** STS allows [\w+=,.@-], 2 to 64 characters; the job name (a DNS label) fits once shortened. */
const sessionName = (job: JobScope): string => `job-${job.name}`.replace(/[^\w+=,.@-]/g, '-').slice(0, 64);

export type JobStorageEnv = Record<'AWS_ACCESS_KEY_ID' | 'AWS_SECRET_ACCESS_KEY' | 'AWS_SESSION_TOKEN', string>;

/**
 * Mints a job's credentials: AssumeRole of its organization's role with the job's session policy, valid for
 * storage.job_access.duration. The result is the env a pod gets through its own Secret (JobDeps.jobSecrets).
 */
export function jobStorageAccess(config: Config): (job: JobScope) => Promise<JobStorageEnv> {
  const { access_key, secret_key, endpoint, region, job_access } = config.storage;
  // Checked when the worker starts (runtime/parts.ts builds jobSecrets then): keys come from the environment.
  if (!access_key || !secret_key) throw new Error('storage.job_access.role_arn needs storage.access_key and storage.secret_key (HANZO_ML_STORAGE_ACCESS_KEY / _SECRET_KEY): the worker\'s key that assumes job roles');
  const sts = new STSClient({
    region,
    endpoint: job_access.sts_endpoint ?? endpoint,
    credentials: { accessKeyId: access_key, secretAccessKey: secret_key },
  });
  const seconds = Math.floor(durationMs(job_access.duration) / 1000);
  return async (job) => {
    const out = await sts.send(
      new AssumeRoleCommand({
        RoleArn: organizationRoleArn(config, job.organizationId),
        RoleSessionName: sessionName(job),
        DurationSeconds: seconds,
        Policy: JSON.stringify(jobStoragePolicy(config, job)),
      }),
    );
    const c = out.Credentials;
    if (!c?.AccessKeyId || !c.SecretAccessKey || !c.SessionToken) throw new Error(`STS AssumeRole for job ${job.name} returned no credentials`);
    return { AWS_ACCESS_KEY_ID: c.AccessKeyId, AWS_SECRET_ACCESS_KEY: c.SecretAccessKey, AWS_SESSION_TOKEN: c.SessionToken };
  };
}

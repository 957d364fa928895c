// /v1/jobs: spec 000's job interface. Submit a job (JSON or YAML), list and read jobs, cancel one. Every check of
// the submission runs here, before anything is queued: a bad one is a 400 naming the field.
import { randomUUID } from 'node:crypto';
import { Hono, type Context } from 'hono';
import { TypedSearchAttributes } from '@temporalio/common';
import { parse as parseYaml } from 'yaml';
import type { ApiDeps, AppEnv } from '../deps.js';
import { allowedImage } from '../../contracts/config.js';
import { IDEMPOTENCY_WINDOW_MS, JobListQuerySchema, JobQueuePlaceSchema, JobSubmissionSchema, ResumeRequestSchema, jobWorkflowId, type JobDryRun, type JobListItem, type JobStatus, type JobSubmission, type JobView, type JobWorkflowInput } from '../../contracts/jobs.js';
import { DryRunQuerySchema } from '../../contracts/cost.js';
import { PIPELINE_TASK_QUEUE } from '../../contracts/pipeline.js';
import { JOB_TYPE_KEY, ORGANIZATION_KEY, STAGE_KEY } from '../../contracts/search-attributes.js';
import { MULTI_NODE_METHODS } from '../../contracts/trainer-job.js';
import type { submittedJobWorkflow } from '../../workflows/jobs.js';
import type { Db } from '../../db/client.js';
import type { Principal } from '../../db/repo/auth.js';
import { findDatasetVersion } from '../../db/repo/datasets.js';
import { insertJob, jobOfIdempotencyKey, listJobs, type JobRow } from '../../db/repo/jobs.js';
import { BaseModelError, resolveBaseModel } from '../../lib/base-models.js';
import { auditedChange } from '../audit.js';
import { requireRole } from '../auth.js';
import { ApiError, describeZodError, invalid } from '../errors.js';
import { cancelJob, jobOfCaller, pauseJob, resumeJob } from '../job-control.js';
import { jobDetail, jobProgressAndUsage } from '../job-detail.js';
import { budgetOf, checkBudget } from '../cost.js';
import { estimateJob } from '../job-cost.js';
import type { z } from 'zod';
import { checkBaseModel } from '../input-policy.js';
import { checkProductJobSection } from '../job-kinds.js';
import { jobKindOf } from '../../contracts/job-kinds.js';
import { queryParams } from '../validate.js';

export function jobView(row: JobRow): JobView {
  return {
    id: row.id,
    name: row.name,
    type: row.type as JobView['type'],
    kind: row.kind as JobView['kind'],
    parent: row.parent,
    status: row.status as JobStatus,
    message: row.message,
    queue: row.status === 'queued' ? (JobQueuePlaceSchema.safeParse(row.queue).data ?? null) : null,
    submitted_by: row.submittedBy,
    workflow_id: row.workflowId,
    run_id: row.runId,
    spec: row.spec as Record<string, unknown>,
    created_at: row.createdAt.toISOString(),
    started_at: row.startedAt?.toISOString() ?? null,
    ended_at: row.endedAt?.toISOString() ?? null,
  };
}

/** Statuses whose list item carries progress and usage so far (a job that has ended shows its outcome instead). */
const IN_FLIGHT = new Set(['running', 'paused']);

/** A list item: the job, and for a running or paused one its progress and usage (one page: one request). */
async function jobListItem(deps: ApiDeps, row: JobRow): Promise<JobListItem> {
  const extra = IN_FLIGHT.has(row.status) ? await jobProgressAndUsage(deps, row) : { progress: null, usage: null };
  return { ...jobView(row), ...extra };
}

/** The body as JSON or, when its content type says YAML (or it is not JSON), as YAML; then the contract. */
async function submissionBody(c: Context<AppEnv>): Promise<JobSubmission> {
  const text = await c.req.text();
  const yaml = /yaml/i.test(c.req.header('content-type') ?? '');
  let raw: unknown;
  try {
    raw = yaml ? parseYaml(text) : JSON.parse(text);
  } catch (err) {
    if (yaml) throw new ApiError('BAD_REQUEST', `request body is not valid YAML: ${(err as Error).message}`);
    throw new ApiError('BAD_REQUEST', 'request body is not valid JSON (send YAML with content-type application/yaml)');
  }
  const parsed = JobSubmissionSchema.safeParse(raw);
  if (!parsed.success) throw new ApiError('INVALID_PARAMETER_VALUE', describeZodError(parsed.error));
  return parsed.data;
}

/** The checks that need the server's settings and the catalogue: images, limits, base model and dataset. */
export async function checkJobSubmission(deps: ApiDeps, spec: JobSubmission, principal: Principal): Promise<void> {
  const { scheduler, limits } = deps.config;
  if ((spec.image !== undefined || jobKindOf(spec) === 'command') && allowedImage(scheduler.images, spec.image ?? null) === null)
    throw invalid(`image: "${spec.image}" is not an image of scheduler.images (allowed: ${Object.keys(scheduler.images).join(', ')})`);
  const nodes = spec.distributed?.num_nodes ?? 1;
  if (nodes > limits.max_nodes) throw invalid(`distributed.num_nodes: ${nodes} exceeds limits.max_nodes (${limits.max_nodes})`);
  if (nodes > 1 && scheduler.executor !== 'kubernetes') throw invalid(`distributed.num_nodes: ${nodes} machines need scheduler.executor: kubernetes (the local executor runs on this machine only)`);
  const processes = spec.distributed?.processes_per_node ?? 1;
  if (processes > limits.max_processes) throw invalid(`distributed.processes_per_node: ${processes} exceeds limits.max_processes (${limits.max_processes})`);
  await checkProductJobSection(deps, spec, principal);
  const recipe = spec.recipe;
  if (!recipe) return;
  if (nodes > 1 && !(MULTI_NODE_METHODS as readonly string[]).includes(recipe.method))
    throw invalid(`recipe.method: "${recipe.method}" cannot be sharded across machines; use ${MULTI_NODE_METHODS.join(' or ')}, or one node`);
  checkBaseModel(deps.config, principal, 'recipe.base_model', recipe.base_model);
  try {
    resolveBaseModel(recipe.base_model, deps.config, deps.bootstrap);
  } catch (err) {
    if (err instanceof BaseModelError) throw invalid(`recipe.base_model: ${err.message}`);
    throw err;
  }
  // Another organization's dataset does not exist for the caller.
  if (!(await findDatasetVersion(deps.db, principal.organizationId, recipe.dataset.name, recipe.dataset.version)))
    throw invalid(`recipe.dataset: "${recipe.dataset.name}" has no version ${recipe.dataset.version}`);
}

/** A JSON body that may be left out (an empty body is `{}`), checked against its contract. */
async function optionalJsonBody<S extends z.ZodType>(c: Context<AppEnv>, schema: S): Promise<z.infer<S>> {
  const text = await c.req.text();
  let raw: unknown = {};
  try {
    if (text.trim() !== '') raw = JSON.parse(text);
  } catch {
    throw new ApiError('BAD_REQUEST', 'request body is not valid JSON');
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new ApiError('INVALID_PARAMETER_VALUE', describeZodError(parsed.error));
  return parsed.data;
}

/** The Idempotency-Key header: printable, bounded. */
export function idempotencyKey(c: Context<AppEnv>): string | null {
  const key = c.req.header('idempotency-key');
  if (key === undefined) return null;
  if (!/^[\x21-\x7e]{1,255}$/.test(key)) throw invalid('Idempotency-Key: expected 1 to 255 printable characters without spaces');
  return key;
}

/**
 * Runs the submission; when a concurrent submit with the same Idempotency-Key committed first (the unique index
 * refuses this one before its workflow starts), answers that job instead.
 */
async function submitOnce(deps: ApiDeps, principal: Principal, key: string | null, submit: () => Promise<JobRow>): Promise<JobRow | { existing: JobRow }> {
  try {
    return await submit();
  } catch (err) {
    const code = (err as { cause?: { code?: string } }).cause?.code ?? (err as { code?: string }).code;
    if (key === null || code !== '23505') throw err;
    const existing = await jobOfIdempotencyKey(deps.db, principal.organizationId, key, IDEMPOTENCY_WINDOW_MS);
    if (!existing) throw err;
    return { existing };
  }
}

/**
 * Checks and starts a job: answers the job an earlier submit with the same Idempotency-Key started (created: false)
 * or the new one. `alsoRecord` writes rows that belong with the job (the fine-tuning API's fields) in its transaction.
 */
export async function submitJob(
  c: Context<AppEnv>,
  deps: ApiDeps,
  principal: Principal,
  spec: JobSubmission,
  key: string | null,
  alsoRecord?: (tx: Db, row: JobRow) => Promise<void>,
): Promise<{ row: JobRow; created: boolean }> {
  if (key) {
    const earlier = await jobOfIdempotencyKey(deps.db, principal.organizationId, key, IDEMPOTENCY_WINDOW_MS);
    if (earlier) return { row: earlier, created: false };
  }
  await checkJobSubmission(deps, spec, principal);
  const budget = await budgetOf(deps, principal.organizationId);
  // The estimate runs the trainer's data code (seconds): only when there is a budget to check.
  if (budget) {
    const estimate = await estimateJob(deps, spec, principal.organizationId);
    if (estimate.estimate) checkBudget(principal.organizationId, estimate.estimate, budget);
  }
  const id = randomUUID();
  const input: JobWorkflowInput = {
    job_id: id,
    organization_id: principal.organizationId,
    submitted_by: principal.subject,
    spec,
    runtime: { heartbeat_timeout: deps.config.temporal.heartbeat_timeout },
  };
  // The row and its audit row commit only once Temporal accepted the start (its last step): a refused start
  // leaves no job listed; a second submit with the same key meets the unique index and is refused.
  const row = await submitOnce(deps, principal, key, () => auditedChange(c, deps, { action: 'job.submit', target: id, detail: { type: spec.type, name: spec.name ?? null } }, async (tx) => {
    const inserted = await insertJob(tx, {
      id,
      organizationId: principal.organizationId,
      name: spec.name ?? id,
      submittedBy: principal.subject,
      type: spec.type,
      kind: jobKindOf(spec),
      spec,
      status: 'validating',
      workflowId: jobWorkflowId(id),
      idempotencyKey: key,
    });
    await alsoRecord?.(tx, inserted);
    await deps.temporal.workflow.start<typeof submittedJobWorkflow>('submittedJobWorkflow', {
      taskQueue: PIPELINE_TASK_QUEUE,
      workflowId: jobWorkflowId(id),
      args: [input],
      memo: { organization_id: principal.organizationId },
      typedSearchAttributes: new TypedSearchAttributes([
        { key: ORGANIZATION_KEY, value: principal.organizationId },
        { key: JOB_TYPE_KEY, value: spec.type },
        { key: STAGE_KEY, value: 'validating' },
      ]),
    });
    return inserted;
  }));
  return 'existing' in row ? { row: row.existing, created: false } : { row, created: true };
}

export function jobRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();

  app.post('/', async (c) => {
    const principal = requireRole(c, 'developer');
    const key = idempotencyKey(c);
    const spec = await submissionBody(c);
    if (queryParams(c, DryRunQuerySchema).dry_run === 'true') {
      await checkJobSubmission(deps, spec, principal);
      const budget = await budgetOf(deps, principal.organizationId);
      const estimate = await estimateJob(deps, spec, principal.organizationId);
      return c.json({ dry_run: true, ...estimate, budget, fits_budget: budget && estimate.estimate ? estimate.estimate.usd <= budget.left_usd : null } satisfies JobDryRun);
    }
    const submitted = await submitJob(c, deps, principal, spec, key);
    return c.json(jobView(submitted.row), submitted.created ? 201 : 200);
  });

  app.get('/', async (c) => {
    const principal = requireRole(c, 'viewer');
    const q = queryParams(c, JobListQuerySchema);
    const rows = await listJobs(deps.db, principal.organizationId, { status: q.status, type: q.type, parent: q.parent, limit: q.limit, before: q.cursor === undefined ? undefined : Number(q.cursor) });
    return c.json({ jobs: await Promise.all(rows.map((r) => jobListItem(deps, r))), next_cursor: rows.length === q.limit ? String(rows.at(-1)!.seq) : null });
  });

  /** The job with its segments, attempts, preemptions, checkpoints, progress and usage so far. */
  app.get('/:id', async (c) => {
    const row = await jobOfCaller(c, deps, c.req.param('id'));
    return c.json(await jobDetail(deps, row, jobView(row)));
  });

  app.post('/:id/cancel', async (c) => c.json(await cancelJob(c, deps, c.req.param('id')), 202));

  app.post('/:id/pause', async (c) => c.json(await pauseJob(c, deps, c.req.param('id')), 202));

  app.post('/:id/resume', async (c) => {
    const body = await optionalJsonBody(c, ResumeRequestSchema);
    return c.json(await resumeJob(c, deps, c.req.param('id'), body.from_checkpoint), 202);
  });

  return app;
}

// /v1/jobs: spec 000's job interface. Submit a job (JSON or YAML), list and read jobs, cancel one. Every check of
// the submission runs here, before anything is queued: a bad one is a 400 naming the field.
import { randomUUID } from 'node:crypto';
import { Hono, type Context } from 'hono';
import { WorkflowNotFoundError } from '@temporalio/client';
import { TypedSearchAttributes } from '@temporalio/common';
import { parse as parseYaml } from 'yaml';
import type { ApiDeps, AppEnv } from '../deps.js';
import { allowedImage } from '../../contracts/config.js';
import { IDEMPOTENCY_WINDOW_MS, JobListQuerySchema, JobSubmissionSchema, TERMINAL_JOB_STATUSES, jobWorkflowId, type JobStatus, type JobSubmission, type JobView, type JobWorkflowInput } from '../../contracts/jobs.js';
import { PIPELINE_TASK_QUEUE } from '../../contracts/pipeline.js';
import { JOB_TYPE_KEY, ORGANIZATION_KEY, STAGE_KEY } from '../../contracts/search-attributes.js';
import { MULTI_NODE_METHODS } from '../../contracts/trainer-job.js';
import type { submittedJobWorkflow } from '../../workflows/jobs.js';
import type { Principal } from '../../db/repo/auth.js';
import { findDatasetVersion } from '../../db/repo/datasets.js';
import { getJob, insertJob, jobOfIdempotencyKey, listJobs, type JobRow } from '../../db/repo/jobs.js';
import { BaseModelError, resolveBaseModel } from '../../lib/base-models.js';
import { auditedChange } from '../audit.js';
import { requireOwnerOrAdmin, requireRole } from '../auth.js';
import { ApiError, describeZodError, invalid, notFound } from '../errors.js';
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
    submitted_by: row.submittedBy,
    workflow_id: row.workflowId,
    run_id: row.runId,
    spec: row.spec as Record<string, unknown>,
    created_at: row.createdAt.toISOString(),
    started_at: row.startedAt?.toISOString() ?? null,
    ended_at: row.endedAt?.toISOString() ?? null,
  };
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

/** The Idempotency-Key header: printable, bounded. */
function idempotencyKey(c: Context<AppEnv>): string | null {
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

export function jobRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();

  async function owned(c: Context<AppEnv>, id: string): Promise<JobRow> {
    const row = await getJob(deps.db, c.get('principal').organizationId, id);
    if (!row) throw notFound(`job ${id}`);
    return row;
  }

  app.post('/', async (c) => {
    const principal = requireRole(c, 'developer');
    const key = idempotencyKey(c);
    const spec = await submissionBody(c);
    if (key) {
      const earlier = await jobOfIdempotencyKey(deps.db, principal.organizationId, key, IDEMPOTENCY_WINDOW_MS);
      if (earlier) return c.json(jobView(earlier), 200);
    }
    await checkJobSubmission(deps, spec, principal);
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
        status: 'queued',
        workflowId: jobWorkflowId(id),
        idempotencyKey: key,
      });
      await deps.temporal.workflow.start<typeof submittedJobWorkflow>('submittedJobWorkflow', {
        taskQueue: PIPELINE_TASK_QUEUE,
        workflowId: jobWorkflowId(id),
        args: [input],
        memo: { organization_id: principal.organizationId },
        typedSearchAttributes: new TypedSearchAttributes([
          { key: ORGANIZATION_KEY, value: principal.organizationId },
          { key: JOB_TYPE_KEY, value: spec.type },
          { key: STAGE_KEY, value: 'queued' },
        ]),
      });
      return inserted;
    }));
    if ('existing' in row) return c.json(jobView(row.existing), 200);
    return c.json(jobView(row), 201);
  });

  app.get('/', async (c) => {
    const principal = requireRole(c, 'viewer');
    const q = queryParams(c, JobListQuerySchema);
    const rows = await listJobs(deps.db, principal.organizationId, { status: q.status, type: q.type, parent: q.parent, limit: q.limit, before: q.cursor === undefined ? undefined : Number(q.cursor) });
    return c.json({ jobs: rows.map(jobView), next_cursor: rows.length === q.limit ? String(rows.at(-1)!.seq) : null });
  });

  app.get('/:id', async (c) => {
    requireRole(c, 'viewer');
    return c.json(jobView(await owned(c, c.req.param('id'))));
  });

  /** Cancels a job: its process gets SIGTERM (a train job writes an emergency checkpoint); it ends cancelled. */
  app.post('/:id/cancel', async (c) => {
    const id = c.req.param('id');
    const row = await owned(c, id);
    requireOwnerOrAdmin(c, row.submittedBy, `job ${id}`);
    if (TERMINAL_JOB_STATUSES.includes(row.status as JobStatus)) throw new ApiError('INVALID_STATE', `job ${id} has already ended (${row.status})`);
    try {
      await auditedChange(c, deps, { action: 'job.cancel', target: id }, () => deps.temporal.workflow.getHandle(row.workflowId).cancel());
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) throw new ApiError('INVALID_STATE', `job ${id} has no running workflow`);
      throw err;
    }
    return c.json({ id, status: 'cancel_requested' }, 202);
  });

  return app;
}

// /v1/fine_tuning/jobs: OpenAI's fine-tuning API over our jobs. A fine-tuning job is a recipe job (the same row,
// workflow and tenancy as /v1/jobs, the same id); what OpenAI's fields asked for is kept beside it
// (fine_tuning_jobs) and answered back. Any recipe job of the organization reads as a fine-tuning job.
import { Hono, type Context } from 'hono';
import { z } from 'zod';
import type { ApiDeps, AppEnv } from '../deps.js';
import { JobSubmissionSchema, type JobDetail, type JobSubmission } from '../../contracts/jobs.js';
import {
  CursorListQuerySchema,
  FINE_TUNING_DEFAULTS,
  FineTuningJobCreateSchema,
  FineTuningListQuerySchema,
  JOB_STATUS_TO_OPENAI,
  methodOf,
  stepsFor,
  type FineTuningJobCreate,
  type OpenAiHyperparameters,
} from '../../contracts/openai.js';
import type { Principal } from '../../db/repo/auth.js';
import { getDatasetAnyStatus } from '../../db/repo/datasets.js';
import { fileView } from './files.js';
import { insertFineTuningJob, getFineTuningJob, listFineTuningJobs, type FineTuningJobRows } from '../../db/repo/fine-tuning.js';
import { listJobEvents, type JobEventRow } from '../../db/repo/job-events.js';
import { getJob } from '../../db/repo/jobs.js';
import { requireRole } from '../auth.js';
import { ApiError, describeZodError, invalid, notFound } from '../errors.js';
import { jsonBody, queryParams } from '../validate.js';
import { idempotencyKey, jobView, submitJob } from './jobs.js';
import { jobDetail } from '../job-detail.js';
import { cancelJob, pauseJob, resumeJob } from '../job-control.js';

const seconds = (d: Date | null): number | null => (d ? Math.floor(d.getTime() / 1000) : null);

interface ResolvedHyperparameters {
  n_epochs: number;
  batch_size: number;
  learning_rate_multiplier: number;
}

/** A recipe job as OpenAI's fine_tuning.job; `job` and `run_id` (ours) name it in /v1/jobs and tracking. */
export function fineTuningJobView({ job, fineTuning: ft }: FineTuningJobRows) {
  const spec = job.spec as JobSubmission;
  const recipe = spec.recipe!;
  const hp = (ft?.hyperparameters as ResolvedHyperparameters | undefined) ?? { n_epochs: null, batch_size: recipe.hyperparameters.batch_size, learning_rate_multiplier: null };
  return {
    id: job.id,
    object: 'fine_tuning.job' as const,
    created_at: seconds(job.createdAt)!,
    finished_at: seconds(job.endedAt),
    error: job.status === 'failed' ? { code: 'job_failed', message: job.message ?? 'the job failed', param: null } : null,
    fine_tuned_model: null,
    hyperparameters: hp,
    model: ft?.model ?? recipe.base_model,
    organization_id: job.organizationId,
    result_files: [],
    seed: ft?.seed ?? recipe.hyperparameters.seed,
    status: JOB_STATUS_TO_OPENAI[job.status] ?? job.status,
    trained_tokens: null,
    training_file: ft?.trainingFile ?? `${recipe.dataset.name}@${recipe.dataset.version}`,
    validation_file: ft?.validationFile ?? null,
    estimated_finish: null,
    integrations: null,
    metadata: (ft?.metadata as Record<string, string> | null) ?? null,
    method: (ft?.method as Record<string, unknown> | undefined) ?? { type: recipe.method === 'dpo' ? 'dpo' : 'supervised' },
    user_provided_suffix: ft?.suffix ?? null,
    // ours: where the same job is in /v1/jobs, the run it logs to, our method and step count
    job: { status: job.status, message: job.message, run_id: job.runId, method: recipe.method, max_steps: recipe.hyperparameters.max_steps },
  };
}

/** A job event as OpenAI's fine_tuning.job.event; its id is the cursor (`after`). */
export function fineTuningEventView(e: JobEventRow) {
  return {
    id: String(e.seq),
    object: 'fine_tuning.job.event' as const,
    created_at: seconds(e.createdAt)!,
    level: e.level,
    message: e.message,
    type: e.type === 'metrics' ? ('metrics' as const) : ('message' as const),
    data: e.data,
    // ours: status, message, metrics, checkpoint or queue
    event_type: e.type,
  };
}

/** OpenAI's knobs as numbers: "auto" and missing take our defaults (contracts/openai.ts FINE_TUNING_DEFAULTS). */
function resolveHyperparameters(hp: OpenAiHyperparameters): ResolvedHyperparameters {
  const pick = <T>(v: T | 'auto' | undefined, d: T): T => (v === undefined || v === 'auto' ? d : v);
  return {
    n_epochs: pick(hp.n_epochs, FINE_TUNING_DEFAULTS.n_epochs),
    batch_size: pick(hp.batch_size, FINE_TUNING_DEFAULTS.batch_size),
    learning_rate_multiplier: pick(hp.learning_rate_multiplier, 1),
  };
}

/** The recipe job a create request asks for, with the fields kept beside it. */
async function recipeOf(deps: ApiDeps, principal: Principal, body: FineTuningJobCreate) {
  const file = await getDatasetAnyStatus(deps.db, principal.organizationId, body.training_file);
  if (!file) throw invalid(`training_file: file "${body.training_file}" does not exist (upload it with POST /v1/files, purpose "fine-tune")`);
  if (file.status === 'preparing') throw invalid(`training_file: file "${file.id}" is still being processed (status uploaded); create the job once GET /v1/files/${file.id} says processed`);
  if (file.status === 'failed') throw invalid(`training_file: file "${file.id}" failed processing (status error): ${fileView(file).status_details}`);
  if (body.validation_file && body.validation_file !== body.training_file)
    throw invalid('validation_file: a separate validation file is not supported; the training file\'s dataset version carries its own validation split (10% of its examples)');
  const type = body.method?.type === 'dpo' ? 'dpo' : 'supervised';
  // DPO learns from pairs: a file of conversations gives it nothing to compare, caught here rather than in the trainer.
  const form = (file.schema as { form?: string }).form;
  if (type === 'dpo' && form !== 'preference')
    throw invalid(`method.type: dpo needs a preference file (prompt, chosen, rejected on each line); file "${file.id}" holds ${form ?? 'other'} records`);
  const given = (type === 'dpo' ? body.method?.dpo?.hyperparameters : body.method?.supervised?.hyperparameters) ?? body.hyperparameters ?? {};
  const hp = resolveHyperparameters(given);
  const method = methodOf(type);
  const trainRecords = (file.splits as { train: { num_records: number } }).train.num_records;
  const seed = body.seed ?? FINE_TUNING_DEFAULTS.seed;
  const parsed = JobSubmissionSchema.safeParse({
    ...(body.suffix ? { name: body.suffix } : {}),
    type: 'training',
    recipe: {
      base_model: body.model,
      dataset: { name: file.name, version: file.version },
      method,
      hyperparameters: {
        learning_rate: hp.learning_rate_multiplier * FINE_TUNING_DEFAULTS.base_learning_rate[method]!,
        max_steps: stepsFor(hp.n_epochs, trainRecords, hp.batch_size),
        batch_size: hp.batch_size,
        seed,
      },
    },
  });
  if (!parsed.success) throw invalid(describeZodError(parsed.error).replace(/recipe\.hyperparameters\.learning_rate/g, 'hyperparameters.learning_rate_multiplier'));
  return { spec: parsed.data, hp, seed, method: { type, [type]: { hyperparameters: hp } } };
}

/** checkJobSubmission names our fields: the create request's are `model` and `training_file`. */
function inOpenAiTerms(err: unknown): never {
  if (err instanceof ApiError) throw new ApiError(err.code, err.message.replace(/^recipe\.base_model:/, 'model:').replace(/^recipe\.dataset:/, 'training_file:'));
  throw err;
}

export function fineTuningRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();

  async function owned(c: Context<AppEnv>, id: string): Promise<FineTuningJobRows> {
    const rows = await getFineTuningJob(deps.db, c.get('principal').organizationId, id);
    if (!rows) throw notFound(`fine-tuning job ${id}`);
    return rows;
  }

  app.post('/', async (c) => {
    const principal = requireRole(c, 'developer');
    const key = idempotencyKey(c);
    const body = await jsonBody(c, FineTuningJobCreateSchema);
    const { spec, hp, seed, method } = await recipeOf(deps, principal, body);
    const { row } = await submitJob(c, deps, principal, spec, key, (tx, job) =>
      insertFineTuningJob(tx, {
        jobId: job.id,
        trainingFile: body.training_file,
        validationFile: body.validation_file ?? null,
        model: body.model,
        suffix: body.suffix ?? null,
        seed,
        hyperparameters: hp,
        method,
        metadata: body.metadata ?? null,
      }),
    ).catch(inOpenAiTerms);
    const rows = await getFineTuningJob(deps.db, principal.organizationId, row.id);
    // A replayed key answers the earlier job; one that was submitted through /v1/jobs is no fine-tuning job.
    if (!rows) throw new ApiError('INVALID_STATE', `Idempotency-Key ${key}: already used for job ${row.id}, which was not submitted as a fine-tuning job`);
    return c.json(fineTuningJobView(rows), 200);
  });

  app.get('/', async (c) => {
    const principal = requireRole(c, 'viewer');
    const q = queryParams(c, FineTuningListQuerySchema);
    let beforeSeq: number | undefined;
    if (q.after !== undefined) {
      const after = await getJob(deps.db, principal.organizationId, q.after);
      if (!after) throw invalid(`after: job "${q.after}" does not exist`);
      beforeSeq = after.seq;
    }
    const rows = await listFineTuningJobs(deps.db, principal.organizationId, { limit: q.limit + 1, ...(beforeSeq !== undefined ? { beforeSeq } : {}) });
    return c.json({ object: 'list', data: rows.slice(0, q.limit).map(fineTuningJobView), has_more: rows.length > q.limit });
  });

  /** With ours: usage (GPU-hours and cost so far) and, while it runs, estimated_finish from the measured step rate. */
  app.get('/:id', async (c) => {
    requireRole(c, 'viewer');
    const rows = await owned(c, c.req.param('id'));
    const detail = await jobDetail(deps, rows.job, jobView(rows.job));
    const eta = detail.progress?.eta_seconds;
    return c.json({ ...fineTuningJobView(rows), estimated_finish: rows.job.status === 'running' && typeof eta === 'number' ? Math.floor(Date.now() / 1000 + eta) : null, usage: detail.usage });
  });

  // Cancel, pause and resume are /v1/jobs' (api/job-control.ts): the same checks, audit and signal; the answer is
  // the job as it is right after the request (the change itself follows as events).
  app.post('/:id/cancel', async (c) => {
    const { job } = await owned(c, c.req.param('id'));
    await cancelJob(c, deps, job.id);
    return c.json(fineTuningJobView(await owned(c, job.id)));
  });

  app.post('/:id/pause', async (c) => {
    const { job } = await owned(c, c.req.param('id'));
    await pauseJob(c, deps, job.id);
    return c.json(fineTuningJobView(await owned(c, job.id)));
  });

  /** From the newest checkpoint; POST /v1/jobs/{id}/resume takes from_checkpoint to pick another. */
  app.post('/:id/resume', async (c) => {
    const { job } = await owned(c, c.req.param('id'));
    await resumeJob(c, deps, job.id);
    return c.json(fineTuningJobView(await owned(c, job.id)));
  });

  /** Ascending from the cursor (OpenAI lists newest first): a follower asks again with the last id it got. */
  app.get('/:id/events', async (c) => {
    const principal = requireRole(c, 'viewer');
    const { job } = await owned(c, c.req.param('id'));
    const q = queryParams(c, CursorListQuerySchema.extend({ after: z.string().regex(/^\d+$/, 'an event id from an earlier page').optional() }));
    const rows = await listJobEvents(deps.db, principal.organizationId, job.id, { after: q.after === undefined ? undefined : Number(q.after), limit: q.limit + 1 });
    return c.json({ object: 'list', data: rows.slice(0, q.limit).map(fineTuningEventView), has_more: rows.length > q.limit });
  });

  /** The job's complete checkpoints over all its segments with the run's metrics at their steps, newest first. */
  app.get('/:id/checkpoints', async (c) => {
    requireRole(c, 'viewer');
    const { job } = await owned(c, c.req.param('id'));
    const q = queryParams(c, CursorListQuerySchema);
    const all = (await jobDetail(deps, job, jobView(job))).checkpoints.reverse().map((k) => checkpointView(job.id, k));
    const from = q.after === undefined ? 0 : all.findIndex((k) => k.id === q.after) + 1;
    const page = all.slice(from, from + q.limit);
    return c.json({ object: 'list', data: page, has_more: from + q.limit < all.length, first_id: page[0]?.id ?? null, last_id: page.at(-1)?.id ?? null });
  });

  return app;
}

/** A stored checkpoint as OpenAI's fine_tuning.job.checkpoint; its "model" is the checkpoint's prefix. */
function checkpointView(jobId: string, k: JobDetail['checkpoints'][number]) {
  const m = k.metrics;
  return {
    id: `${jobId}:${k.segment}:${k.step}`,
    object: 'fine_tuning.job.checkpoint' as const,
    created_at: k.created_at ? Math.floor(Date.parse(k.created_at) / 1000) : 0,
    fine_tuned_model_checkpoint: k.uri,
    fine_tuning_job_id: jobId,
    // OpenAI's names where the trainer logs the same quantity; every metric of the run at that step under ours.
    metrics: { step: k.step, train_loss: m['train/loss'] ?? null, valid_loss: m['eval/loss'] ?? null, ...m },
    step_number: k.step,
  };
}

// Submitted jobs (POST /v1/jobs): the catalogue row follows the job, its tracking run, and the job itself through
// the same executor path as a pipeline stage (runJobToCompletion). A recipe job is the trainer's train job
// (runTrainJob, any method, `full` included); a command job runs its argv in its image with its environment.
import { z } from 'zod';
import type { ActivityDeps } from './deps.js';
import { runJobToCompletion } from './run-job.js';
import { defineJob } from '../jobs/definition.js';
import { runTrainJob } from './training.js';
import { progressEvents } from '../jobs/progress-events.js';
import { jobPhaseRecorder } from '../jobs/phases.js';
import { runEvalSectionJob } from './eval-job.js';
import { runConversionSectionJob } from './conversion-job.js';
import { datasetRef } from './datasets.js';
import { jobWorkflowId, recipeHardware, type CheckpointRef, type JobQueuePlace, type JobRunOutcome, type JobSegment, type JobStatus, type JobSubmission, type JobWorkflowInput } from '../contracts/jobs.js';
import { jobKindOf } from '../contracts/job-kinds.js';
import type { JobPriority } from '../contracts/config.js';
import { CheckpointPolicySchema } from '../contracts/trainer-job.js';
import { findDatasetVersion } from '../db/repo/datasets.js';
import { getOrCreateExperiment } from '../db/repo/experiments.js';
import { addJobSegment, getJobById, setJobStatus } from '../db/repo/jobs.js';
import { createRun, setRunStatus } from '../db/repo/runs.js';
import { recordArtifact } from '../db/repo/run-artifacts.js';
import { sha256Stream } from '../lib/hash.js';
import { durationMs } from '../lib/config.js';
import { deterministicUuid } from '../lib/ids.js';
import { artifactRootUri, objectUri } from '../lib/object-store.js';
import { BaseModelError, resolveBaseModel } from '../lib/base-models.js';
import { checkpointsUnder } from '../lib/job-checkpoints.js';
import { segmentJobNames, segmentOwner } from '../lib/job-log.js';
import { checkpointsKey, checkpointsUri, jobNameOf } from '../lib/job-files.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';

/** The experiment a submitted job's run goes to. */
export const JOBS_EXPERIMENT = 'jobs';

const CommandResultSchema = z.looseObject({ exit_code: z.number().int() });

export function createSubmittedJobActivities(deps: ActivityDeps) {
  return {
    async setSubmittedJobStatus(a: { jobId: string; status: JobStatus; message?: string | null }): Promise<void> {
      await setJobStatus(deps.db, a.jobId, a.status, { message: a.message ?? null });
    },

    /**
     * What may have changed since the API checked the submission: the dataset version and the base model must
     * still be there. A job that cannot run fails here, before it takes a place in a queue.
     */
    async validateSubmittedJob(a: { input: JobWorkflowInput }): Promise<void> {
      const recipe = a.input.spec.recipe;
      if (!recipe) return;
      if (!(await findDatasetVersion(deps.db, a.input.organization_id, recipe.dataset.name, recipe.dataset.version)))
        throw nonRetryable(FailureType.BadInput, `recipe.dataset: "${recipe.dataset.name}" has no version ${recipe.dataset.version} any more`);
      try {
        resolveBaseModel(recipe.base_model, deps.config, deps.bootstrap);
      } catch (err) {
        if (err instanceof BaseModelError) throw nonRetryable(FailureType.BadInput, `recipe.base_model: ${err.message}`);
        throw err;
      }
    },

    /**
     * Starts a segment (segment 1 at submit, one more per resume) and records it on the job. A resume from the
     * newest checkpoint keeps the previous segment's checkpoint prefix (the job resumes from its newest); one from
     * an older checkpoint copies that checkpoint to a fresh prefix, so that the newer ones stay listed and the job
     * resumes from exactly the one asked for. Idempotent: a segment already recorded is answered as it is.
     */
    async startJobSegment(a: { input: JobWorkflowInput; runId: string; segment: number; from: CheckpointRef | null }): Promise<JobSegment> {
      const { input } = a;
      const segments = ((await getJobById(deps.db, input.job_id))?.segments ?? []) as JobSegment[];
      const recorded = segments.find((s) => s.segment === a.segment);
      if (recorded) return recorded;
      const recipe = input.spec.recipe !== undefined;
      let root = recipe ? (segments.at(-1)?.checkpoints_uri ?? checkpointsUri(deps.store, deps.config, input.organization_id, a.runId)) : null;
      if (root !== null && a.from !== null && (await checkpointsUnder(deps.store, a.segment, root)).at(-1)?.uri !== a.from.uri) {
        const key = `${checkpointsKey(input.organization_id, a.runId)}-s${a.segment}`;
        await copyCheckpoint(deps, a.from, key);
        root = objectUri(deps.store, deps.config.storage.buckets.checkpoints, key);
      }
      const segment: JobSegment = {
        segment: a.segment,
        job_name: jobNameOf(segmentJobNames(segmentOwner(input.job_id, a.segment), jobKindOf(input.spec))[0]!),
        checkpoints_uri: root,
        resumed_from: a.from,
        started_at: new Date().toISOString(),
      };
      await addJobSegment(deps.db, input.job_id, segment);
      return segment;
    },

    async createJobRun(a: { input: JobWorkflowInput }): Promise<{ runId: string }> {
      const { input } = a;
      const runId = deterministicUuid(`job:${input.job_id}:run`);
      const artifactRoot = artifactRootUri(deps);
      const experimentId = await getOrCreateExperiment(deps.db, input.organization_id, JOBS_EXPERIMENT, artifactRoot);
      const recipe = input.spec.recipe;
      await createRun(deps.db, {
        id: runId,
        organizationId: input.organization_id,
        experimentId,
        name: input.spec.name ?? input.job_id,
        userId: input.submitted_by,
        artifactRoot,
        config: input.spec,
        params: recipe ? { model: recipe.base_model, method: recipe.method, dataset: recipe.dataset.name } : { image: input.spec.image ?? '' },
        tags: [
          { key: 'hanzo_ml.job_id', value: input.job_id },
          { key: 'hanzo_ml.job_type', value: input.spec.type },
        ],
      });
      await setJobStatus(deps.db, input.job_id, 'queued', { runId });
      return { runId };
    },

    async finishJobRun(a: { runId: string; status: 'completed' | 'failed' | 'cancelled' }): Promise<void> {
      await setRunStatus(deps.db, a.runId, a.status);
    },

    /** Runs the job to its end: resolves on exit 0, fails with the job's own error otherwise. */
    async runSubmittedJob(a: { input: JobWorkflowInput; runId: string; segment?: JobSegment }): Promise<JobRunOutcome> {
      const onPhase = jobPhaseRecorder(deps.db, a.input.job_id);
      const run = { command: runCommandJob, recipe: runRecipeJob, eval: runEvalSectionJob, conversion: runConversionSectionJob }[jobKindOf(a.input.spec)];
      return run(deps, a, onPhase);
    },
  };
}

/** A submitted job's steps reach its event stream within about this (plus the runner's progress mirror). */
const PROGRESS_POLL_MS = 500;

/** Copies one checkpoint to {key}/{step}, its manifest last: the copy exists only once it is whole. */
async function copyCheckpoint(deps: ActivityDeps, from: CheckpointRef, key: string): Promise<void> {
  const bucket = deps.config.storage.buckets.checkpoints;
  const objects = await deps.store.list(from.uri);
  const manifest = objects.filter((o) => o.uri.endsWith('/manifest.json') && o.uri.slice(from.uri.length + 1) === 'manifest.json');
  if (manifest.length === 0) throw nonRetryable(FailureType.BadInput, `from_checkpoint: ${from.uri} has no manifest: it is not a complete checkpoint`);
  for (const o of [...objects.filter((x) => !manifest.includes(x)), ...manifest]) await deps.store.copy(o.uri, bucket, `${key}/${from.step}/${o.uri.slice(from.uri.length + 1)}`);
}

const priorityOf = (spec: JobSubmission): JobPriority | null => (spec.preemptible || spec.schedule.preemptible ? 'low' : null);
const seconds = (d: string | undefined): number | null => (d ? durationMs(d) / 1000 : null);

type Phase = (p: 'waiting' | 'running', why: string | null, queue?: JobQueuePlace | null) => Promise<void>;
type SegmentArgs = { input: JobWorkflowInput; runId: string; segment?: JobSegment };

async function runRecipeJob(deps: ActivityDeps, a: SegmentArgs, onPhase: Phase): Promise<JobRunOutcome> {
  const { spec } = a.input;
  const recipe = spec.recipe!;
  const row = await findDatasetVersion(deps.db, a.input.organization_id, recipe.dataset.name, recipe.dataset.version);
  if (!row) throw nonRetryable(FailureType.BadInput, `recipe.dataset: "${recipe.dataset.name}" has no version ${recipe.dataset.version}`);
  const every = seconds(spec.schedule.checkpoint_interval);
  const hardware = recipeHardware(spec);
  const checkpoint = CheckpointPolicySchema.parse({ every_steps: Math.max(1, Math.min(25, recipe.hyperparameters.max_steps)), keep_last: 3, ...(every !== null ? { every_seconds: every } : {}) });
  const { result } = await runTrainJob(deps, {
    ownerId: segmentOwner(a.input.job_id, a.segment?.segment ?? 1),
    runId: a.runId,
    ...(a.segment?.checkpoints_uri ? { checkpointsUri: a.segment.checkpoints_uri } : {}),
    recipe: { ...recipe, checkpoint, hardware, priority: priorityOf(spec) ?? undefined },
    dataset: datasetRef(row),
    progressWorkflowId: jobWorkflowId(a.input.job_id),
    onPhase,
    onProgress: progressEvents(deps, a.input.organization_id, a.input.job_id),
    pollMs: PROGRESS_POLL_MS,
  });
  const output = result.model_path ?? result.adapter_path;
  if (output) await recordOutputArtifacts(deps, a.runId, output, result.model_path ? 'model' : 'adapter');
  return { step: result.steps, metrics: result.final_metrics, output_uri: output };
}

/**
 * The trained weights as artifacts of the job's run, file by file under `model/` (full) or `adapter/`: what
 * `POST /v1/models/{name}/versions` with that artifact_path registers as a model version.
 */
async function recordOutputArtifacts(deps: ActivityDeps, runId: string, prefix: string, path: string): Promise<void> {
  const root = prefix.replace(/\/+$/, '');
  for (const o of await deps.store.list(root)) {
    const rel = o.uri.slice(root.length + 1);
    await recordArtifact(deps.db, { runId, path: `${path}/${rel}`, uri: o.uri, sizeBytes: o.size_bytes, sha256: await sha256Stream(await deps.store.read(o.uri)), metadata: { kind: path } });
  }
}

async function runCommandJob(deps: ActivityDeps, a: SegmentArgs, onPhase: Phase): Promise<JobRunOutcome> {
  const { spec, job_id: jobId } = a.input;
  const interval = seconds(spec.schedule.checkpoint_interval);
  // What a user's script needs to log to its run: the run and where (its token, HANZO_ML_TRACKING_TOKEN, is a
  // per-job secret scoped to this run).
  const env = {
    ...spec.env,
    HANZO_ML_JOB_ID: jobId,
    HANZO_ML_RUN_ID: a.runId,
    HANZO_ML_TRACKING_URI: deps.trackingUri,
    ...(interval !== null ? { HANZO_ML_CHECKPOINT_INTERVAL_SECONDS: String(interval) } : {}),
  };
  const job = defineJob({
    name: `${segmentOwner(jobId, a.segment?.segment ?? 1)}-command`,
    kind: 'command',
    organizationId: a.input.organization_id,
    runId: a.runId,
    priority: priorityOf(spec),
    tool: 'command',
    spec: { env },
    args: spec.command!,
    resources: {
      nodes: spec.distributed?.num_nodes ?? 1,
      processes: 1,
      gpus_per_node: spec.distributed?.gpus_per_node ?? spec.resources.gpus,
      gpu_type: spec.resources.gpu_type,
      image: spec.image ?? null,
      cpu: spec.resources.cpu === null ? null : String(spec.resources.cpu),
      memory: spec.resources.memory,
    },
  });
  let running = false;
  const { files } = await runJobToCompletion(deps, {
    job,
    resultSchema: CommandResultSchema,
    onWaiting: async (why, queue) => {
      running = false;
      await onPhase('waiting', why, queue);
    },
    onPoll: async () => {
      if (!running) {
        running = true;
        await onPhase('running', null);
      }
      return {};
    },
  });
  return { step: null, metrics: {}, output_uri: files.uri };
}

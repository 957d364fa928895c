// Submitted jobs (POST /v1/jobs): the catalogue row follows the job, its tracking run, and the job itself through
// the same executor path as a pipeline stage (runJobToCompletion). A recipe job is the trainer's train job
// (runTrainJob, any method, `full` included); a command job runs its argv in its image with its environment.
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import type { ActivityDeps } from './deps.js';
import { runJobToCompletion, type JobDefinition } from './jobs.js';
import { runTrainJob } from './training.js';
import { runEvalSectionJob } from './eval-job.js';
import { runConversionSectionJob } from './conversion-job.js';
import { datasetRef } from './datasets.js';
import { jobWorkflowId, type JobRunOutcome, type JobStatus, type JobSubmission, type JobWorkflowInput } from '../contracts/jobs.js';
import { jobKindOf } from '../contracts/job-kinds.js';
import type { JobPriority } from '../contracts/config.js';
import { CheckpointPolicySchema, HardwareSchema } from '../contracts/trainer-job.js';
import { findDatasetVersion } from '../db/repo/datasets.js';
import { getOrCreateExperiment } from '../db/repo/experiments.js';
import { setJobStatus } from '../db/repo/jobs.js';
import { createRun, setRunStatus } from '../db/repo/runs.js';
import { recordArtifact } from '../db/repo/run-artifacts.js';
import { sha256Stream } from '../lib/hash.js';
import { durationMs } from '../lib/config.js';
import { deterministicUuid } from '../lib/ids.js';
import { artifactRootUri } from '../lib/object-store.js';

/** The experiment a submitted job's run goes to. */
export const JOBS_EXPERIMENT = 'jobs';

const CommandResultSchema = z.looseObject({ exit_code: z.number().int() });

export function createSubmittedJobActivities(deps: ActivityDeps) {
  const phase = (jobId: string) => async (p: 'waiting' | 'running', why: string | null) => {
    await setJobStatus(deps.db, jobId, p === 'running' ? 'running' : 'queued', { message: why });
  };
  return {
    async setSubmittedJobStatus(a: { jobId: string; status: JobStatus; message?: string | null }): Promise<void> {
      await setJobStatus(deps.db, a.jobId, a.status, { message: a.message ?? null });
    },

    /** The job's tracking run (its ID derived from the job), in the organization's `jobs` experiment. */
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
    async runSubmittedJob(a: { input: JobWorkflowInput; runId: string }): Promise<JobRunOutcome> {
      const onPhase = phase(a.input.job_id);
      const run = { command: runCommandJob, recipe: runRecipeJob, eval: runEvalSectionJob, conversion: runConversionSectionJob }[jobKindOf(a.input.spec)];
      return run(deps, a, onPhase);
    },
  };
}

const priorityOf = (spec: JobSubmission): JobPriority | null => (spec.preemptible || spec.schedule.preemptible ? 'low' : null);
const seconds = (d: string | undefined): number | null => (d ? durationMs(d) / 1000 : null);

type Phase = (p: 'waiting' | 'running', why: string | null) => Promise<void>;

async function runRecipeJob(deps: ActivityDeps, a: { input: JobWorkflowInput; runId: string }, onPhase: Phase): Promise<JobRunOutcome> {
  const { spec } = a.input;
  const recipe = spec.recipe!;
  const row = await findDatasetVersion(deps.db, a.input.organization_id, recipe.dataset.name, recipe.dataset.version);
  if (!row) throw ApplicationFailure.nonRetryable(`recipe.dataset: "${recipe.dataset.name}" has no version ${recipe.dataset.version}`, 'BadInput');
  const every = seconds(spec.schedule.checkpoint_interval);
  const hardware = HardwareSchema.parse({
    processes: spec.distributed?.processes_per_node ?? 1,
    strategy: spec.distributed?.strategy ?? 'ddp',
    nodes: spec.distributed?.num_nodes ?? 1,
    gpus_per_node: spec.distributed?.gpus_per_node ?? spec.resources.gpus,
    gpu_type: spec.resources.gpu_type,
    image: spec.image ?? null,
  });
  const checkpoint = CheckpointPolicySchema.parse({ every_steps: Math.max(1, Math.min(25, recipe.hyperparameters.max_steps)), keep_last: 3, ...(every !== null ? { every_seconds: every } : {}) });
  const { result } = await runTrainJob(deps, {
    ownerId: a.input.job_id,
    runId: a.runId,
    recipe: { ...recipe, checkpoint, hardware, priority: priorityOf(spec) ?? undefined },
    dataset: datasetRef(row),
    progressWorkflowId: jobWorkflowId(a.input.job_id),
    onPhase,
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

async function runCommandJob(deps: ActivityDeps, a: { input: JobWorkflowInput; runId: string }, onPhase: Phase): Promise<JobRunOutcome> {
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
  const job: JobDefinition = {
    name: `${jobId}-command`,
    kind: 'command',
    organizationId: a.input.organization_id,
    runId: a.runId,
    priority: priorityOf(spec),
    envelope: { tool: 'command', spec: { env }, args: spec.command!, num_nodes: spec.distributed?.num_nodes ?? 1 },
    resources: {
      nodes: spec.distributed?.num_nodes ?? 1,
      processes: 1,
      gpus_per_node: spec.distributed?.gpus_per_node ?? spec.resources.gpus,
      gpu_type: spec.resources.gpu_type,
      image: spec.image ?? null,
      cpu: spec.resources.cpu === null ? null : String(spec.resources.cpu),
      memory: spec.resources.memory,
    },
  };
  let running = false;
  const { files } = await runJobToCompletion(deps, {
    job,
    resultSchema: CommandResultSchema,
    onWaiting: async (why) => {
      running = false;
      await onPhase('waiting', why);
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

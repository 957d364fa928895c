// A pipeline's stages and a sweep's trials as jobs of the job list (db/repo/child-jobs.ts), written by the
// activities that already record the stage or trial: the workflows do not change, so running pipelines and sweeps
// replay as they are. A stage job runs from the stage's start until the pipeline enters its next stage or ends.
import type { JobDeps } from './deps.js';
import { PIPELINE_STAGE_JOB_TYPES, jobParent } from '../contracts/job-kinds.js';
import { pipelineWorkflowId, type PipelineStage } from '../contracts/pipeline.js';
import { hpoWorkflowId } from '../contracts/hpo.js';
import { endChildJobs, pipelineOwner, recordChildJob, setChildJobStatus } from '../db/repo/child-jobs.js';
import { deterministicUuid } from '../lib/ids.js';

export const pipelineStageJobId = (pipelineId: string, stage: PipelineStage): string => deterministicUuid(`pipeline:${pipelineId}:stage:${stage}`);
export const sweepTrialJobId = (sweepId: string, n: number): string => deterministicUuid(`sweep:${sweepId}:trial:${n}`);

/** The pipeline entered `stage`: the stage before it ended (succeeded, or as the pipeline ended) and this one runs. */
export async function recordPipelineStageJob(deps: JobDeps, a: { pipelineId: string; stage: PipelineStage; outcome?: string | undefined; runId: string }): Promise<void> {
  const parent = jobParent('pipeline', a.pipelineId);
  // The organization keys the lookup of its children (jobs_org_parent_seq_idx).
  const owner = await pipelineOwner(deps.db, a.pipelineId);
  if (!owner) return;
  if (a.stage === 'failed') {
    const cancelled = a.outcome === 'cancelled';
    await endChildJobs(deps.db, owner.organizationId, parent, cancelled ? 'cancelled' : 'failed', cancelled ? 'the pipeline was cancelled' : 'the pipeline failed in this stage');
    return;
  }
  const type = PIPELINE_STAGE_JOB_TYPES[a.stage];
  const id = pipelineStageJobId(a.pipelineId, a.stage);
  if (a.stage !== 'queued') await endChildJobs(deps.db, owner.organizationId, parent, 'succeeded', null, type ? [id] : []);
  if (!type) return;
  // The run is the pipeline's from training on (preprocessing comes before it exists).
  const runId = a.stage === 'preprocess' ? null : a.runId;
  await recordChildJob(
    deps.db,
    { id, organizationId: owner.organizationId, parent, name: `${a.pipelineId}-${a.stage}`, submittedBy: owner.createdBy, type, workflowId: pipelineWorkflowId(a.pipelineId), runId, spec: { pipeline_id: a.pipelineId, stage: a.stage } },
    'running',
  );
}

/** A sweep's trial started (its run exists): a training job under `sweep:<id>`. */
export async function recordTrialJob(deps: JobDeps, t: { sweepId: string; n: number; organizationId: string; requestedBy: string; runId: string; params: Record<string, unknown> }): Promise<void> {
  await recordChildJob(
    deps.db,
    {
      id: sweepTrialJobId(t.sweepId, t.n),
      organizationId: t.organizationId,
      parent: jobParent('sweep', t.sweepId),
      name: `${t.sweepId}-trial-${t.n}`,
      submittedBy: t.requestedBy,
      type: 'training',
      workflowId: hpoWorkflowId(t.sweepId),
      runId: t.runId,
      spec: { sweep_id: t.sweepId, trial: t.n, params: t.params },
    },
    'running',
  );
}

/** A trial ended: completed is succeeded; pruned (stopped early by the scheduler) is cancelled, saying so. */
export async function finishTrialJob(deps: JobDeps, t: { sweepId: string; n: number; state: 'completed' | 'pruned' | 'failed' | 'cancelled' | 'running'; reason: string | null }): Promise<void> {
  if (t.state === 'running') return;
  const status = t.state === 'completed' ? 'succeeded' : t.state === 'failed' ? 'failed' : 'cancelled';
  await setChildJobStatus(deps.db, sweepTrialJobId(t.sweepId, t.n), status, t.state === 'pruned' ? `pruned${t.reason ? `: ${t.reason}` : ''}` : t.reason);
}

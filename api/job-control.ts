// Cancel, pause and resume of a submitted job: the checks (the caller's organization, owner or ml-admin, the job's
// state, the checkpoint a resume names) and the signal to its workflow, audited. /v1/jobs and the OpenAI-compatible
// fine-tuning routes both call these, so a job answers the same whichever API asks.
import type { Context } from 'hono';
import { WorkflowNotFoundError } from '@temporalio/client';
import type { ApiDeps, AppEnv } from './deps.js';
import { PAUSABLE_JOB_STATUSES, TERMINAL_JOB_STATUSES, pauseJobSignal, resumeJobSignal, type JobSegment, type JobStatus } from '../contracts/jobs.js';
import { getJob, type JobRow } from '../db/repo/jobs.js';
import { findCheckpoint, jobCheckpoints } from '../lib/job-checkpoints.js';
import { auditedChange } from './audit.js';
import { requireOwnerOrAdmin, requireRole } from './auth.js';
import { ApiError, invalid, notFound } from './errors.js';

export interface JobControlAnswer {
  id: string;
  status: 'cancel_requested' | 'pause_requested' | 'resume_requested';
}

/** The caller's organization's job, or 404 (another organization's job does not exist for the caller). */
export async function jobOfCaller(c: Context<AppEnv>, deps: Pick<ApiDeps, 'db'>, id: string): Promise<JobRow> {
  requireRole(c, 'viewer');
  const row = await getJob(deps.db, c.get('principal').organizationId, id);
  if (!row) throw notFound(`job ${id}`);
  return row;
}

/**
 * The job, when the caller may change it: its submitter or an ml-admin. A pipeline's stage or a sweep's trial is
 * listed as a job but runs in its parent's workflow: it is steered through its parent, never on its own (a cancel
 * sent to that workflow would stop the whole pipeline or sweep). A dataset's preparation (a derive) runs in a
 * workflow of its own: it can be cancelled, but it has no checkpoint to pause at or resume from.
 */
async function controllable(c: Context<AppEnv>, deps: Pick<ApiDeps, 'db'>, id: string, change: 'cancel' | 'pause' | 'resume'): Promise<JobRow> {
  const row = await jobOfCaller(c, deps, id);
  requireOwnerOrAdmin(c, row.submittedBy, `job ${id}`);
  if (row.parent?.startsWith('dataset:')) {
    if (change !== 'cancel') throw new ApiError('INVALID_STATE', `job ${id} prepares ${row.parent.replace(':', ' ')}: it can be cancelled, not paused or resumed`);
    return row;
  }
  if (row.parent) throw new ApiError('INVALID_STATE', `job ${id} is part of ${row.parent}: cancel, pause or resume ${row.parent.replace(':', ' ')} instead`);
  return row;
}

/** Runs a change against the job's workflow; a workflow that is gone means the job can no longer change. */
async function toWorkflow(id: string, change: () => Promise<unknown>): Promise<void> {
  try {
    await change();
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) throw new ApiError('INVALID_STATE', `job ${id} has no running workflow`);
    throw err;
  }
}

/** Cancels a job: its process gets SIGTERM (a train job writes an emergency checkpoint); it ends cancelled. */
export async function cancelJob(c: Context<AppEnv>, deps: ApiDeps, id: string): Promise<JobControlAnswer> {
  const row = await controllable(c, deps, id, 'cancel');
  if (TERMINAL_JOB_STATUSES.includes(row.status as JobStatus)) throw new ApiError('INVALID_STATE', `job ${id} has already ended (${row.status})`);
  await toWorkflow(id, () => auditedChange(c, deps, { action: 'job.cancel', target: id }, () => deps.temporal.workflow.getHandle(row.workflowId).cancel()));
  return { id, status: 'cancel_requested' };
}

/**
 * Pauses a job: a running job writes a checkpoint and stops (its GPUs and its queue slot are freed), a queued one
 * leaves its queue; either ends `paused`, and its workflow waits (durably) for a resume.
 */
export async function pauseJob(c: Context<AppEnv>, deps: ApiDeps, id: string): Promise<JobControlAnswer> {
  const row = await controllable(c, deps, id, 'pause');
  if (!PAUSABLE_JOB_STATUSES.includes(row.status as JobStatus))
    throw new ApiError('INVALID_STATE', `job ${id} is ${row.status}: only a validating, queued or running job can be paused`);
  await toWorkflow(id, () => auditedChange(c, deps, { action: 'job.pause', target: id }, () => deps.temporal.workflow.getHandle(row.workflowId).signal(pauseJobSignal)));
  return { id, status: 'pause_requested' };
}

/**
 * Resumes a paused job from its newest checkpoint, or from `fromCheckpoint` (a step or URI of its checkpoints); a
 * checkpoint the job does not have is a 400 naming from_checkpoint.
 */
export async function resumeJob(c: Context<AppEnv>, deps: ApiDeps, id: string, fromCheckpoint?: number | string): Promise<JobControlAnswer> {
  const row = await controllable(c, deps, id, 'resume');
  if (row.status !== 'paused') throw new ApiError('INVALID_STATE', `job ${id} is ${row.status}: only a paused job can be resumed`);
  let from: { step: number; uri: string } | null = null;
  if (fromCheckpoint !== undefined) {
    if (row.kind !== 'recipe') throw invalid('from_checkpoint: a command job has no checkpoints the server knows of (it resumes as its command does)');
    const all = await jobCheckpoints(deps.store, row.segments as JobSegment[]);
    const found = findCheckpoint(all, fromCheckpoint);
    if (!found)
      throw invalid(`from_checkpoint: job ${id} has no checkpoint ${JSON.stringify(fromCheckpoint)} (its checkpoints: ${all.map((k) => k.step).join(', ') || 'none'})`);
    from = { step: found.step, uri: found.uri };
  }
  const detail = { from_checkpoint: from };
  await toWorkflow(id, () => auditedChange(c, deps, { action: 'job.resume', target: id, detail }, () => deps.temporal.workflow.getHandle(row.workflowId).signal(resumeJobSignal, detail)));
  return { id, status: 'resume_requested' };
}

// GET /v1/jobs/{id}: what is known of a job's execution, read from where the job itself writes it (its files in the
// object store: progress, recoveries, preemptions, checkpoints; the worker's placement.json) and from its run's
// metrics, so that it answers without a worker: segments (one per start or resume), attempts, where the latest one
// runs, checkpoints with their metrics, progress with the measured step rate and an ETA, and the device-hours and
// dollars so far.
import type { ApiDeps } from './deps.js';
import { JOB_FILES, JobPlacementSchema } from '../contracts/job-io.js';
import type { JobDetail, JobSegment, JobView } from '../contracts/jobs.js';
import { TrainProgressSchema, type TrainProgress } from '../contracts/trainer-job.js';
import type { JobRecovery, JobPreemption } from '../contracts/pipeline.js';
import type { JobRow } from '../db/repo/jobs.js';
import { metricsAtSteps, recentPoints } from '../db/repo/job-metrics.js';
import { readRecoveries, visibleRecoveries } from '../jobs/recovery.js';
import { readPreemptions } from '../jobs/preemptions.js';
import { JobFiles } from '../lib/job-files.js';
import { jobCheckpoints } from '../lib/job-checkpoints.js';
import { accountedGpuType } from '../lib/prices.js';

/** The series whose points time the steps: the trainer logs it once per step. */
const STEP_SERIES = 'train/loss';
/** Points the step rate is measured over. */
const RATE_WINDOW = 20;

interface SegmentFacts {
  attempts: JobDetail['attempts'];
  recoveries: JobRecovery[];
  preemptions: JobPreemption[];
  /** progress.json of its latest attempt */
  progress: Partial<TrainProgress> | null;
}

export async function jobDetail(deps: ApiDeps, row: JobRow, view: JobView): Promise<JobDetail> {
  const segments = row.segments as JobSegment[];
  const facts = await Promise.all(segments.map((s) => segmentFacts(deps, row.organizationId, s)));
  const latest = facts.at(-1)?.progress ?? null;
  const checkpoints = await checkpointsWithMetrics(deps, row, segments);
  return {
    ...view,
    segments,
    attempts: facts.flatMap((f) => f.attempts),
    recoveries: facts.flatMap((f) => f.recoveries),
    preemptions: facts.flatMap((f) => f.preemptions),
    placement: await placementOf(deps, row.organizationId, facts.at(-1)?.attempts.at(-1)?.job_name ?? null),
    checkpoints,
    progress: await progressOf(deps, row, segments.at(-1) ?? null, latest),
    usage: {
      gpu_type: gpuTypeOf(row),
      // The trainer's meter is carried in its checkpoints: the latest attempt's totals cover every segment before it.
      gpu_hours: latest?.totals?.device_hours ?? 0,
      cost_usd: latest?.totals ? latest.totals.cost_usd : null,
    },
  };
}

/**
 * What a list item of a running or paused job shows of its detail: progress and usage so far, read from its
 * current segment alone (the latest attempt's totals cover every segment before it).
 */
export async function jobProgressAndUsage(deps: ApiDeps, row: JobRow): Promise<Pick<JobDetail, 'progress' | 'usage'>> {
  const segment = (row.segments as JobSegment[]).at(-1) ?? null;
  const latest = segment ? (await segmentFacts(deps, row.organizationId, segment)).progress : null;
  return {
    progress: await progressOf(deps, row, segment, latest),
    usage: { gpu_type: gpuTypeOf(row), gpu_hours: latest?.totals?.device_hours ?? 0, cost_usd: latest?.totals ? latest.totals.cost_usd : null },
  };
}

/** A segment's attempts (the first, then one per restart: `<name>-r<n>`), recoveries and preemptions. */
async function segmentFacts(deps: ApiDeps, organizationId: string, s: JobSegment): Promise<SegmentFacts> {
  const logical = JobFiles.of(deps.store, deps.config, organizationId, s.job_name);
  const recoveries = visibleRecoveries(await readRecoveries(logical));
  const preemptions = await readPreemptions(logical);
  const attempts: JobDetail['attempts'] = [];
  let progress: Partial<TrainProgress> | null = null;
  for (let n = 1; n <= recoveries.length + 1; n++) {
    const name = n === 1 ? s.job_name : `${s.job_name}-r${n}`;
    progress = await JobFiles.of(deps.store, deps.config, organizationId, name).readJson(JOB_FILES.progress, TrainProgressSchema.partial());
    const why = n === 1 ? null : recoveries[n - 2]!;
    attempts.push({ segment: s.segment, attempt: n, job_name: name, reason: why ? `${why.kind}: ${why.change}` : null, step: progress?.step ?? null, resumed_from_step: progress?.resumed_from_step ?? null });
  }
  return { attempts, recoveries, preemptions, progress };
}

/**
 * Where the latest attempt runs (or ran), as the worker wrote it once it saw the attempt running: null for a
 * queued job, an attempt not seen running yet, or a job that ran before placements were written.
 */
async function placementOf(deps: ApiDeps, organizationId: string, attempt: string | null): Promise<JobDetail['placement']> {
  if (attempt === null) return null;
  return JobFiles.of(deps.store, deps.config, organizationId, attempt).readJson(JOB_FILES.placement, JobPlacementSchema);
}

async function checkpointsWithMetrics(deps: ApiDeps, row: JobRow, segments: JobSegment[]): Promise<JobDetail['checkpoints']> {
  const stored = await jobCheckpoints(deps.store, segments);
  const metrics = row.runId ? await metricsAtSteps(deps.db, row.runId, [...new Set(stored.map((c) => c.step))]) : new Map<number, Record<string, number>>();
  return stored.map((c) => ({ ...c, metrics: metrics.get(c.step) ?? {} }));
}

/**
 * Step, max_steps, the step rate measured over the latest logged steps of the current segment (a pause is not
 * counted as slow training), and the ETA it gives. Null for a job that reports no progress (a command job).
 */
async function progressOf(deps: ApiDeps, row: JobRow, segment: JobSegment | null, p: Partial<TrainProgress> | null): Promise<JobDetail['progress']> {
  if (!p || p.step === undefined || p.max_steps === undefined) return null;
  let rate: number | null = null;
  if (row.runId && segment && row.status === 'running') {
    const points = await recentPoints(deps.db, row.runId, STEP_SERIES, Date.parse(segment.started_at), RATE_WINDOW);
    const [newest, oldest] = [points[0], points.at(-1)];
    if (newest && oldest && newest.timestamp > oldest.timestamp && newest.step > oldest.step) rate = (newest.step - oldest.step) / ((newest.timestamp - oldest.timestamp) / 1000);
  }
  const left = Math.max(0, p.max_steps - p.step);
  return { step: p.step, max_steps: p.max_steps, steps_per_second: rate, eta_seconds: left === 0 ? 0 : rate ? left / rate : null };
}

function gpuTypeOf(row: JobRow): string {
  const spec = row.spec as { resources?: { gpus?: number; gpu_type?: string | null }; distributed?: { gpus_per_node?: number } };
  return accountedGpuType({ gpus_per_node: spec.distributed?.gpus_per_node ?? spec.resources?.gpus ?? 0, gpu_type: spec.resources?.gpu_type ?? null });
}

// A submitted recipe job's training progress as job events (db/repo/job-events.ts): each new step the worker sees
// in progress.json becomes a `metrics` event, each new checkpoint a `checkpoint` event and each trainer event (a
// checkpoint skipped on resume, out of memory, divergence) a `message` event, written in one insert per poll. What a restarted worker already recorded is read back first, so a re-attached job repeats no step.
import type { JobDeps } from './deps.js';
import type { TrainProgress } from '../contracts/trainer-job.js';
import { appendJobEvents, lastJobEventOfType, type NewJobEvent } from '../db/repo/job-events.js';

export type ProgressRecorder = (p: TrainProgress) => Promise<void>;

export function progressEvents(deps: Pick<JobDeps, 'db'>, organizationId: string, jobId: string): ProgressRecorder {
  let seen: Promise<{ step: number; checkpoint: string | null; eventAt: string }> | null = null;
  const recorded = async () => {
    const [metrics, checkpoint, message] = await Promise.all((['metrics', 'checkpoint', 'message'] as const).map((t) => lastJobEventOfType(deps.db, jobId, t)));
    return { step: Number(metrics?.data.step ?? -1), checkpoint: (checkpoint?.data.checkpoint as string | undefined) ?? null, eventAt: (message?.data.at as string | undefined) ?? '' };
  };
  return async (p) => {
    const last = await (seen ??= recorded());
    const rows: NewJobEvent[] = [];
    // A step at or below the last recorded one is a resumed attempt redoing steps after its checkpoint: already told.
    if (p.step > last.step && Object.keys(p.metrics).length > 0) {
      rows.push({ organizationId, jobId, level: 'info', type: 'metrics', message: `step ${p.step}/${p.max_steps}: ${metricsText(p.metrics)}`, data: { step: p.step, max_steps: p.max_steps, metrics: p.metrics } });
    }
    if (p.last_checkpoint && p.last_checkpoint !== last.checkpoint) {
      rows.push({ organizationId, jobId, level: 'info', type: 'checkpoint', message: `checkpoint ${p.last_checkpoint} written`, data: { checkpoint: p.last_checkpoint, step: p.step } });
    }
    // Trainer events come in time order (ISO-8601 UTC compares as text): those after the last one recorded are new.
    const fresh = p.events.filter((e) => e.at > last.eventAt);
    for (const e of fresh) rows.push({ organizationId, jobId, level: 'warn', type: 'message', message: e.message, data: { ...e } });
    if (rows.length === 0) return;
    await appendJobEvents(deps.db, rows);
    seen = Promise.resolve({ step: Math.max(last.step, p.step), checkpoint: p.last_checkpoint ?? last.checkpoint, eventAt: fresh.at(-1)?.at ?? last.eventAt });
  };
}

const metricsText = (m: Record<string, number>): string =>
  Object.entries(m)
    .map(([k, v]) => `${k}=${Number.isInteger(v) ? v : v.toPrecision(4)}`)
    .join(' ');

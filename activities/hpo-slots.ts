// A synthetic trial's place in its organization's admission gate. Synthetic trials stand in for training jobs
// (they are how sweeps and the scheduler are exercised without GPU time), so they count against
// scheduler.quotas.<org>.max_concurrent_jobs exactly as a LoRA trial's trainer job does (jobs/run-loop.ts).
import { Context, sleep } from '@temporalio/activity';
import type { ActivityDeps } from './deps.js';
import type { TrialInput } from '../contracts/hpo.js';
import { admissionGate, ADMISSION_STALE_AFTER_MS } from '../jobs/queue/admission.js';

/** How often a running trial tells the gate it still holds its slot: well inside the gate's staleness limit. */
const SLOT_REFRESH_MS = Math.min(60_000, ADMISSION_STALE_AFTER_MS / 4);
const POLL_MS = 500;

export interface TrialSlot {
  /** keeps the slot from going stale; cheap to call often (it asks the gate at most every SLOT_REFRESH_MS) */
  refresh(): Promise<void>;
  release(): Promise<void>;
}

/** The gate's name for a trial: stable across retries of its activity, so a retry finds the slot it held. */
export const trialSlotName = (t: Pick<TrialInput, 'sweep_id' | 'n'>): string => `hpo-${t.sweep_id}-trial-${t.n}`;

/** Waits until the trial's organization has a free slot (heartbeating while it waits) and takes it. */
export async function syntheticTrialSlot(deps: Pick<ActivityDeps, 'db' | 'config'>, t: TrialInput): Promise<TrialSlot> {
  // No machine GPUs are handed out: a synthetic trial uses none, whatever resources_per_trial says.
  const gate = admissionGate(deps.db, deps.config, null);
  if (!gate.enabled) return { refresh: async () => undefined, release: async () => undefined };
  const name = trialSlotName(t);
  const ask = () => gate.request({ name, organizationId: t.organization_id, priority: null, gpus: t.config.resources_per_trial.gpus, alreadyRunning: false });
  for (;;) {
    const answer = await ask();
    if (answer.admitted) break;
    // No heartbeat details: a retry must not mistake a waiting trial for one that had started stepping.
    Context.current().heartbeat();
    await sleep(POLL_MS);
  }
  let refreshedAt = Date.now();
  return {
    async refresh() {
      if (Date.now() - refreshedAt < SLOT_REFRESH_MS) return;
      refreshedAt = Date.now();
      await ask();
    },
    release: () => gate.release(name),
  };
}

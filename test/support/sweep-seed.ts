// A sweep of `trials` trials written straight into the catalogue (no Temporal, no training): a spread of statuses,
// ties in the first objective and completed trials without one, so the order the API documents is exercised.
import { SweepConfigSchema, type SweepWorkflowInput } from '../../contracts/hpo.js';
import type { Db } from '../../db/client.js';
import { createSweep, finishTrial, insertTrial } from '../../db/repo/hpo.js';
import { createRun } from '../../db/repo/runs.js';

export type Direction = 'minimize' | 'maximize';

/** Trial n's status and first objective. */
export function planned(n: number): { status: 'running' | 'completed' | 'pruned' | 'failed'; value: number | null } {
  if (n % 11 === 0) return { status: 'running', value: null };
  if (n % 7 === 0) return { status: 'pruned', value: null };
  if (n % 13 === 0) return { status: 'failed', value: null };
  if (n % 17 === 0) return { status: 'completed', value: null }; // finished without reporting the objective
  return { status: 'completed', value: (n * 37) % 50 }; // values repeat: ties go by number
}

/** The order the API documents, written out here on its own: valued completed trials by value, then the rest by number. */
export function ranked(direction: Direction, trials: number): number[] {
  const all = Array.from({ length: trials }, (_, n) => ({ n, ...planned(n) }));
  const valued = all.filter((t) => t.status === 'completed' && t.value !== null);
  const sign = direction === 'minimize' ? 1 : -1;
  valued.sort((a, b) => sign * (a.value! - b.value!) || a.n - b.n);
  return [...valued.map((t) => t.n), ...all.filter((t) => !valued.includes(t)).map((t) => t.n)];
}

/** Writes the sweep `id` of the dev organization with `trials` trials planned as above. */
export async function seedSweep(db: Db, id: string, direction: Direction, trials: number): Promise<void> {
  const config = SweepConfigSchema.parse({
    experiment: `paged-${id}`,
    base_config: { method: 'synthetic', function: 'learning-curve', max_steps: 20, eval_steps: 10 },
    search_space: { learning_rate: { type: 'log_uniform', min: 1e-4, max: 0.1 }, width: { type: 'int', min: 16, max: 1024 } },
    strategy: 'random',
    objective: { metric: 'eval/loss', direction },
    max_trials: trials,
  });
  const input = { sweep_id: id, config, organization_id: 'dev', requested_by: 'dev', runtime: { heartbeat_timeout: '30s', continue_as_new_after_events: 8000 } } as SweepWorkflowInput;
  const { experimentId } = await createSweep(db, input, 'file:///tmp/hpo');
  for (let n = 0; n < trials; n++) {
    const runId = `${id}-${n}`;
    await createRun(db, { id: runId, organizationId: 'dev', experimentId, name: runId, userId: 'dev', artifactUri: `file:///tmp/${runId}` });
    await insertTrial(db, { sweepId: id, number: n, runId, params: { learning_rate: 0.001 * (n + 1) } });
    const p = planned(n);
    if (p.status !== 'running')
      await finishTrial(db, id, n, {
        status: p.status,
        objectiveValues: p.value === null ? null : [p.value],
        metrics: { 'eval/loss': p.value ?? 0, 'train/loss': 1 },
        intermediate: [[10, 2], [20, 1]],
        steps: 20,
        gpuSeconds: 1,
        reason: p.status === 'pruned' ? 'pruned at step 10' : null,
      });
  }
}

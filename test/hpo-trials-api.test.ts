// A sweep's trials through the real app (createApp) on PGlite, without Temporal (these routes never reach it):
// GET /v1/hpo/{id}/trials best first on the first objective (completed trials with a value, ties by number, then
// every other trial by number) or by number, whole or a page at an offset with the total; `top` paged within the
// best N; GET /v1/hpo/{id}/trial-points with what the charts draw of every trial and no metrics or curves; bad
// paging refused with 400 naming the parameter; another organization's sweep 404.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SweepConfigSchema, type SweepWorkflowInput, type TrialPoints } from '../contracts/hpo.js';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { createSweep, finishTrial, insertTrial } from '../db/repo/hpo.js';
import { createRun } from '../db/repo/runs.js';
import { appWithoutTemporal } from './support/api-app.js';
import { DEV_TOKEN, testConfig } from './support/config.js';

const OTHER = 'token-of-another-org';
const TRIALS = 230;

interface TrialView {
  number: number;
  status: string;
  objective_values: number[] | null;
  metrics: Record<string, number>;
}
interface TrialsPage {
  trials: TrialView[];
  total: number;
  next_offset: number | null;
}

/** Trial n's status and first objective: a spread of statuses, ties in value, and completed trials without one. */
function planned(n: number): { status: 'running' | 'completed' | 'pruned' | 'failed'; value: number | null } {
  if (n % 11 === 0) return { status: 'running', value: null };
  if (n % 7 === 0) return { status: 'pruned', value: null };
  if (n % 13 === 0) return { status: 'failed', value: null };
  if (n % 17 === 0) return { status: 'completed', value: null }; // finished without reporting the objective
  return { status: 'completed', value: (n * 37) % 50 }; // values repeat: ties go by number
}

/** The order the API documents, written out here on its own: valued completed trials by value, then the rest by number. */
function ranked(direction: 'minimize' | 'maximize'): number[] {
  const all = Array.from({ length: TRIALS }, (_, n) => ({ n, ...planned(n) }));
  const valued = all.filter((t) => t.status === 'completed' && t.value !== null);
  const sign = direction === 'minimize' ? 1 : -1;
  valued.sort((a, b) => sign * (a.value! - b.value!) || a.n - b.n);
  return [...valued.map((t) => t.n), ...all.filter((t) => !valued.includes(t)).map((t) => t.n)];
}

describe('the trials of a sweep, paged', () => {
  let catalogue: Catalogue;
  let app: ReturnType<typeof appWithoutTemporal>;
  const sweeps: Record<'minimize' | 'maximize', string> = { minimize: 'sweep-min', maximize: 'sweep-max' };

  const get = async <T>(path: string, token = DEV_TOKEN) => {
    const res = await app.request(path, { headers: { authorization: `Bearer ${token}` } });
    return { status: res.status, body: (await res.json()) as T };
  };

  async function sweep(id: string, direction: 'minimize' | 'maximize'): Promise<void> {
    const config = SweepConfigSchema.parse({
      experiment: `paged-${direction}`,
      base_config: { method: 'synthetic', function: 'learning-curve', max_steps: 20, eval_steps: 10 },
      search_space: { learning_rate: { type: 'log_uniform', min: 1e-4, max: 0.1 }, width: { type: 'int', min: 16, max: 1024 } },
      strategy: 'random',
      objective: { metric: 'eval/loss', direction },
      max_trials: TRIALS,
    });
    const input = { sweep_id: id, config, organization_id: 'dev', requested_by: 'dev', runtime: { heartbeat_timeout: '30s', continue_as_new_after_events: 8000 } } as SweepWorkflowInput;
    const { experimentId } = await createSweep(catalogue.db, input, 'file:///tmp/hpo');
    for (let n = 0; n < TRIALS; n++) {
      const runId = `${id}-${n}`;
      await createRun(catalogue.db, { id: runId, organizationId: 'dev', experimentId, name: runId, userId: 'dev', artifactUri: `file:///tmp/${runId}` });
      await insertTrial(catalogue.db, { sweepId: id, number: n, runId, params: { learning_rate: 0.001 * (n + 1) } });
      const p = planned(n);
      if (p.status !== 'running')
        await finishTrial(catalogue.db, id, n, {
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

  beforeAll(async () => {
    catalogue = await openCatalogue({});
    await seedDevOrganization(catalogue.db, 'dev', DEV_TOKEN);
    await seedDevOrganization(catalogue.db, 'other-org', OTHER);
    app = appWithoutTemporal(catalogue.db, testConfig());
    await sweep(sweeps.minimize, 'minimize');
    await sweep(sweeps.maximize, 'maximize');
  }, 120_000);
  afterAll(async () => {
    await catalogue?.close();
  });

  /** Every page of `query`, `limit` at a time, by next_offset. */
  async function walk(id: string, query: string, limit: number): Promise<{ numbers: number[]; totals: number[]; pages: number }> {
    const numbers: number[] = [];
    const totals: number[] = [];
    let offset: number | null = 0;
    let pages = 0;
    while (offset !== null) {
      const res: { status: number; body: TrialsPage } = await get<TrialsPage>(`/v1/hpo/${id}/trials?${query}limit=${limit}&offset=${offset}`);
      expect(res.status).toBe(200);
      expect(res.body.trials.length).toBeLessThanOrEqual(limit);
      numbers.push(...res.body.trials.map((t) => t.number));
      totals.push(res.body.total);
      offset = res.body.next_offset;
      pages++;
    }
    return { numbers, totals, pages };
  }

  it('pages best first on the first objective, minimized or maximized: the same trials as the whole list, in order', async () => {
    for (const direction of ['minimize', 'maximize'] as const) {
      const whole = await get<TrialsPage>(`/v1/hpo/${sweeps[direction]}/trials`);
      expect(whole.body.trials.map((t) => t.number)).toEqual(ranked(direction));
      expect(whole.body.total).toBe(TRIALS);
      const paged = await walk(sweeps[direction], '', 40);
      expect(paged.numbers).toEqual(ranked(direction));
      expect(paged.pages).toBe(Math.ceil(TRIALS / 40));
      expect(new Set(paged.totals)).toEqual(new Set([TRIALS]));
    }
    const jump = await get<TrialsPage>(`/v1/hpo/${sweeps.minimize}/trials?limit=7&offset=150`);
    expect(jump.body.trials.map((t) => t.number)).toEqual(ranked('minimize').slice(150, 157));
    expect(jump.body.next_offset).toBe(157);
  });

  it('pages by number, and within one status', async () => {
    expect((await walk(sweeps.minimize, 'order=number&', 64)).numbers).toEqual(Array.from({ length: TRIALS }, (_, n) => n));
    const pruned = Array.from({ length: TRIALS }, (_, n) => n).filter((n) => planned(n).status === 'pruned');
    const byState = await walk(sweeps.minimize, 'state=pruned&order=number&', 5);
    expect(byState.numbers).toEqual(pruned);
    expect(byState.totals[0]).toBe(pruned.length);
  });

  it('pages within the best N completed trials with top', async () => {
    const best = ranked('minimize').slice(0, 12);
    expect((await get<TrialsPage>(`/v1/hpo/${sweeps.minimize}/trials?top=12`)).body.trials.map((t) => t.number)).toEqual(best);
    const paged = await walk(sweeps.minimize, 'top=12&', 5);
    expect(paged.numbers).toEqual(best);
    expect(paged.totals).toEqual([12, 12, 12]);
  });

  it("answers every trial's chart points, by number, without the trials' metrics or curves", async () => {
    const { status, body } = await get<TrialPoints>(`/v1/hpo/${sweeps.minimize}/trial-points`);
    expect(status).toBe(200);
    expect(body.points.map((p) => p.number)).toEqual(Array.from({ length: TRIALS }, (_, n) => n));
    for (const p of body.points) expect(Object.keys(p).sort()).toEqual(['ended_at', 'number', 'objective_values', 'params', 'status']);
    expect(body.points[1]).toMatchObject({ status: 'completed', objective_values: [37], params: { learning_rate: 0.002 } });
    expect(body.points[0]).toMatchObject({ status: 'running', objective_values: null, ended_at: null });
    expect(JSON.stringify(body)).not.toContain('train/loss');
  });

  it("refuses bad paging with 400 naming the parameter, and answers 404 for another organization's sweep", async () => {
    const cases: [string, RegExp][] = [
      ['limit=0', /limit/],
      ['limit=1001', /limit/],
      ['limit=ten', /limit/],
      ['offset=-1', /offset/],
      ['order=worst', /order/],
      ['top=3&order=number', /order/],
      ['top=3&state=pruned', /state/],
    ];
    for (const [q, message] of cases) {
      const res = await get<{ message: string }>(`/v1/hpo/${sweeps.minimize}/trials?${q}`);
      expect(res.status, q).toBe(400);
      expect(res.body.message, q).toMatch(message);
    }
    expect((await get(`/v1/hpo/${sweeps.minimize}/trials?limit=5`, OTHER)).status).toBe(404);
    expect((await get(`/v1/hpo/${sweeps.minimize}/trial-points`, OTHER)).status).toBe(404);
  });
});

// A sweep's trials through the real app (createApp) on PGlite, without Temporal (these routes never reach it):
// GET /v1/hpo/{id}/trials best first on the first objective (completed trials with a value, ties by number, then
// every other trial by number) or by number, whole or a page at an offset with the total; `top` paged within the
// best N; GET /v1/hpo/{id}/trial-points with what the charts draw of every trial and no metrics or curves; bad
// paging refused with 400 naming the parameter; another organization's sweep 404.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TrialPoints } from '../contracts/hpo.js';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { appWithoutTemporal } from './support/api-app.js';
import { DEV_TOKEN, testConfig } from './support/config.js';
import { planned, ranked as rankedOf, seedSweep, type Direction } from './support/sweep-seed.js';

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

const ranked = (direction: Direction): number[] => rankedOf(direction, TRIALS);

describe('the trials of a sweep, paged', () => {
  let catalogue: Catalogue;
  let app: ReturnType<typeof appWithoutTemporal>;
  const sweeps: Record<'minimize' | 'maximize', string> = { minimize: 'sweep-min', maximize: 'sweep-max' };

  const get = async <T>(path: string, token = DEV_TOKEN) => {
    const res = await app.request(path, { headers: { authorization: `Bearer ${token}` } });
    return { status: res.status, body: (await res.json()) as T };
  };

  beforeAll(async () => {
    catalogue = await openCatalogue({});
    await seedDevOrganization(catalogue.db, 'dev', DEV_TOKEN);
    await seedDevOrganization(catalogue.db, 'other-org', OTHER);
    app = appWithoutTemporal(catalogue.db, testConfig());
    await seedSweep(catalogue.db, sweeps.minimize, 'minimize', TRIALS);
    await seedSweep(catalogue.db, sweeps.maximize, 'maximize', TRIALS);
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

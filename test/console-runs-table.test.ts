// The runs table in a real headless Chromium (Debian's package, driven by playwright-core, as test/console.test.ts
// drives it) against the API app alone on PGlite: no Temporal, no pipeline, one experiment of 2,000 seeded runs.
// A drag of the scroll bar to the end draws the oldest runs there, fetched as the page at their offset once the
// drag rests, never the pages it passed over; the DOM holds a screenful of rows.
import { sql } from 'drizzle-orm';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createExperiment } from '../db/repo/experiments.js';
import { consoleInBrowser, type ConsoleBrowser } from './support/console-browser.js';

const RUNS = 2000;
const PAGE = 100;

describe('the runs table in a browser', () => {
  let app: ConsoleBrowser;
  let page: Page;
  let base = '';

  beforeAll(async () => {
    app = await consoleInBrowser(async (db) => {
      await createExperiment(db, { id: 'jump', organizationId: 'dev', name: 'jump', artifactLocation: 'file:///tmp/jump', tags: [] });
      // run-1 is the oldest: the last row of the default order (newest first).
      await db.execute(sql`insert into runs (id, organization_id, experiment_id, name, status, user_id, artifact_uri, start_time)
        select 'j' || lpad(g::text, 5, '0'), 'dev', 'jump', 'run-' || g, 'completed', 'dev', 'file:///tmp/jump/' || g, timestamptz '2026-01-01' + g * interval '1 minute'
        from generate_series(1, ${RUNS}) g`);
      await db.execute(sql`insert into run_params (run_id, key, value) select 'j' || lpad(g::text, 5, '0'), 'seq', g::text from generate_series(1, ${RUNS}) g`);
    });
    ({ page, base } = app);
  }, 120_000);

  afterAll(async () => {
    await app?.stop();
  });

  it('draws the oldest runs after a drag of the scroll bar to the end, fetching only the pages there', { timeout: 120_000 }, async () => {
    const offsets: number[] = [];
    page.on('request', (r) => {
      const u = new URL(r.url());
      if (u.pathname === '/v1/experiments/jump/runs') offsets.push(Number(u.searchParams.get('offset') ?? 0));
    });
    await page.goto(`${base}/experiments/jump?columns=params.seq`);
    await page.locator('tr[data-run]').first().waitFor({ timeout: 30_000 });
    await expect.poll(() => page.getByTestId('runs-total').textContent()).toContain(`${RUNS.toLocaleString('en-US')} runs`);
    expect(await page.locator('tr[data-index="0"] td:nth-child(2)').textContent()).toBe(`run-${RUNS}`);
    const before = offsets.length;

    // A drag: the scroll position sweeps the whole table in small steps, 10 ms apart, then rests at the end.
    await page.evaluate(async () => {
      const box = document.querySelector<HTMLElement>('.runs-scroll')!;
      for (let i = 1; i <= 20; i++) {
        box.scrollTop = ((box.scrollHeight - box.clientHeight) * i) / 20;
        await new Promise((r) => setTimeout(r, 10));
      }
    });
    const last = page.locator(`tr[data-index="${RUNS - 1}"][data-run]`);
    await last.waitFor({ timeout: 30_000 });
    expect(await last.locator('td:nth-child(2)').textContent()).toBe('run-1');
    expect(await last.locator('td:nth-child(5)').textContent()).toBe('1');
    // The drag passed over 19 pages; only those at the end were asked for, once.
    const jumped = offsets.slice(before);
    expect(jumped).toContain(RUNS - PAGE);
    expect(jumped.length).toBeLessThanOrEqual(3);
    expect(jumped.every((o) => o >= RUNS - 2 * PAGE)).toBe(true);
    expect(await page.locator('tr[data-run]').count()).toBeLessThan(80);
  });
});

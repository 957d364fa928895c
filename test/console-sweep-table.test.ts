// A sweep's trials table in a real headless Chromium (Debian's package, driven by playwright-core, as
// test/console.test.ts drives it) against the API app alone on PGlite: no Temporal, no training, one sweep of 520
// seeded trials (support/sweep-seed.ts). Stand-in: the sweep's workflow, which Temporal answers as not found (the
// page then shows the catalogue's status without the workflow's live progress, which is not what this is about). The table opens on the best trials; a drag of its scroll bar to the end
// draws the last trials of the ranking there, fetched as the pages at their offsets once the drag rests, never the
// pages it passed over; the DOM holds a screenful of rows.
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consoleInBrowser, type ConsoleBrowser } from './support/console-browser.js';
import { ranked, seedSweep } from './support/sweep-seed.js';

const TRIALS = 520;
const PAGE = 100; // console/src/pages/sweep.tsx
const SWEEP = 'sweep-paged';

describe("a sweep's trials table in a browser", () => {
  let app: ConsoleBrowser;
  let page: Page;
  let base = '';

  beforeAll(async () => {
    const notFound = async () => {
      throw new WorkflowNotFoundError('no Temporal in this test', SWEEP, undefined);
    };
    const temporal = { workflow: { getHandle: () => ({ describe: notFound, query: notFound }) } } as unknown as Client;
    app = await consoleInBrowser((db) => seedSweep(db, SWEEP, 'minimize', TRIALS), { temporal });
    ({ page, base } = app);
  }, 180_000);

  afterAll(async () => {
    await app?.stop();
  });

  it('opens on the best trials and draws the last of the ranking after a drag to the end, fetching only the pages there', { timeout: 120_000 }, async () => {
    const order = ranked('minimize', TRIALS);
    const offsets: number[] = [];
    page.on('request', (r) => {
      const u = new URL(r.url());
      if (u.pathname === `/v1/hpo/${SWEEP}/trials`) offsets.push(Number(u.searchParams.get('offset') ?? 0));
    });
    await page.goto(`${base}/sweeps/${SWEEP}`);
    const rows = page.locator('tr[data-trial]');
    await rows.first().waitFor({ timeout: 30_000 });
    await expect.poll(() => page.getByRole('heading', { name: /^Trials/ }).textContent()).toContain(`${TRIALS}, best first`);
    const numbersInView = async () => (await rows.evaluateAll((trs) => trs.map((tr) => Number(tr.getAttribute('data-trial'))))) as number[];
    expect((await numbersInView()).slice(0, 10)).toEqual(order.slice(0, 10));
    expect(offsets).toEqual([0]);
    const before = offsets.length;

    // A drag: the scroll position sweeps the whole table in five moves 10 ms apart (each farther than the rows in
    // view, so none reads as scrolling on), then rests at the end.
    await page.evaluate(async () => {
      const box = document.querySelector<HTMLElement>('.trials-scroll')!;
      for (let i = 1; i <= 5; i++) {
        box.scrollTop = ((box.scrollHeight - box.clientHeight) * i) / 5;
        await new Promise((r) => setTimeout(r, 10));
      }
    });
    await page.locator(`tr[data-trial="${order.at(-1)}"]`).waitFor({ timeout: 30_000 });
    // The rows drawn at the end are the ranking's last ones, in its order (the unfinished trials, by number).
    const end = await numbersInView();
    expect(end).toEqual(order.slice(order.length - end.length));
    expect(end.length).toBeGreaterThan(5);
    expect(end.length).toBeLessThan(80);
    // The drag passed over the middle pages; only those at the end were asked for.
    const jumped = offsets.slice(before);
    expect(jumped).toContain(Math.floor((TRIALS - 1) / PAGE) * PAGE);
    expect(jumped.length).toBeLessThanOrEqual(3);
    expect(jumped.every((o) => o >= TRIALS - 2 * PAGE)).toBe(true);
  });
});

// A sweep's trials table in a real headless Chromium (Debian's package, driven by playwright-core, as
// test/console.test.ts drives it) against the API app alone on PGlite: no Temporal, no training, one sweep of 520
// seeded trials (support/sweep-seed.ts). Stand-in: the sweep's workflow, which Temporal answers as not found (the
// page then shows the catalogue's status without the workflow's live progress, which is not what this is about). The table opens on the best trials; a drag of its scroll bar to the end
// draws the last trials of the ranking there, fetched as the pages at their offsets once the drag rests, never the
// pages it passed over; the DOM holds a screenful of rows.
import { existsSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consoleBuildDir } from '../api/routes/console.js';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { appWithoutTemporal } from './support/api-app.js';
import { DEV_TOKEN, testConfig } from './support/config.js';
import { ranked, seedSweep } from './support/sweep-seed.js';

const CHROMIUM = process.env.HANZO_ML_CHROMIUM ?? '/usr/bin/chromium';
const TRIALS = 520;
const PAGE = 100; // console/src/pages/sweep.tsx
const SWEEP = 'sweep-paged';

describe("a sweep's trials table in a browser", () => {
  let catalogue: Catalogue;
  let server: ServerType;
  let browser: Browser;
  let page: Page;
  let base = '';

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: run scripts/bootstrap.sh --tests (it installs Debian's chromium)`);
    const loaded = testConfig();
    if (!consoleBuildDir(loaded.config.server.console_dir, loaded.bootstrap)) throw new Error('the console is not built: run scripts/bootstrap.sh (its console phase builds it)');
    catalogue = await openCatalogue({});
    await seedDevOrganization(catalogue.db, 'dev', DEV_TOKEN);
    await seedSweep(catalogue.db, SWEEP, 'minimize', TRIALS);
    const notFound = async () => {
      throw new WorkflowNotFoundError('no Temporal in this test', SWEEP, undefined);
    };
    const temporal = { workflow: { getHandle: () => ({ describe: notFound, query: notFound }) } } as unknown as Client;
    server = serve({ fetch: appWithoutTemporal(catalogue.db, loaded, { temporal }).fetch, port: 0, hostname: '127.0.0.1' });
    await new Promise((r) => server.once('listening', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
    page = await (await browser.newContext({ viewport: { width: 1400, height: 1000 } })).newPage();
    await page.goto(`${base}/login`);
    await page.fill('#token', DEV_TOKEN);
    await page.click('button[type=submit]');
    await page.getByRole('heading', { name: 'Jobs' }).waitFor({ timeout: 30_000 });
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    server?.close();
    await catalogue?.close();
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

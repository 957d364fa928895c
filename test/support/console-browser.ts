// The console in a real headless Chromium (Debian's package, driven by playwright-core) against the API app alone
// on a PGlite catalogue (no Temporal unless the test passes its stand-in), logged in as the dev organization: for
// browser tests of one page over seeded rows.
import { existsSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import type { Client } from '@temporalio/client';
import { chromium, type Browser, type Page } from 'playwright-core';
import { consoleBuildDir } from '../../api/routes/console.js';
import { openCatalogue, type Catalogue, type Db } from '../../db/client.js';
import { seedDevOrganization } from '../../db/repo/auth.js';
import { appWithoutTemporal } from './api-app.js';
import { DEV_TOKEN, testConfig } from './config.js';

export const CHROMIUM = process.env.HANZO_ML_CHROMIUM ?? '/usr/bin/chromium';

export interface ConsoleBrowser {
  page: Page;
  /** the API's origin, http://127.0.0.1:<port> */
  base: string;
  stop(): Promise<void>;
}

/** Seeds the catalogue with `seed`, serves the app on a loopback port and logs a 1400x1000 page in. */
export async function consoleInBrowser(seed: (db: Db) => Promise<void>, o: { temporal?: Client } = {}): Promise<ConsoleBrowser> {
  if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: run scripts/bootstrap.sh --tests (it installs Debian's chromium)`);
  const loaded = testConfig();
  if (!consoleBuildDir(loaded.config.server.console_dir, loaded.bootstrap)) throw new Error('the console is not built: run scripts/bootstrap.sh (its console phase builds it)');
  const catalogue: Catalogue = await openCatalogue({});
  let server: ServerType | undefined;
  let browser: Browser | undefined;
  const stop = async () => {
    await browser?.close();
    server?.close();
    await catalogue.close();
  };
  try {
    await seedDevOrganization(catalogue.db, 'dev', DEV_TOKEN);
    await seed(catalogue.db);
    server = serve({ fetch: appWithoutTemporal(catalogue.db, loaded, { temporal: o.temporal }).fetch, port: 0, hostname: '127.0.0.1' });
    await new Promise((r) => server!.once('listening', r));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
    const page = await (await browser.newContext({ viewport: { width: 1400, height: 1000 } })).newPage();
    await page.goto(`${base}/login`);
    await page.fill('#token', DEV_TOKEN);
    await page.click('button[type=submit]');
    await page.getByRole('heading', { name: 'Jobs' }).waitFor({ timeout: 30_000 });
    return { page, base, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

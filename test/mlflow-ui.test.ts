// The MLflow UI (the pinned mlflow package's own static build) at /mlflow/, in a real headless Chromium (Debian's
// package, driven by playwright-core): the experiment list, a run's metric chart (the run page reads the run through
// MLflow's GraphQL endpoint, the chart's points through get-history-bulk-interval) and the model registry show data
// written through our API, and the UI cannot write. Requests without a token read as the viewer role here.
import { existsSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';

const CHROMIUM = process.env.HANZO_ML_CHROMIUM ?? '/usr/bin/chromium';
const EXPERIMENT = 'ui-visible-experiment';
const MODEL = 'ui-visible-model';

describe('MLflow UI at /mlflow/', () => {
  let stack: TestStack;
  let browser: Browser;
  let page: Page;
  let experimentId = '';
  let runId = '';
  const ui = (hash: string) => `${stack.runtime.apiUrl}/mlflow/#${hash}`;

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: run scripts/bootstrap.sh --tests (it installs Debian's chromium)`);
    stack = await startTestStack({ HANZO_ML_AUTH_ANONYMOUS_ROLE: 'viewer' }, { worker: false });
    const mlflow = async (path: string, body: unknown) => {
      const res = await stack.api('POST', `/api/2.0/mlflow/${path}`, body);
      expect(res.status).toBe(200);
      return res.body as Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
    };
    experimentId = (await mlflow('experiments/create', { name: EXPERIMENT })).experiment_id as string;
    const run = await mlflow('runs/create', { experiment_id: experimentId, run_name: 'ui-visible-run', start_time: Date.now(), tags: [] });
    runId = run.run.info.run_id as string;
    const metrics = Array.from({ length: 50 }, (_, step) => ({ key: 'ui_loss', value: 1 / (step + 1), timestamp: Date.now(), step }));
    await mlflow('runs/log-batch', { run_id: runId, metrics, params: [{ key: 'lr', value: '0.01' }], tags: [] });
    await mlflow('registered-models/create', { name: MODEL });
    await mlflow('model-versions/create', { name: MODEL, source: `runs:/${runId}/model`, run_id: runId });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
    page = await browser.newPage();
  });
  afterAll(async () => {
    await browser?.close();
    await stack?.stop();
  });

  it('serves the package build and lists our experiments', { timeout: 120_000 }, async () => {
    const index = await fetch(`${stack.runtime.apiUrl}/mlflow/`);
    expect(index.headers.get('content-type')).toContain('text/html');
    await page.goto(ui('/experiments'));
    await page.getByText(EXPERIMENT).first().waitFor({ timeout: 60_000 });
  });

  it("draws a run's metric chart from its logged history", { timeout: 120_000 }, async () => {
    const graphql: string[] = [];
    page.on('request', (r) => {
      if (r.url().endsWith('/mlflow/graphql')) graphql.push((r.postDataJSON() as { operationName: string }).operationName);
    });
    await page.goto(ui(`/experiments/${experimentId}/runs/${runId}/model-metrics`));
    await page.reload(); // a hash change alone does not reload the single-page app
    // The run's name comes from the GraphQL GetRun; the chart card is titled with the metric key.
    await page.getByText('ui-visible-run').first().waitFor({ timeout: 60_000 });
    const card = page.locator('.js-plotly-plot').filter({ has: page.locator('.scatterlayer .trace') }).first();
    await card.waitFor({ timeout: 60_000 });
    await page.getByText('ui_loss', { exact: true }).first().waitFor({ timeout: 10_000 });
    // One line with a marker at each of the 50 logged points (plotly simplifies the line path itself).
    expect(await card.locator('.scatterlayer .trace path.js-line').count()).toBeGreaterThan(0);
    expect(await card.locator('.scatterlayer .trace .points path.point').count()).toBe(50);
    expect(graphql).toContain('GetRun');
  });

  it('shows the model registry', { timeout: 120_000 }, async () => {
    await page.goto(ui('/models'));
    await page.getByText(MODEL).first().waitFor({ timeout: 60_000 });
  });

  it('refuses writes through the UI', async () => {
    const res = await fetch(`${stack.runtime.apiUrl}/mlflow/ajax-api/2.0/mlflow/experiments/create`, { method: 'POST', body: JSON.stringify({ name: 'x' }), headers: { 'content-type': 'application/json' } });
    expect(res.status).toBe(403);
    const read = await fetch(`${stack.runtime.apiUrl}/mlflow/ajax-api/2.0/mlflow/experiments/search`, { method: 'POST', body: JSON.stringify({ max_results: 10 }), headers: { 'content-type': 'application/json' } });
    expect(((await read.json()) as { experiments: { name: string }[] }).experiments.map((e) => e.name)).toContain(EXPERIMENT);
  });
});

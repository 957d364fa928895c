// The web console at / in a real headless Chromium (Debian's package, driven by playwright-core), on the real
// embedded stack: signing in (a bad token refused; the session an HttpOnly cookie; a write without the CSRF header
// refused), the file's one real pipeline started from the New fine-tune page (upload, counts and preview, the recipe,
// both estimates; a refused upload listed by line and field), the jobs list showing a running job, cancelling it
// from its page, the MLflow UI working with only the cookie, and that pipeline's approval page (a viewer sees no
// approve button and the API refuses the call; an approver approves it and its model version reaches production).
// The registry page shows the pipeline's approved version with its lineage graph; one small real sweep (synthetic
// trials, seconds of work) feeds the sweep pages. Screenshots of every page are written to
// test-results/console-screenshots/ (git-ignored) as the run goes. The file takes 7-14 minutes on 2 busy cores,
// nearly all of it the pipeline's training, eval and validation.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEMO_DATASET, demoPipelineRequest } from '../cli/demo.js';
import type { Dataset } from '../contracts/datasets.js';
import type { JobDetail } from '../contracts/jobs.js';
import { insertJob, QUEUE_EVENT_MIN_MS, setJobQueue, setJobStatus } from '../db/repo/jobs.js';
import { DEFAULT_BASE_MODEL } from '../lib/base-models.js';
import { CONSOLE_CSP } from '../api/routes/console.js';
import type { RunsPage, SeriesBatch } from '../contracts/console.js';
import { repoRoot } from '../lib/config.js';
import type { ModelLineage } from '../contracts/models.js';
import { num } from '../console/src/format.js';
import { DEV_TOKEN } from './support/config.js';
import { startTestStack, type TestStack } from './support/stack.js';

const CHROMIUM = process.env.HANZO_ML_CHROMIUM ?? '/usr/bin/chromium';
const SCREENSHOTS = join(repoRoot, 'test-results', 'console-screenshots');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface PipelineStatus {
  status: string;
  progress: { awaiting_approval: boolean; stage: string; error: string | null; model_version: { name: string; version: number; stage: string } | null };
}

describe('web console at /', () => {
  let stack: TestStack;
  let browser: Browser;
  let admin: BrowserContext;
  let page: Page;
  let viewerToken = '';
  let jobId = '';
  let pipelineId = '';
  const url = (path: string) => `${stack.runtime.apiUrl}${path}`;

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: run scripts/bootstrap.sh --tests (it installs Debian's chromium)`);
    stack = await startTestStack();
    if (!(await fetch(url('/')).then((r) => r.headers.get('content-type') ?? '')).includes('text/html'))
      throw new Error('the console is not built: run scripts/bootstrap.sh (its console phase builds it)');
    const viewer = await stack.api<{ token: string }>('POST', '/v1/tokens', { subject: 'console-viewer', role: 'ml-viewer' });
    expect(viewer.status).toBe(201);
    viewerToken = viewer.body.token;
    jobId = await startTicker('console-ticker', 'tick');
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
    admin = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
    page = await admin.newPage();
  });

  afterAll(async () => {
    await browser?.close();
    await stack?.stop();
  });

  /** A command job that runs until cancelled, printing `word` and a count once a second; answers its id. */
  async function startTicker(name: string, word: string): Promise<string> {
    const job = await stack.api<{ id: string }>('POST', '/v1/jobs', {
      type: 'training',
      name,
      image: 'trainer',
      command: ['python3', '-u', '-c', `import time\nfor i in range(900):\n    print('${word}', i)\n    time.sleep(1)`],
    });
    expect(job.status).toBe(201);
    return job.body.id;
  }

  /** A screenshot of the page as it is now, for a reader of the run (test-results/ is git-ignored). */
  const shot = async (name: string, p: Page) => {
    mkdirSync(SCREENSHOTS, { recursive: true });
    await p.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
  };

  async function signIn(p: Page, token: string): Promise<void> {
    await p.goto(url('/login'));
    await p.fill('#token', token);
    await p.click('button[type=submit]');
    await p.getByRole('heading', { name: 'Jobs' }).waitFor({ timeout: 30_000 });
  }

  it('serves every console path as the page, under a strict CSP, and leaves the API its own 404s', async () => {
    const deep = await fetch(url('/jobs/some-job-id'));
    expect(deep.status).toBe(200);
    expect(deep.headers.get('content-security-policy')).toBe(CONSOLE_CSP);
    expect(CONSOLE_CSP).toContain("frame-ancestors 'none'");
    expect(CONSOLE_CSP).not.toContain('unsafe-inline');
    const html = await deep.text();
    expect(html).not.toMatch(/<script>(?!<\/script>)|<style>|style="/);
    const asset = /src="(\/assets\/[^"]+\.js)"/.exec(html)![1]!;
    const js = await fetch(url(asset));
    expect(js.headers.get('cache-control')).toContain('immutable');
    expect((await fetch(url('/assets/..%2f..%2f..%2fetc%2fpasswd'))).status).toBe(404);
    for (const path of ['/v1/no-such-thing', '/api/2.0/mlflow/no-such-thing', '/mlflow/no-such-thing']) {
      const res = await fetch(url(path), { headers: { authorization: `Bearer ${DEV_TOKEN}` } });
      expect(res.status, path).toBe(404);
      expect(res.headers.get('content-type'), path).toContain('application/json');
    }
  });

  it('refuses a bad token, then signs in with an HttpOnly SameSite=Strict cookie whose writes need the CSRF header', { timeout: 120_000 }, async () => {
    await page.goto(url('/jobs'));
    await page.waitForURL(/\/login\?next=%2Fjobs$/);
    await page.fill('#token', 'not-a-token');
    await page.click('button[type=submit]');
    await expect.poll(() => page.getByRole('alert').textContent(), { timeout: 10_000 }).toMatch(/unknown, expired or revoked/);
    expect(await admin.cookies()).toEqual([]);
    await shot('login', page);

    await signIn(page, DEV_TOKEN);
    const cookies = await admin.cookies();
    const session = cookies.find((c) => c.name === 'hanzo_ml_session')!;
    expect(session).toMatchObject({ httpOnly: true, sameSite: 'Strict', path: '/' });
    expect(session.value).not.toContain(DEV_TOKEN);
    expect(await page.evaluate(() => document.cookie)).not.toContain('hanzo_ml_session');

    // The cookie alone reads; a write from the page without the header is refused, with it accepted.
    const write = (csrf: boolean) =>
      page.evaluate(async (withHeader) => {
        const token = /hanzo_ml_csrf=([^;]+)/.exec(document.cookie)?.[1] ?? '';
        const res = await fetch('/api/2.0/mlflow/experiments/create', {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(withHeader ? { 'x-csrf-token': token } : {}) },
          body: JSON.stringify({ name: `console-csrf-${withHeader}` }),
        });
        return { status: res.status, body: (await res.json()) as { message?: string } };
      }, csrf);
    const refused = await write(false);
    expect(refused.status).toBe(403);
    expect(refused.body.message).toContain('x-csrf-token');
    expect((await write(true)).status).toBe(200);
    const me = await page.evaluate(() => fetch('/v1/session').then((r) => r.json()));
    expect(me).toMatchObject({ subject: 'dev', role: 'ml-admin', approver: true });
  });

  // The file's one pipeline, started here from the New fine-tune page by the signed-in admin, and early: it trains,
  // evaluates and waits at the gate while the tests below run; the approval tests read pipelineId. Short training
  // (the demo's recipe at 30 steps, a checkpoint every 15 keeping 2) so it reaches the gate and waits for a human.
  // Its model's quality is not what these tests are about: the validation thresholds are opened wide so 30 steps pass.
  it('starts a fine-tune from the New fine-tune page: upload, counts and preview, the recipe under Advanced, both estimates before Start', { timeout: 300_000 }, async () => {
    await page.getByRole('link', { name: 'New fine-tune' }).click();
    await page.waitForURL(/\/new$/);
    await page.setInputFiles('#dataset-file', DEMO_DATASET);
    await page.fill('#dataset-name', 'console-demo');
    await page.getByRole('button', { name: 'Upload', exact: true }).click();
    const summary = page.locator('.dataset-summary');
    await summary.waitFor({ timeout: 180_000 });
    // The version's stored counts and token counts, and a preview of its train split.
    const listed = await stack.api<{ datasets: Dataset[] }>('GET', '/v1/datasets?name=console-demo');
    const version = listed.body.datasets[0]!;
    expect(version.splits).not.toBeNull();
    const splits = version.splits!;
    expect(await summary.locator('tr[data-split="train"] td').nth(1).textContent()).toBe(String(splits.train.num_records));
    expect(await page.getByTestId('dataset-tokens').textContent()).toBe(String(splits.train.tokens! + splits.validation.tokens! + splits.test.tokens!));
    await expect.poll(() => page.getByTestId('dataset-preview').locator('li').count(), { timeout: 30_000 }).toBe(5);
    expect(await page.getByTestId('dataset-preview').textContent()).toContain('assistant');

    // LoRA by default, the base model the tokens were counted with; the contract's defaults under Advanced.
    expect(await page.inputValue('#method')).toBe('lora');
    expect(await page.inputValue('#base-model')).toBe(DEFAULT_BASE_MODEL);
    await page.fill('#model-name', 'console-model');
    await page.locator('details.advanced summary').click();
    expect(await page.inputValue('[name="hyperparameters.lora_rank"]')).toBe('16');
    expect(await page.inputValue('[name="hyperparameters.max_steps"]')).toBe('200');
    expect(await page.inputValue('[name="checkpoint.every_steps"]')).toBe('25');
    // The cost of the defaults first (200 steps), then of the recipe as filled in: the estimate follows the form.
    const cost = page.getByTestId('cost-estimate');
    await expect.poll(() => cost.textContent(), { timeout: 90_000 }).toMatch(/steps\s*200 \(/);
    const demo = demoPipelineRequest().hyperparameters!;
    const recipe: Record<string, string | number> = {
      'hyperparameters.learning_rate': demo.learning_rate,
      'hyperparameters.max_steps': 30,
      'hyperparameters.warmup_steps': demo.warmup_steps!,
      'hyperparameters.lora_rank': demo.lora_rank!,
      'hyperparameters.lora_alpha': demo.lora_alpha!,
      'hyperparameters.target_modules': demo.target_modules!.join(', '),
      'hyperparameters.max_seq_length': demo.max_seq_length!,
      'checkpoint.every_steps': 15,
      'checkpoint.keep_last': 2,
      'validate.max_perplexity': 1e9,
      'validate.quantized_max_perplexity': 1e9,
    };
    for (const [name, value] of Object.entries(recipe)) await page.fill(`[name="${name}"]`, String(value));
    await expect.poll(() => cost.textContent(), { timeout: 90_000 }).toMatch(/steps\s*30 \(/);
    expect(await cost.textContent()).toMatch(/tokens[\d,]+.*GPU-hours.*cost\$[\d.]+.*budget/s);
    const memory = page.getByTestId('memory-estimate');
    await expect.poll(() => memory.textContent(), { timeout: 90_000 }).toMatch(/^Memory on \S+(fits|does not fit)/);
    await shot('new-fine-tune', page);

    const [answer] = await Promise.all([
      page.waitForResponse((r) => new URL(r.url()).pathname === '/v1/pipelines' && !r.url().includes('dry_run') && r.request().method() === 'POST'),
      page.getByRole('button', { name: 'Start fine-tune' }).click(),
    ]);
    expect(answer.status()).toBe(201);
    pipelineId = ((await answer.json()) as { id: string }).id;
    const sent = answer.request().postDataJSON() as Record<string, Record<string, unknown>>;
    expect(sent.dataset).toEqual({ name: 'console-demo', version: version.version });
    expect(sent.hyperparameters).toMatchObject({ max_steps: 30, learning_rate: demo.learning_rate, target_modules: demo.target_modules, batch_size: 8 });
    expect(sent.checkpoint).toMatchObject({ every_steps: 15, keep_last: 2 });
    expect(sent.validate).toEqual({ max_perplexity: 1e9, quantized_max_perplexity: 1e9 });
    // The page opens the pipeline's training job once it exists (else the jobs list).
    await page.waitForURL(/\/jobs(\/[^/]+)?$/, { timeout: 60_000 });
    expect((await stack.api<{ status: string }>('GET', `/v1/pipelines/${pipelineId}`)).body.status).toBe('RUNNING');
  });

  it('lists the running job with its status', { timeout: 120_000 }, async () => {
    await expect.poll(async () => (await stack.api<{ status: string }>('GET', `/v1/jobs/${jobId}`)).body.status, { timeout: 90_000, interval: 1000 }).toBe('running');
    await page.goto(url('/jobs'));
    const row = page.locator(`tr[data-job="${jobId}"]`);
    await row.waitFor({ timeout: 30_000 });
    await expect.poll(() => row.locator('.status').textContent(), { timeout: 15_000 }).toBe('running');
    expect(await row.textContent()).toContain('console-ticker');
    await shot('jobs', page);
  });

  it("streams the job's log on its page and stops the job with its cancel button", { timeout: 180_000 }, async () => {
    await page.locator(`tr[data-job="${jobId}"] a`).click();
    await page.waitForURL(new RegExp(`/jobs/${jobId}$`));
    await expect.poll(() => page.getByTestId('job-log').textContent(), { timeout: 60_000 }).toMatch(/tick \d+/);
    await shot('job', page);
    await page.getByRole('button', { name: 'Cancel' }).click();
    await expect.poll(() => page.getByRole('status').textContent(), { timeout: 10_000 }).toMatch(/Cancel requested/);
    await expect.poll(async () => (await stack.api<{ status: string }>('GET', `/v1/jobs/${jobId}`)).body.status, { timeout: 120_000, interval: 1000 }).toBe('cancelled');
    await expect.poll(() => page.locator('h1 .status').textContent(), { timeout: 15_000 }).toBe('cancelled');
    await shot('job-cancelled', page);
  });

  it('opens the MLflow UI with only the session cookie', { timeout: 120_000 }, async () => {
    // This stack refuses requests without credentials: the UI's reads succeed only through the cookie.
    expect((await fetch(url('/mlflow/ajax-api/2.0/mlflow/experiments/search'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })).status).toBe(401);
    await page.goto(url('/mlflow/#/experiments'));
    await page.getByText('console-csrf-true').first().waitFor({ timeout: 60_000 });
    await shot('mlflow', page);
  });

  it('shows a viewer the gate report without an approve button, and the API refuses their approval', { timeout: 25 * 60_000 }, async () => {
    await waitForPipeline(stack, pipelineId, (s) => s.progress.awaiting_approval, 20 * 60_000);
    const viewer = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
    const vpage = await viewer.newPage();
    await signIn(vpage, viewerToken);
    await vpage.goto(url(`/pipelines/${pipelineId}/approval`));
    await vpage.getByRole('heading', { name: /^Gate / }).waitFor({ timeout: 30_000 });
    await vpage.getByText(/your role \(ml-viewer\) cannot approve/).waitFor();
    expect(await vpage.getByRole('button', { name: 'Approve' }).count()).toBe(0);
    await shot('approval-viewer', vpage);
    const refused = await vpage.evaluate(async (id) => {
      const token = /hanzo_ml_csrf=([^;]+)/.exec(document.cookie)?.[1] ?? '';
      const res = await fetch(`/v1/pipelines/${id}/approve`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-csrf-token': token }, body: JSON.stringify({ reason: 'viewer tries' }) });
      return { status: res.status, body: (await res.json()) as { message: string } };
    }, pipelineId);
    expect(refused.status).toBe(403);
    expect(refused.body.message).toMatch(/ml-viewer/);
    await viewer.close();
  });

  it('lets an approver approve with a reason, and the model version reaches production', { timeout: 10 * 60_000 }, async () => {
    await page.goto(url(`/pipelines/${pipelineId}/approval`));
    await page.getByRole('heading', { name: /^Gate / }).waitFor({ timeout: 30_000 });
    expect(await page.locator('table.gate tbody tr').count()).toBeGreaterThan(0);
    await shot('approval', page);
    await page.fill('#reason', 'console test: gate report reviewed');
    await page.getByRole('button', { name: 'Approve' }).click();
    await expect.poll(() => page.getByRole('status').textContent(), { timeout: 30_000 }).toMatch(/Approved/);
    await waitForPipeline(stack, pipelineId, (s) => s.status === 'COMPLETED', 5 * 60_000);
    const versions = await stack.api<{ versions: { stage: string }[] }>('GET', '/v1/models/console-model/versions');
    expect(versions.body.versions.map((v) => v.stage)).toEqual(['production']);
    await page.reload();
    await page.getByText(/approved by dev: console test: gate report reviewed/).waitFor({ timeout: 30_000 });
  });

  it("plots the pipeline's training job from its run's logged metrics", { timeout: 120_000 }, async () => {
    const training = await stack.api<{ jobs: { id: string }[] }>('GET', `/v1/jobs?parent=pipeline:${pipelineId}&type=training`);
    await page.goto(url(`/jobs/${training.body.jobs[0]!.id}`));
    // uPlot draws on a canvas, and only once the chart is on screen: the loss chart is.
    await page.locator('section[data-chart="loss"] canvas').first().waitFor({ timeout: 60_000 });
    expect(await page.locator('section[data-chart="loss"] .u-legend').textContent()).toContain('loss');
    // Its checkpoints as the job lists them (a pipeline's stage lists none: the pipeline's checkpoint watch keeps
    // them, and the registry's lineage shows them), with the metrics at their steps; an ended job offers no resume.
    const detail = await stack.api<JobDetail>('GET', `/v1/jobs/${training.body.jobs[0]!.id}`);
    const steps = detail.body.checkpoints.map((c) => String(c.step));
    expect(await page.locator('section.checkpoints tbody tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-step')))).toEqual(steps);
    for (const key of new Set(detail.body.checkpoints.flatMap((c) => Object.keys(c.metrics)))) expect(await page.locator('section.checkpoints thead').textContent()).toContain(key);
    expect(await page.getByRole('button', { name: 'Resume from here' }).count()).toBe(0);
    await shot('job-training', page);
  });
  // New fine-tune (pages/new.tsx): what the page shows when the API refuses the input.
  it('lists a refused upload by line and field: a JSONL whose third line lacks a required field', { timeout: 120_000 }, async () => {
    const good = readFileSync(DEMO_DATASET, 'utf8').split('\n').slice(0, 2);
    const bad = JSON.stringify({ messages: [{ role: 'user', content: 'Where is my parcel?' }, { role: 'assistant' }] });
    const file = join(mkdtempSync(join(tmpdir(), 'console-upload-')), 'bad-upload.jsonl');
    writeFileSync(file, [...good, bad, ''].join('\n'));
    await page.goto(url('/new'));
    await page.setInputFiles('#dataset-file', file);
    await page.getByRole('button', { name: 'Upload', exact: true }).click();
    const rows = page.locator('table.issues tbody tr');
    await rows.first().waitFor({ timeout: 60_000 });
    expect(await rows.count()).toBe(1);
    const [name, where, field, expected] = await rows.first().locator('td').allTextContents();
    expect({ name, where, field, expected }).toEqual({ name: 'bad-upload.jsonl', where: 'line 3', field: 'messages[1].content', expected: 'string' });
    expect(await page.getByRole('alert').textContent()).not.toContain('{');
    expect(await page.locator('.dataset-summary').count()).toBe(0);
    await shot('new-bad-upload', page);
  });

  it("refuses a bad setting at Start with the API's message, marking the field", { timeout: 120_000 }, async () => {
    await page.goto(url('/new'));
    const demo = await stack.api<{ datasets: Dataset[] }>('GET', '/v1/datasets?name=console-demo');
    await page.selectOption('#dataset-version', demo.body.datasets[0]!.id);
    await page.locator('.dataset-summary').waitFor({ timeout: 30_000 });
    await page.fill('#model-name', 'console-refused');
    await page.locator('details.advanced summary').click();
    await page.fill('[name="hyperparameters.max_steps"]', '-5');
    await page.getByRole('button', { name: 'Start fine-tune' }).click();
    await expect.poll(() => page.locator('ul.errors').textContent(), { timeout: 30_000 }).toMatch(/^hyperparameters\.max_steps .+/);
    expect(await page.getAttribute('[name="hyperparameters.max_steps"]', 'aria-invalid')).toBe('true');
    await shot('new-refused-start', page);
    const pipelines = await stack.api<{ pipelines: { model_name: string }[] }>('GET', '/v1/pipelines');
    expect(pipelines.body.pipelines.map((p) => p.model_name)).not.toContain('console-refused');
  });

  // Registry and sweeps pages: /models, /models/{name}/{version} (the lineage graph), /sweeps, /sweeps/{id}.
  it("shows the approved pipeline's version in the registry and its lineage graph, from the dataset's sha256 to the gguf checksum", { timeout: 120_000 }, async () => {
    const versions = await stack.api<{ versions: { version: number; stage: string }[] }>('GET', '/v1/models/console-model/versions');
    const version = versions.body.versions.find((v) => v.stage === 'production')!.version;
    const lineage = (await stack.api<ModelLineage>('GET', `/v1/models/console-model/versions/${version}/lineage`)).body;
    const gguf = lineage.formats.find((f) => f.name.startsWith('gguf'));
    expect(gguf, `formats: ${lineage.formats.map((f) => f.name).join(', ')}`).toBeDefined();
    expect(lineage.pipeline?.id).toBe(pipelineId);

    await page.goto(url('/models'));
    const card = page.locator(`section[data-model="console-model"] .stage-production a[data-version="${version}"]`);
    await card.waitFor({ timeout: 30_000 });
    await shot('models', page);
    await card.click();
    await page.waitForURL(new RegExp(`/models/console-model/${version}$`));
    const graph = page.getByTestId('lineage-graph');
    await graph.waitFor({ timeout: 30_000 });
    const text = (await graph.textContent()) ?? '';
    expect(text).toContain(lineage.dataset!.sha256.slice(0, 12));
    expect(text).toContain(gguf!.checksum.replace(/^sha256:/, '').slice(0, 16));
    expect(text).toContain('production');
    // Each job of the pipeline is a node linking to its page, and the run links to the MLflow UI.
    const training = lineage.jobs.find((j) => j.type === 'training')!;
    expect(await graph.locator(`a[href="/jobs/${training.id}"]`).count()).toBe(1);
    expect(await graph.locator(`a[href="${lineage.run!.mlflow_path}"]`).count()).toBe(1);
    await shot('model-lineage', page);
    await graph.locator(`a[href="/jobs/${training.id}"]`).click();
    await page.waitForURL(new RegExp(`/jobs/${training.id}$`));
  });

  it('draws a real multi-objective sweep: its trials best first, best so far, parallel coordinates and the Pareto front', { timeout: 5 * 60_000 }, async () => {
    const started = await stack.api<{ id: string }>('POST', '/v1/hpo', {
      experiment: 'console-sweep',
      base_config: { method: 'synthetic', function: 'learning-curve', max_steps: 20, eval_steps: 10 },
      search_space: { learning_rate: { type: 'log_uniform', min: 1e-4, max: 0.1 }, width: { type: 'int', min: 16, max: 1024 } },
      strategy: 'evolutionary',
      objective: [{ metric: 'eval/loss', direction: 'minimize' }, { metric: 'model/parameters', direction: 'minimize' }],
      max_trials: 8,
      max_concurrent_trials: 4,
      seed: 4,
    });
    expect(started.status).toBe(201);
    const id = started.body.id;
    await expect.poll(async () => (await stack.api<{ status: string }>('GET', `/v1/hpo/${id}`)).body.status, { timeout: 4 * 60_000, interval: 2000 }).toBe('completed');
    const trials = (await stack.api<{ trials: { number: number; status: string; objective_values: number[] | null }[] }>('GET', `/v1/hpo/${id}/trials`)).body.trials;
    const done = trials.filter((t) => t.status === 'completed');
    expect(done.length).toBeGreaterThan(2);
    // The front by definition (nothing better on both objectives), not by the page's own function.
    const dominated = (t: (typeof done)[number]) => done.some((o) => o.objective_values!.every((v, i) => v <= t.objective_values![i]!) && o.objective_values!.some((v, i) => v < t.objective_values![i]!));
    const front = done.filter((t) => !dominated(t)).map((t) => t.number).sort((a, b) => a - b);

    await page.goto(url('/sweeps'));
    await page.locator(`tr[data-sweep="${id}"] a`).click();
    await page.waitForURL(new RegExp(`/sweeps/${id}$`));
    await expect.poll(() => page.locator('table.trials tbody tr').count(), { timeout: 30_000 }).toBe(trials.length);
    // Best first, as the API ranks them.
    expect(await page.locator('table.trials tbody tr').first().getAttribute('data-trial')).toBe(String(trials[0]!.number));
    const drawn = await page.locator('[data-testid="pareto"] circle.front-point').evaluateAll((els) => els.map((e) => Number(e.getAttribute('data-trial'))).sort((a, b) => a - b));
    expect(drawn).toEqual(front);
    expect(await page.locator('[data-testid="parallel-coordinates"] path.pc-line').count()).toBe(trials.length);
    const axes = await page.locator('[data-testid="parallel-coordinates"] g[data-axis]').evaluateAll((els) => els.map((e) => e.getAttribute('data-axis')));
    expect(axes.sort()).toEqual(['eval/loss', 'learning_rate', 'model/parameters', 'width']);
    expect(await page.locator('[data-testid="best-so-far"] path.best-line').count()).toBe(1);
    await shot('sweep', page);
    await page.goto(url('/sweeps'));
    await page.locator(`tr[data-sweep="${id}"]`).waitFor();
    await shot('sweeps', page);
  });

  // Queues and usage page; the job page on one stream.
  let queuedJobId = '';

  it("shows an admin the queues page with a running job and this organization's GPU-hours per month", { timeout: 180_000 }, async () => {
    queuedJobId = await startTicker('console-queue-ticker', 'beat');
    await expect.poll(async () => (await stack.api<{ status: string }>('GET', `/v1/jobs/${queuedJobId}`)).body.status, { timeout: 90_000, interval: 1000 }).toBe('running');
    await page.goto(url('/jobs'));
    await page.getByRole('link', { name: 'Queues' }).click();
    await page.getByRole('heading', { name: 'Queues and usage' }).waitFor({ timeout: 30_000 });
    const row = page.locator(`table.active-jobs tr[data-job="${queuedJobId}"]`);
    await row.waitFor({ timeout: 15_000 });
    expect(await row.locator('.status').textContent()).toBe('running');
    expect(await row.locator('a').getAttribute('href')).toBe(`/jobs/${queuedJobId}`);
    // This month's row is the API's: the pipeline's finished training is counted in it.
    const me = await stack.api<{ organization: string }>('GET', '/v1/session');
    const usage = await stack.api<{ month: string; organizations: { organization_id: string; gpu_hours: number; jobs: number }[] }>('GET', `/v1/usage?organization=${me.body.organization}`);
    const own = usage.body.organizations[0]!;
    expect(own.jobs).toBeGreaterThanOrEqual(1);
    const month = page.locator(`table.usage tr[data-month="${usage.body.month}"][data-organization="${own.organization_id}"]`);
    expect((await month.locator('td').allTextContents()).slice(0, 3)).toEqual([usage.body.month, own.organization_id, num(own.gpu_hours, 3)]);
    const months = await page.locator('table.usage tbody tr').evaluateAll((rows) => new Set(rows.map((r) => r.getAttribute('data-month'))).size);
    expect(months).toBe(6);
    await shot('queues', page);
  });

  it("updates the job page's log and status through one stream, without polling the job", { timeout: 180_000 }, async () => {
    const asked: string[] = [];
    const record = (r: { url(): string }) => asked.push(new URL(r.url()).pathname);
    page.on('request', record);
    try {
      await page.goto(url(`/jobs/${queuedJobId}`));
      await expect.poll(() => page.getByTestId('job-log').textContent(), { timeout: 60_000 }).toMatch(/beat \d+/);
      const beats = async () => ((await page.getByTestId('job-log').textContent()) ?? '').match(/beat \d+/g)?.length ?? 0;
      const before = await beats();
      await expect.poll(beats, { timeout: 15_000 }).toBeGreaterThan(before);
      expect(await page.locator('h1 .status').textContent()).toBe('running');
      expect((await stack.api('POST', `/v1/jobs/${queuedJobId}/cancel`)).status).toBe(202);
      await expect.poll(() => page.locator('h1 .status').textContent(), { timeout: 120_000 }).toBe('cancelled');
      await shot('job-stream', page);
      expect(asked.filter((p) => p === '/v1/stream')).toHaveLength(1);
      expect(asked.filter((p) => p.startsWith(`/v1/jobs/${queuedJobId}/logs`))).toEqual([]);
      // The detail is read when the page opens and after status changes (a burst read once), not every few seconds.
      expect(asked.filter((p) => p === `/v1/jobs/${queuedJobId}`).length).toBeLessThanOrEqual(5);
    } finally {
      page.off('request', record);
    }
  });

  it("moves a queued job's place on its page as its queue events tell it, without reading the job again", { timeout: 120_000 }, async () => {
    // A job row of this organization that waits (no workflow: its place is set as the executor's poll sets it).
    const db = stack.runtime.catalogue.db;
    const org = (await stack.api<{ organization: string }>('GET', '/v1/session')).body.organization;
    const id = 'console-waiting-job';
    const reason = 'max_concurrent_jobs 1 reached (1 running)';
    await insertJob(db, { id, organizationId: org, name: id, submittedBy: 'dev', type: 'training', kind: 'command', spec: {}, status: 'queued', workflowId: `job:${id}` });
    await setJobQueue(db, id, { queue: org, position: 2, reason });
    const asked: string[] = [];
    const record = (r: { url(): string }) => asked.push(new URL(r.url()).pathname);
    page.on('request', record);
    try {
      await page.goto(url(`/jobs/${id}`));
      await expect.poll(() => page.getByTestId('job-queue').textContent(), { timeout: 30_000 }).toBe(`Waiting in ${org}, #2: ${reason}`);
      await sleep(2000); // the page's reads after its first events are done
      const reads = asked.filter((p) => p === `/v1/jobs/${id}`).length;
      await setJobQueue(db, id, { queue: org, position: 1, reason }, new Date(Date.now() + QUEUE_EVENT_MIN_MS));
      await expect.poll(() => page.getByTestId('job-queue').textContent(), { timeout: 30_000 }).toBe(`Waiting in ${org}, #1: ${reason}`);
      expect(asked.filter((p) => p === `/v1/jobs/${id}`)).toHaveLength(reads);
      await shot('job-queued', page);
    } finally {
      page.off('request', record);
      await setJobStatus(db, id, 'cancelled', { message: null });
    }
  });

  it("shows a viewer the API's refusal on the queues page and none of its data", { timeout: 120_000 }, async () => {
    const viewer = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
    const vpage = await viewer.newPage();
    await signIn(vpage, viewerToken);
    expect(await vpage.getByRole('link', { name: 'Queues' }).count()).toBe(0);
    const asked: string[] = [];
    vpage.on('request', (r) => asked.push(new URL(r.url()).pathname));
    await vpage.goto(url('/queues'));
    await expect.poll(() => vpage.getByRole('alert').textContent(), { timeout: 30_000 }).toMatch(/for admins.*ml-admin/);
    expect(await vpage.locator('table').count()).toBe(0);
    expect(asked).not.toContain('/v1/queues');
    await shot('queues-viewer', vpage);
    await viewer.close();
  });

  // Experiments, the runs table and compare (pages/experiments.tsx, runs.tsx, compare.tsx)
  let experimentId = '';
  let trainingRun = '';
  let peerRun = '';
  let metricKeys: string[] = [];

  it("lists the pipeline's runs in its experiment's table and sorts them on the server by a clicked column", { timeout: 120_000 }, async () => {
    const training = await stack.api<{ jobs: { run_id: string | null }[] }>('GET', `/v1/jobs?parent=pipeline:${pipelineId}&type=training`);
    trainingRun = training.body.jobs[0]!.run_id!;
    const run = await stack.api<{ experiment_id: string; metrics: Record<string, unknown> }>('GET', `/v1/runs/${trainingRun}`);
    experimentId = run.body.experiment_id;
    metricKeys = Object.keys(run.body.metrics).sort().slice(0, 2);
    expect(metricKeys).toHaveLength(2);
    // A second run beside the pipeline's, logging the same keys, for the compare page.
    const peer = await stack.api<{ id: string }>('POST', '/v1/runs', { experiment_id: experimentId, run_name: 'console-compare-peer' });
    expect(peer.status).toBe(201);
    peerRun = peer.body.id;
    const points = metricKeys.flatMap((key) => Array.from({ length: 30 }, (_, step) => ({ key, step, value: 1 / (1 + step) })));
    expect((await stack.api('POST', `/v1/runs/${peerRun}/metrics`, { metrics: points })).status).toBe(200);
    const byName = async (dir: string) => (await stack.api<RunsPage>('GET', `/v1/experiments/${experimentId}/runs?limit=1000&columns=&order_by=${encodeURIComponent(`attributes.run_name ${dir}`)}`)).body;
    const asc = await byName('ASC');
    expect(asc.runs.length).toBeGreaterThanOrEqual(2);

    await page.goto(url('/experiments'));
    await page.locator(`tr[data-experiment="${experimentId}"] a`).click();
    await page.waitForURL(new RegExp(`/experiments/${experimentId}`));
    await page.locator('tr[data-run]').first().waitFor({ timeout: 30_000 });
    await expect.poll(() => page.getByTestId('runs-total').textContent()).toContain(`${asc.total} runs`);
    const names = () => page.locator('tr[data-run] td:nth-child(2)').allTextContents();
    expect((await names()).sort()).toEqual(asc.runs.map((r) => r.name).sort());
    const sorted = page.waitForRequest((r) => r.url().includes(`/v1/experiments/${experimentId}/runs?`) && new URL(r.url()).searchParams.get('order_by') === 'attributes.run_name ASC');
    await page.locator('th[data-column="name"] button').click();
    await sorted;
    await expect.poll(names).toEqual(asc.runs.map((r) => r.name));
    await page.locator('th[data-column="name"] button').click();
    await expect.poll(names).toEqual((await byName('DESC')).runs.map((r) => r.name));
    await shot('experiment-runs', page);
    await page.goto(url('/experiments'));
    await page.locator(`tr[data-experiment="${experimentId}"]`).waitFor();
    await shot('experiments', page);
  });

  it('compares two chosen runs with a chart per metric key, and a drag re-fetches that key for the narrower range', { timeout: 120_000 }, async () => {
    await page.goto(url(`/experiments/${experimentId}?columns=${metricKeys.map((k) => `metrics.${k}`).join(',')}`));
    for (const id of [trainingRun, peerRun]) await page.locator(`tr[data-run="${id}"] input[type=checkbox]`).check({ timeout: 30_000 });
    await page.getByRole('button', { name: /^Compare/ }).click();
    await page.waitForURL(/\/compare\?/);
    const q = new URL(page.url()).searchParams;
    expect(q.get('runs')!.split(',').sort()).toEqual([trainingRun, peerRun].sort());
    expect(q.get('keys')!.split(',')).toEqual(metricKeys);
    for (const key of metricKeys) await page.locator(`section[data-chart="${key}"] canvas`).first().waitFor({ timeout: 30_000 });
    expect(await page.locator('section.chart').count()).toBe(metricKeys.length);
    await shot('compare', page);

    // The whole range the chart shows, as the API answers it; the drag covers its middle 40%.
    const key = metricKeys[0]!;
    const full = (await stack.api<SeriesBatch>('POST', '/v1/runs/series', { run_ids: [trainingRun, peerRun], keys: [key] })).body.series;
    const [lo, hi] = [Math.min(...full.map((s) => s.from_step!)), Math.max(...full.map((s) => s.to_step!))];
    const over = (await page.locator(`section[data-chart="${key}"] .u-over`).boundingBox())!;
    const zoom = page.waitForRequest((r) => r.url().endsWith('/v1/runs/series') && (r.postData() ?? '').includes('from_step'));
    await page.mouse.move(over.x + over.width * 0.3, over.y + over.height / 2);
    await page.mouse.down();
    await page.mouse.move(over.x + over.width * 0.7, over.y + over.height / 2, { steps: 5 });
    await page.mouse.up();
    const asked = JSON.parse((await zoom).postData()!) as { keys: string[]; run_ids: string[]; from_step: number; to_step: number };
    expect(asked.keys).toEqual([key]);
    expect(asked.run_ids.sort()).toEqual([trainingRun, peerRun].sort());
    expect(asked.from_step).toBeGreaterThan(lo);
    expect(asked.to_step).toBeLessThan(hi);
    await expect.poll(() => page.locator(`section[data-chart="${key}"]`).getAttribute('data-zoomed')).toBe('yes');
    await page.locator(`section[data-chart="${key}"] canvas`).first().waitFor();
    await page.getByRole('button', { name: 'reset zoom' }).waitFor();
    await shot('compare-zoomed', page);
  });
  // The job page's checkpoints: a paused recipe job resumes from a chosen one.
  it('resumes a paused job from a checkpoint chosen in its table', { timeout: 5 * 60_000 }, async () => {
    const job = await stack.api<{ id: string }>('POST', '/v1/jobs', {
      type: 'training',
      name: 'console-resumable',
      recipe: {
        base_model: DEFAULT_BASE_MODEL,
        method: 'lora',
        dataset: { name: 'console-demo' },
        hyperparameters: { learning_rate: 1e-3, max_steps: 3000, batch_size: 8, max_seq_length: 128, seed: 7 },
      },
      // A checkpoint a second, and steps enough that the pause comes long before the end on a fast machine.
      schedule: { checkpoint_interval: '1s' },
    });
    expect(job.status).toBe(201);
    const id = job.body.id;
    const detail = async () => (await stack.api<JobDetail>('GET', `/v1/jobs/${id}`)).body;
    try {
      await expect.poll(async () => (await detail()).checkpoints.length, { timeout: 180_000, interval: 1000 }).toBeGreaterThan(1);
      await page.goto(url(`/jobs/${id}`));
      await page.getByRole('button', { name: 'Pause' }).click();
      await expect.poll(async () => (await detail()).status, { timeout: 120_000, interval: 1000 }).toBe('paused');
      await page.reload();
      const paused = await detail();
      const rows = page.locator('section.checkpoints tbody tr');
      await rows.first().waitFor({ timeout: 30_000 });
      expect(await rows.count()).toBe(paused.checkpoints.length);
      const chosen = paused.checkpoints[0]!.step;
      await shot('job-checkpoints', page);
      await page.locator(`section.checkpoints tr[data-step="${chosen}"]`).getByRole('button', { name: 'Resume from here' }).click();
      await expect.poll(async () => (await detail()).segments.at(-1)?.resumed_from?.step ?? null, { timeout: 120_000, interval: 1000 }).toBe(chosen);
      expect(await page.locator('.actions [role=status]').textContent()).toContain(`step ${chosen}`);
    } finally {
      // Stopped before the stack is: a local job outlives a worker's shutdown by design, and would train on.
      await stack.api('POST', `/v1/jobs/${id}/cancel`);
      await expect.poll(async () => (await detail()).status, { timeout: 120_000, interval: 1000 }).toBe('cancelled');
    }
  });
});

async function waitForPipeline(stack: TestStack, id: string, pred: (s: PipelineStatus) => boolean, timeoutMs: number): Promise<PipelineStatus> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { body } = await stack.api<PipelineStatus>('GET', `/v1/pipelines/${id}`);
    if (pred(body)) return body;
    if (body.status !== 'RUNNING' && body.status !== 'COMPLETED') throw new Error(`pipeline ended ${body.status}: ${JSON.stringify(body.progress.error)}`);
    if (Date.now() > deadline) throw new Error(`pipeline ${id} timed out in stage ${body.progress.stage}`);
    await sleep(2000);
  }
}

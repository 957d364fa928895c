// Cost before launch against a real embedded stack (no worker: nothing may start): a pipeline's dry run answers
// steps and tokens equal to what the trainer then counts training on the same data, GPU-hours from config or from
// measured finished jobs, dollars from the price list; a monthly budget refuses a start naming the estimate and the
// budget; /v1/usage sums the jobs finished in a month for the caller's organization only.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { count } from 'drizzle-orm';
import { startTestStack, withWorker, type TestStack } from './support/stack.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { findDatasetVersion } from '../db/repo/datasets.js';
import { setRunTags } from '../db/repo/params-tags.js';
import { jobTotalTags } from '../db/repo/usage.js';
import { pipelines } from '../db/schema/index.js';
import { repoRoot, trainerPython, ConfigError } from '../lib/config.js';
import { localPathFor } from '../lib/object-store.js';
import { resolveBaseModel } from '../lib/base-models.js';
import { testConfig } from './support/config.js';

const run = promisify(execFile);
const BUDGET = 0.5;
const OTHER = { authorization: 'Bearer token-of-another-org' };
const chat = (i: number) => JSON.stringify({ messages: [{ role: 'user', content: `Where do I report bug ${i} in module ${'x'.repeat(i % 7)}?` }, { role: 'assistant', content: `Team ${i % 3} handles it.` }] });
const HYPERPARAMETERS = { learning_rate: 1e-3, max_steps: 3, batch_size: 4, gradient_accumulation_steps: 2, seed: 11, max_seq_length: 96 };
const pipeline = { model_name: 'cost-model', base_model: 'hanzo-tiny-llama', dataset: { name: 'cost-ds', version: 'latest' }, hyperparameters: HYPERPARAMETERS };

interface Estimate {
  tokens: number;
  steps: number;
  gpu_hours: number;
  usd: number;
  basis: string;
  samples: number;
  tokens_per_gpu_second: number;
  price_per_gpu_hour_usd: number;
}

let stack: TestStack;

beforeAll(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'cost-config-'));
  writeFileSync(join(dir, 'config.yaml'), JSON.stringify({ scheduler: { default_price_usd: 4, monthly_budgets_usd: { dev: BUDGET } } }));
  stack = await startTestStack({ HANZO_ML_CONFIG: join(dir, 'config.yaml') }, { worker: false });
  await seedDevOrganization(stack.runtime.catalogue.db, 'other-org', 'token-of-another-org');
  const body = Array.from({ length: 40 }, (_, i) => chat(i)).join('\n');
  // The upload's preparation job runs on a worker that stops once the version is ready.
  const res = await withWorker(stack, () => fetch(`${stack.runtime.apiUrl}/v1/datasets?name=cost-ds&format=jsonl&wait=true`, { method: 'POST', headers: { authorization: 'Bearer hanzo-ml-dev-token' }, body }));
  expect(res.status).toBe(201);
}, 180_000);
afterAll(async () => stack?.stop());

const pipelineRows = async () => (await stack.runtime.catalogue.db.select({ n: count() }).from(pipelines))[0]!.n;
/** The workflows started after the dataset's preparation (which ran before the tests, on a worker gone since). */
const workflows = async () => {
  const ids: string[] = [];
  for await (const w of stack.runtime.client.workflow.list()) if (!w.workflowId.startsWith('dataset-preparation:')) ids.push(w.workflowId);
  return ids;
};

/** The trainer itself on the version's train split with the pipeline's hyperparameters: what it counted. */
async function trainedTokens(): Promise<{ tokens: number; steps: number }> {
  const { db } = stack.runtime.catalogue;
  const row = (await findDatasetVersion(db, 'dev', 'cost-ds', 'latest'))!;
  const work = mkdtempSync(join(tmpdir(), 'cost-train-'));
  const splits = row.splits as Record<'train' | 'validation', { path: string }>;
  const deps = { config: stack.loaded.config, bootstrap: stack.loaded.bootstrap };
  const spec = {
    kind: 'train', job_name: 'cost-check', run_id: 'cost-check', tracking_uri: null,
    base_model_path: resolveBaseModel('hanzo-tiny-llama', stack.loaded.config, stack.loaded.bootstrap),
    train_path: await localPathFor(stack.runtime.store, splits.train.path, join(work, 'cache')),
    validation_path: await localPathFor(stack.runtime.store, splits.validation.path, join(work, 'cache')),
    output_dir: join(work, 'output'), checkpoint_dir: join(work, 'checkpoints'), method: 'lora',
    hyperparameters: HYPERPARAMETERS, checkpoint: { every_steps: 3, keep_last: 1 }, threads: 1,
  };
  writeFileSync(join(work, 'train.json'), JSON.stringify(spec));
  await run(trainerPython(deps), ['-m', 'hanzo_ml', 'train', '--spec', join(work, 'train.json'), '--workdir', join(work, 'work')], {
    env: { ...process.env, PYTHONPATH: join(repoRoot, 'trainer') },
  });
  const result = JSON.parse(readFileSync(join(work, 'work', 'result.json'), 'utf8')) as { steps: number; totals: { tokens: number } };
  return { tokens: result.totals.tokens, steps: result.steps };
}

/** A finished train job of `org`'s, as the training activity's accounting tags its run. */
async function finishedJob(org: string, t: { tokens: number; deviceHours: number; costUsd: number; finishedAt?: Date }): Promise<void> {
  const { db } = stack.runtime.catalogue;
  const headers = org === 'dev' ? { authorization: 'Bearer hanzo-ml-dev-token' } : OTHER;
  const created = await fetch(`${stack.runtime.apiUrl}/api/2.0/mlflow/runs/create`, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify({ experiment_id: '0' }) });
  const runId = ((await created.json()) as { run: { info: { run_id: string } } }).run.info.run_id;
  await setRunTags(db, runId, jobTotalTags({ seconds: 10, gpuType: 'cpu', method: 'lora', baseModel: 'hanzo-tiny-llama', ...t }));
}

describe('cost before launch', () => {
  it('a dry run answers the steps and tokens training then counts, prices them from config, and starts nothing', async () => {
    const res = await stack.api<{ dry_run: boolean; estimate: Estimate; fits_budget: boolean }>('POST', '/v1/pipelines?dry_run=true', pipeline);
    expect(res.status).toBe(200);
    const e = res.body.estimate;
    expect(e).toMatchObject({ steps: 3, basis: 'config', samples: 0, tokens_per_gpu_second: 3000, price_per_gpu_hour_usd: 4 });
    expect(e.gpu_hours).toBeCloseTo(e.tokens / 3000 / 3600, 12);
    expect(e.usd).toBeCloseTo(e.gpu_hours * 4, 12);
    expect(res.body.fits_budget).toBe(true);
    expect(await pipelineRows()).toBe(0);
    expect(await workflows()).toEqual([]);
    const trained = await trainedTokens();
    expect(trained).toEqual({ tokens: e.tokens, steps: 3 });
  }, 180_000);

  it('a bad dry_run value is refused naming the field', async () => {
    const res = await stack.api<{ message: string }>('POST', '/v1/pipelines?dry_run=yes', pipeline);
    expect(res.status).toBe(400);
    expect(res.body.message).toMatch(/^invalid query parameters: dry_run: /);
  });

  it('GPU-hours come from the measured throughput of finished jobs of the same device type, method and base model', async () => {
    await finishedJob('dev', { tokens: 36_000, deviceHours: 0.01, costUsd: 0.3 });
    await finishedJob('dev', { tokens: 36_000, deviceHours: 0.01, costUsd: 0.3, finishedAt: new Date(Date.UTC(2020, 0, 15)) });
    const { body } = await stack.api<{ estimate: Estimate; budget: { spent_usd: number; left_usd: number } }>('POST', '/v1/pipelines?dry_run=true', pipeline);
    expect(body.estimate).toMatchObject({ basis: 'measured', samples: 2, tokens_per_gpu_second: 1000 });
    expect(body.estimate.gpu_hours).toBeCloseTo(body.estimate.tokens / 1000 / 3600, 12);
    expect(body.budget).toMatchObject({ spent_usd: 0.3 });
    expect(body.budget.left_usd).toBeCloseTo(0.2, 9);
  }, 60_000);

  it('a start whose estimate exceeds what is left of the monthly budget is refused naming the estimate, the budget and the spending', async () => {
    await finishedJob('dev', { tokens: 1000, deviceHours: 0.05, costUsd: 0.2 - 1e-6 });
    const res = await stack.api<{ error_code: string; message: string }>('POST', '/v1/pipelines', pipeline);
    expect(res.status).toBe(402);
    expect(res.body.error_code).toBe('PAYMENT_REQUIRED');
    expect(res.body.message).toMatch(/the estimate of \$\d+\.\d{4} \(.* GPU-hours\) exceeds what is left of organization dev's monthly budget: \$0\.0000 of \$0\.5000 \(\$0\.5000 spent this month\)/);
    expect(await pipelineRows()).toBe(0);
    expect(await workflows()).toEqual([]);
  }, 60_000);

  it("usage sums the month's finished jobs of the caller's organization, and another organization's is 404", async () => {
    const month = new Date().toISOString().slice(0, 7);
    const mine = await stack.api<{ organizations: { organization_id: string; jobs: number; cost_usd: number; gpu_hours: number; monthly_budget_usd: number }[] }>('GET', `/v1/usage?month=${month}`);
    expect(mine.status).toBe(200);
    const dev = mine.body.organizations.find((o) => o.organization_id === 'dev')!;
    expect(dev).toMatchObject({ jobs: 2, monthly_budget_usd: BUDGET });
    expect(dev.cost_usd).toBeCloseTo(0.5, 5);
    expect(dev.gpu_hours).toBeCloseTo(0.06, 9);
    const old = await stack.api<{ organizations: { organization_id: string; jobs: number }[] }>('GET', '/v1/usage?month=2020-01');
    expect(old.body.organizations.find((o) => o.organization_id === 'dev')).toMatchObject({ jobs: 1 });
    const other = await fetch(`${stack.runtime.apiUrl}/v1/usage?month=${month}`, { headers: OTHER });
    expect(await other.json()).toEqual({ month, organizations: [{ organization_id: 'other-org', gpu_hours: 0, cost_usd: 0, jobs: 0, monthly_budget_usd: null }] });
    expect((await fetch(`${stack.runtime.apiUrl}/v1/usage?organization=dev`, { headers: OTHER })).status).toBe(404);
    expect((await stack.api<{ message: string }>('GET', '/v1/usage?month=2026-13')).body.message).toBe('invalid query parameters: month: expected YYYY-MM');
  });
});

describe('the command line', () => {
  const cli = (args: string[]) =>
    run(join(repoRoot, 'bin/hanzo-ml'), args, { env: { ...process.env, HANZO_ML_API_URL: stack.runtime.apiUrl, HANZO_ML_TOKEN: 'hanzo-ml-dev-token' } }).then(
      (r) => ({ code: 0, stdout: r.stdout }),
      (e: { code: number; stdout: string }) => ({ code: e.code, stdout: e.stdout }),
    );

  it('pipeline start --dry-run prints the estimate, starts nothing, and exits 1 when it would exceed the budget', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cost-cli-'));
    writeFileSync(join(dir, 'request.json'), JSON.stringify(pipeline));
    const res = await cli(['pipeline', 'start', '--file', join(dir, 'request.json'), '--dry-run', '--json']);
    expect(res.code).toBe(1);
    expect(JSON.parse(res.stdout)).toMatchObject({ dry_run: true, estimate: { steps: 3, basis: 'measured' }, fits_budget: false });
    expect(await pipelineRows()).toBe(0);
  }, 60_000);

  it('usage --month prints the month and each organization it may see', async () => {
    const res = await cli(['usage', '--month', '2020-01']);
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/^2020-01\n(.*\n)*dev: 1 jobs, 0\.0100 device-hours, \$0\.3000 of \$0\.5000 budget\n/);
  }, 60_000);
});

describe('price and budget configuration', () => {
  const refusal = (doc: unknown): string => {
    const dir = mkdtempSync(join(tmpdir(), 'cost-config-'));
    writeFileSync(join(dir, 'config.yaml'), JSON.stringify(doc));
    try {
      testConfig({ HANZO_ML_CONFIG: join(dir, 'config.yaml') });
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      return (err as Error).message;
    }
    throw new Error('the configuration was accepted');
  };

  it('a price for a gpu_type that scheduler.gpu_types does not list is refused at start-up naming the key', () => {
    expect(refusal({ scheduler: { gpu_types: ['nvidia-h100'], gpu_prices_usd: { 'nvidia-h100': 3, 'nvidia-h10O': 2 } } })).toMatch(/scheduler\.gpu_prices_usd\.nvidia-h10O.*unknown gpu_type "nvidia-h10O"/);
  });

  it('the old single price and a negative budget are refused', () => {
    expect(refusal({ trainer: { gpu_hour_price_usd: 2 } })).toMatch(/trainer.*gpu_hour_price_usd/);
    expect(refusal({ scheduler: { monthly_budgets_usd: { dev: -1 } } })).toMatch(/scheduler\.monthly_budgets_usd\.dev/);
  });
});

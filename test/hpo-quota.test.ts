// A sweep's trials count against their organization's scheduler.quotas.<org>.max_concurrent_jobs: on a real
// embedded stack (Temporal dev server, worker, PGlite), a synthetic sweep asking for 3 concurrent trials under a
// quota of 1 job runs them one at a time through the admission gate (job_admissions), and every trial completes
// and gives its slot back. (A LoRA trial's trainer job passes the same gate in jobs/run-loop.ts.)
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { listAdmissions } from '../db/repo/admissions.js';

let stack: TestStack;

beforeAll(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'hanzo-ml-quota-'));
  const file = join(dir, 'config.yaml');
  writeFileSync(file, 'scheduler:\n  quotas:\n    dev:\n      max_gpus: 0\n      max_concurrent_jobs: 1\n');
  stack = await startTestStack({ HANZO_ML_CONFIG: file });
}, 180_000);

afterAll(async () => {
  await stack?.stop();
});

describe('HPO trials and the organization quota', () => {
  it('run no more trials at once than max_concurrent_jobs, whatever max_concurrent_trials asks', { timeout: 120_000 }, async () => {
    const res = await stack.api<{ id: string; message?: string }>('POST', '/v1/hpo', {
      experiment: 'quota-sweep',
      base_config: { method: 'synthetic', function: 'branin', max_steps: 20, eval_steps: 5, step_ms: 25 },
      search_space: { x1: { type: 'uniform', min: -5, max: 10 }, x2: { type: 'uniform', min: 0, max: 15 } },
      strategy: 'random',
      objective: { metric: 'eval/loss', direction: 'minimize' },
      max_trials: 4,
      max_concurrent_trials: 3,
      seed: 3,
    });
    expect(res.status, res.body.message).toBe(201);
    let maxAdmitted = 0;
    let sawWaiting = false;
    const deadline = Date.now() + 100_000;
    for (;;) {
      const rows = (await listAdmissions(stack.runtime.catalogue.db, 'dev')).filter((r) => r.jobName.startsWith(`hpo-${res.body.id}-`));
      maxAdmitted = Math.max(maxAdmitted, rows.filter((r) => r.state === 'admitted').length);
      sawWaiting ||= rows.some((r) => r.state === 'waiting');
      const sweep = await stack.api<{ status: string; trials: { by_status: Record<string, number> } }>('GET', `/v1/hpo/${res.body.id}`);
      if (sweep.body.status !== 'running') {
        expect(sweep.body.status).toBe('completed');
        expect(sweep.body.trials.by_status.completed).toBe(4);
        break;
      }
      if (Date.now() > deadline) throw new Error(`sweep still running: ${JSON.stringify(sweep.body.trials)}`);
      await new Promise((r) => setTimeout(r, 40));
    }
    expect(maxAdmitted).toBe(1);
    expect(sawWaiting).toBe(true);
    expect((await listAdmissions(stack.runtime.catalogue.db, 'dev')).filter((r) => r.jobName.startsWith(`hpo-${res.body.id}-`))).toEqual([]);
  });
});

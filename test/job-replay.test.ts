// A submitted job's history recorded before validating, segments and pause existed (test/fixtures/job-history.json:
// a command job run to success) must replay against today's workflow code: a job started before an upgrade goes
// on as it began (submittedJobWorkflow's patched path).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Worker } from '@temporalio/worker';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils.js';
import { bundleWorkflows } from '../workers/worker.js';

describe('recorded submitted-job history', () => {
  it('replays without a determinism violation', async () => {
    const history = historyFromJSON(JSON.parse(readFileSync(fileURLToPath(new URL('./fixtures/job-history.json', import.meta.url)), 'utf8')));
    expect(history.events?.length).toBeGreaterThan(10);
    await Worker.runReplayHistory({ workflowBundle: await bundleWorkflows() }, history, 'recorded-job');
  }, 120_000);
});

// A pipeline history recorded from a real run (test/fixtures/pipeline-history.json, re-recorded with
// HANZO_ML_RECORD_HISTORY=1 on the end-to-end test) must replay against today's workflow code: a change that
// breaks determinism for running pipelines fails here and needs patched().
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Worker } from '@temporalio/worker';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils.js';
import { bundleWorkflows } from '../workers/worker.js';

describe('recorded pipeline history', () => {
  it('replays without a determinism violation', async () => {
    const json = JSON.parse(readFileSync(fileURLToPath(new URL('./fixtures/pipeline-history.json', import.meta.url)), 'utf8'));
    const history = historyFromJSON(json);
    expect(history.events?.length).toBeGreaterThan(10);
    await Worker.runReplayHistory({ workflowBundle: await bundleWorkflows() }, history, 'recorded-pipeline');
  });
});

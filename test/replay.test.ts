// A pipeline history recorded from a real run (test/fixtures/pipeline-history.json, re-recorded with
// HANZO_ML_RECORD_HISTORY=1 on the end-to-end test) must replay against today's workflow code: a change that
// breaks determinism for running pipelines fails here and needs patched().
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Worker } from '@temporalio/worker';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils.js';
import { bundleWorkflows } from '../workers/worker.js';

// pipeline-history.json predates the patched register and checkpoint-watch steps (it replays the old paths);
// pipeline-history-*.json were recorded later (HANZO_ML_RECORD_HISTORY=<file name>) and replay the new ones.
const fixtures = readdirSync(fileURLToPath(new URL('./fixtures/', import.meta.url))).filter((f) => /^pipeline-history.*\.json$/.test(f)).sort();

describe('recorded pipeline histories', () => {
  it.each(fixtures)('%s replays without a determinism violation', async (name) => {
    const json = JSON.parse(readFileSync(fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url)), 'utf8'));
    const history = historyFromJSON(json);
    expect(history.events?.length).toBeGreaterThan(10);
    await Worker.runReplayHistory({ workflowBundle: await bundleWorkflows() }, history, 'recorded-pipeline');
  });
});

// checkpointWatchWorkflow: the checkpoint watcher beside a pipeline's training, as a child workflow. Each pass is a
// short activity (record new checkpoints, raise the stale alert); between passes it waits on a timer, so it holds
// no activity slot for the days training may take. The pipeline cancels it when training ends. It continues as
// new before its history grows long, carrying its state.
import { continueAsNew, isCancellation, proxyActivities, sleep, workflowInfo } from '@temporalio/workflow';
import type { createActivities } from '../activities/index.js';
import type { CheckpointWatchState } from '../contracts/pipeline.js';

type Activities = ReturnType<typeof createActivities>;

// A pass verifies each new checkpoint's files against its manifest (a large checkpoint takes a while to read).
const { sweepCheckpoints } = proxyActivities<Activities>({ startToCloseTimeout: '1 hour', retry: { maximumAttempts: 5, initialInterval: '2 seconds' } });

/** Passes per run before it continues as new: about 10 events each keeps a run's history near 5,000 events. */
const PASSES_PER_RUN = 500;

export interface CheckpointWatchInput {
  pipelineId: string;
  runId: string;
  organizationId: string;
  state?: CheckpointWatchState | null;
}

export async function checkpointWatchWorkflow(input: CheckpointWatchInput): Promise<void> {
  let state = input.state ?? null;
  try {
    for (let pass = 0; pass < PASSES_PER_RUN && !workflowInfo().continueAsNewSuggested; pass++) {
      state = await sweepCheckpoints({ pipelineId: input.pipelineId, runId: input.runId, organizationId: input.organizationId, state });
      await sleep(state.poll_ms);
    }
  } catch (err) {
    // Training ended: the pipeline's final sweep records whatever this one had not seen yet.
    if (isCancellation(err)) return;
    throw err;
  }
  await continueAsNew<typeof checkpointWatchWorkflow>({ ...input, state });
}

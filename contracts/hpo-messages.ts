// Updates and queries of the sweep workflow: the messages its callers (API, activities) and the workflow share.
import { defineQuery, defineUpdate } from '@temporalio/workflow';
import type { SweepProgress, TrialReport } from './hpo.js';

/**
 * A trial's activity reports the objective at each eval and learns at once whether to go on: the sweep applies
 * its early-stopping rule in the handler, so a stopped trial ends itself (and frees its slot) without waiting
 * for a cancellation to reach it.
 */
export const trialReportUpdate = defineUpdate<{ stop: boolean; reason: string }, [TrialReport]>('hpoTrialReport');
export const sweepProgressQuery = defineQuery<SweepProgress>('hpoSweepProgress');

// Signals, queries and updates of the fine-tuning pipeline: the messages its callers (API, activities) and the
// workflow share, so neither imports the other.
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { PipelineProgress, PromotionDecision, TrainingProgressSignal } from './pipeline.js';

export const pipelineProgressQuery = defineQuery<PipelineProgress>('pipelineProgress');
export const trainingProgressSignal = defineSignal<[TrainingProgressSignal]>('trainingProgress');
/** Human approval of promotion: the caller learns at once whether the decision was accepted. */
export const promotionDecisionUpdate = defineUpdate<PipelineProgress, [PromotionDecision]>('promotionDecision');

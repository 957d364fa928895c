// Signals, queries and updates of the fine-tuning pipeline, beside their workflow.
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { PipelineProgress, PromotionDecision, TrainingProgressSignal } from '../contracts/pipeline.js';

export const pipelineProgressQuery = defineQuery<PipelineProgress>('pipelineProgress');
export const trainingProgressSignal = defineSignal<[TrainingProgressSignal]>('trainingProgress');
/** Human approval of promotion: the caller learns at once whether the decision was accepted. */
export const promotionDecisionUpdate = defineUpdate<PipelineProgress, [PromotionDecision]>('promotionDecision');

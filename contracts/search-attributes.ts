import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import { SEARCH_ATTRIBUTES } from './pipeline.js';

export const ORGANIZATION_KEY = defineSearchAttributeKey(SEARCH_ATTRIBUTES.organization, SearchAttributeType.KEYWORD);
export const MODEL_NAME_KEY = defineSearchAttributeKey(SEARCH_ATTRIBUTES.modelName, SearchAttributeType.KEYWORD);
export const STAGE_KEY = defineSearchAttributeKey(SEARCH_ATTRIBUTES.stage, SearchAttributeType.KEYWORD);
export const JOB_TYPE_KEY = defineSearchAttributeKey(SEARCH_ATTRIBUTES.jobType, SearchAttributeType.KEYWORD);

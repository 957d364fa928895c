// The types of the failures activities throw and workflows match on (retry policies' nonRetryableErrorTypes, a
// failure's `type`): one list, so a type is spelt once and a workflow cannot wait on one nothing throws.
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';

export const FailureTypeSchema = z
  .enum([
    'BadInput',
    'NotFound',
    'NotConfigured',
    'BadArtifacts',
    'BadCheckpoint',
    'BadJobSpec',
    'ValidationFailed',
    'JobFailed',
    'JobRestartLimit',
    'ImagePullFailed',
    'OutOfMemory',
    'TrainingDiverged',
    'MaxDurationExceeded',
    'SuggestCrashed',
    'ReloadHookUnreachable',
    'ReloadHookRefused',
  ])
  .describe(
    [
      'BadInput: the request or its data is wrong (not retried);',
      'NotFound: a run, model or version it names does not exist;',
      'NotConfigured: the worker lacks a setting the activity needs;',
      'BadArtifacts: a model version\'s files cannot be registered;',
      'BadCheckpoint: a checkpoint\'s files do not match its manifest;',
      'BadJobSpec: no executor can run the job, or the job rejected its spec;',
      'ValidationFailed: the Candle tool found the converted model wanting;',
      'JobFailed: the job exited non-zero (retried);',
      'JobRestartLimit: preempted or lost too many times;',
      'ImagePullFailed: its image could not be pulled within scheduler.image_pull_timeout;',
      'OutOfMemory, TrainingDiverged: the fault its recovery policy could not recover from;',
      'MaxDurationExceeded: a submitted job ran past schedule.max_duration;',
      'SuggestCrashed: the HPO suggester process crashed (retried);',
      'ReloadHookUnreachable, ReloadHookRefused: the serving reload hook did not take the new version (retried)',
    ].join(' '),
  );
export type FailureType = z.infer<typeof FailureTypeSchema>;
/** The types by name: `FailureType.BadInput`. */
export const FailureType = FailureTypeSchema.enum;

/** A failure for good: Temporal does not retry the activity, and the workflow sees `type`. */
export function nonRetryable(type: FailureType, message: string, ...details: unknown[]): ApplicationFailure {
  return ApplicationFailure.nonRetryable(message, type, ...details);
}

/** A failure the activity's retry policy retries, unless the policy lists its type as non-retryable. */
export function retryable(type: FailureType, message: string, ...details: unknown[]): ApplicationFailure {
  return ApplicationFailure.retryable(message, type, ...details);
}

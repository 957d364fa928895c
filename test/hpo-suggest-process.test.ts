// The suggestion process as the HPO activities drive it: a process that cannot start, or dies before it answers,
// fails the request as retryable (a fresh process serves the retry) instead of crashing the worker or hanging.
import { describe, expect, it } from 'vitest';
import { ApplicationFailure } from '@temporalio/common';
import type { ActivityDeps } from '../activities/deps.js';
import { createHpoActivities } from '../activities/hpo.js';
import type { SuggestRequest } from '../contracts/hpo.js';

const request = { strategy: 'random', seed: 1, directions: ['minimize'], space: {}, history: [], numbers: [0] } as unknown as SuggestRequest;
const activitiesWith = (python: string) => createHpoActivities({ bootstrap: { python }, config: { trainer: {} } } as unknown as ActivityDeps);

async function failureOf(promise: Promise<unknown>): Promise<ApplicationFailure> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ApplicationFailure);
  return err as ApplicationFailure;
}

describe('the suggestion process', () => {
  it('fails a request as retryable, naming the interpreter, when the process cannot be started', async () => {
    const failure = await failureOf(activitiesWith('/nonexistent/python3').suggestTrials(request));
    expect(failure.type).toBe('SuggestCrashed');
    expect(failure.nonRetryable).toBeFalsy();
    expect(failure.message).toMatch(/hpo-suggest could not run \(\/nonexistent\/python3\): spawn \/nonexistent\/python3 ENOENT/);
  });

  it('fails a request as retryable when the process exits without answering, and tries a fresh one next time', async () => {
    const activities = activitiesWith('/bin/false'); // starts, reads nothing, exits 1: the request's write meets a closed pipe
    for (let attempt = 0; attempt < 2; attempt++) {
      const failure = await failureOf(activities.suggestTrials(request));
      expect(failure.type).toBe('SuggestCrashed');
      expect(failure.message).toMatch(/^hpo-suggest exited with code 1/);
    }
  });
});

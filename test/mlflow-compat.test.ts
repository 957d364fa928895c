// The stock mlflow Python client against our API and against a reference `mlflow server` (SQLite): the same
// scenario (test/mlflow-compat/scenario.py) must print the same transcript — values, shapes, error codes and
// messages — on both.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { runScenario, startReferenceMlflow, type ReferenceMlflow } from './support/mlflow.js';

let stack: TestStack;
let reference: ReferenceMlflow | null = null;
let python = '';

describe('the stock mlflow client', () => {
  beforeAll(async () => {
    stack = await startTestStack({}, { worker: false });
    python = stack.loaded.bootstrap.mlflow_python ?? '';
    reference = await startReferenceMlflow(python);
  }, 120_000);

  afterAll(async () => {
    reference?.stop();
    await stack?.stop();
  });

  it('sees the same transcript from our API as from the reference mlflow server', async () => {
    const script = 'test/mlflow-compat/scenario.py';
    const [ours, theirs] = await Promise.all([runScenario(python, script, stack.runtime.apiUrl), runScenario(python, script, reference!.url)]);
    expect(ours).toEqual(theirs);
    // The scenario really ran: every step is there, the 2500-point history came back across pages.
    const steps = ours as { step: string; result?: unknown; error?: string }[];
    expect(steps).toHaveLength(29);
    expect(steps.find((s) => s.step === 'history')?.result).toMatchObject({ count: 2500, steps_in_order: true });
    expect(steps.find((s) => s.step === 'batch: 1001 metrics')).toMatchObject({ status: 400, error: 'INVALID_PARAMETER_VALUE' });
  }, 180_000);
});

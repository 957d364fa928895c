// The stock mlflow client's artifact, dataset and logged-model calls against our API and against a reference
// `mlflow server` with artifact serving: the same scenario (test/mlflow-compat/artifacts.py) must print the same
// transcript — listings, downloaded bytes, dataset inputs, a pyfunc model logged, loaded and used to predict,
// logged-model search, and the error codes and messages of unsafe paths and missing runs — on both.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { runScenario, startReferenceMlflow, type ReferenceMlflow } from './support/mlflow.js';

let stack: TestStack;
let reference: ReferenceMlflow | null = null;
let python = '';

describe('the stock mlflow client with artifacts and logged models', () => {
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
    const script = 'test/mlflow-compat/artifacts.py';
    const [ours, theirs] = await Promise.all([runScenario(python, script, stack.runtime.apiUrl), runScenario(python, script, reference!.url)]);
    expect(ours).toEqual(theirs);
    // The scenario really ran: files came back byte for byte, and the logged model predicted.
    const steps = ours as { step: string; result?: unknown; error?: string; status?: number }[];
    expect(steps.find((s) => s.step === 'download a directory')?.result).toEqual({ 'a.txt': 'A', 'sub/b.txt': 'BB', 'sub/deeper/c.json': '{"c": 3}' });
    expect(steps.find((s) => s.step === 'load and predict')?.result).toEqual([3, 7]);
    expect(steps.find((s) => s.step === 'proxy: parent path')).toMatchObject({ status: 400, error: 'INVALID_PARAMETER_VALUE' });
    expect(steps.find((s) => s.step === 'run artifact uri')?.result).toBe('mlflow-artifacts:/<exp:1>/<run:1>/artifacts');
  }, 240_000);
});

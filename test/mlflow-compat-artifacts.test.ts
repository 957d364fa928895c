// The stock mlflow client's artifact, dataset and logged-model calls against our API and against a reference
// `mlflow server` with artifact serving: the same scenario (test/mlflow-compat/artifacts.py) must print the same
// transcript — listings, downloaded bytes, dataset inputs, a pyfunc model logged, loaded and used to predict,
// logged-model search, and the error codes and messages of unsafe paths and missing runs — on both.
import { describe, expect, it } from 'vitest';
import { runBothScenarios, useCompatServers } from './support/mlflow.js';

describe('the stock mlflow client with artifacts and logged models', () => {
  const servers = useCompatServers();

  it('sees the same transcript from our API as from the reference mlflow server', async () => {
    const script = 'test/mlflow-compat/artifacts.py';
    const [ours, theirs] = await runBothScenarios(servers, script);
    expect(ours).toEqual(theirs);
    // The scenario really ran: files came back byte for byte, and the logged model predicted.
    const steps = ours as { step: string; result?: unknown; error?: string; status?: number }[];
    expect(steps.find((s) => s.step === 'download a directory')?.result).toEqual({ 'a.txt': 'A', 'sub/b.txt': 'BB', 'sub/deeper/c.json': '{"c": 3}' });
    expect(steps.find((s) => s.step === 'load and predict')?.result).toEqual([3, 7]);
    expect(steps.find((s) => s.step === 'proxy: parent path')).toMatchObject({ status: 400, error: 'INVALID_PARAMETER_VALUE' });
    expect(steps.find((s) => s.step === 'run artifact uri')?.result).toBe('mlflow-artifacts:/<exp:1>/<run:1>/artifacts');
  }, 240_000);
});

// The stock mlflow Python client against our API and against a reference `mlflow server` (SQLite): the same
// scenario (test/mlflow-compat/scenario.py) must print the same transcript — values, shapes, error codes and
// messages — on both.
import { describe, expect, it } from 'vitest';
import { runBothScenarios, useCompatServers } from './support/mlflow.js';

describe('the stock mlflow client', () => {
  const servers = useCompatServers();

  it('sees the same transcript from our API as from the reference mlflow server', async () => {
    const script = 'test/mlflow-compat/scenario.py';
    const [ours, theirs] = await runBothScenarios(servers, script);
    expect(ours).toEqual(theirs);
    // The scenario really ran: every step is there, the 2500-point history came back across pages.
    const steps = ours as { step: string; result?: unknown; error?: string }[];
    expect(steps).toHaveLength(29);
    expect(steps.find((s) => s.step === 'history')?.result).toMatchObject({ count: 2500, steps_in_order: true });
    expect(steps.find((s) => s.step === 'batch: 1001 metrics')).toMatchObject({ status: 400, error: 'INVALID_PARAMETER_VALUE' });
  }, 180_000);
});

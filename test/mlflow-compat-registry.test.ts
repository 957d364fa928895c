// The stock mlflow client's model-registry calls against our API and against a reference `mlflow server`
// (SQLite): the same scenario (test/mlflow-compat/registry.py) must print the same transcript — values, stages,
// aliases, search results, error codes and messages — on both.
import { describe, expect, it } from 'vitest';
import { runBothScenarios, useCompatServers } from './support/mlflow.js';
import { DEV_TOKEN } from './support/config.js';

/** The closing register-and-load steps need the mlflow-artifacts proxy; they run when this server serves it. */
async function servesArtifactProxy(url: string): Promise<boolean> {
  const res = await fetch(`${url}/api/2.0/mlflow-artifacts/artifacts?path=`, { headers: { authorization: `Bearer ${DEV_TOKEN}` } });
  return res.ok;
}

describe('the stock mlflow client on the model registry', () => {
  // A worker copies the files of registered versions (the logged model the scenario registers at its end).
  const servers = useCompatServers({ worker: true });

  it('sees the same registry transcript from our API as from the reference mlflow server', async () => {
    const script = 'test/mlflow-compat/registry.py';
    const env = { REGISTRY_COMPAT_ARTIFACTS: (await servesArtifactProxy(servers.stack.runtime.apiUrl)) ? '1' : '0' };
    const [ours, theirs] = await runBothScenarios(servers, script, env);
    expect(ours).toEqual(theirs);
    // The scenario really ran: stages moved, the archive happened, errors came back with MLflow's codes.
    const steps = ours as { step: string; result?: unknown; error?: string }[];
    expect(steps).toHaveLength(env.REGISTRY_COMPAT_ARTIFACTS === '1' ? 65 : 63);
    if (env.REGISTRY_COMPAT_ARTIFACTS === '1') expect(steps.find((s) => s.step === 'load by alias')?.result).toEqual([2, 4, 6]);
    expect(steps.find((s) => s.step === 'stages after archiving')?.result).toEqual({ '1': 'Staging', '2': 'Archived', '3': 'Production' });
    expect(steps.find((s) => s.step === 'create duplicate model')).toMatchObject({ error: 'RESOURCE_ALREADY_EXISTS' });
    expect(steps.find((s) => s.step === 'bad stage')).toMatchObject({ error: 'INVALID_PARAMETER_VALUE' });
    expect(steps.find((s) => s.step === 'numbers are not reused')?.result).toBe('4');
  }, 300_000);
});

// A Transformers Trainer reporting through its MLflowCallback (report_to=["mlflow"]) against our API and against a
// reference `mlflow server`: the normalized transcripts (params logged, metric keys with their steps and values,
// tags, run status) of test/mlflow-compat/hf_trainer.py must be equal.
import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTemporalDevServer, type DevServer } from '../lib/temporal-dev-server.js';
import { startRuntime, type Runtime } from '../runtime/embedded.js';
import type { LoadedConfig } from '../lib/config.js';
import { testConfig } from './support/config.js';
import { freePort } from './support/ports.js';
import { runScenario, startReferenceMlflow, type ReferenceMlflow } from './support/mlflow.js';

const exec = promisify(execFile);

let loaded: LoadedConfig;
let temporal: DevServer;
let runtime: Runtime;
let reference: ReferenceMlflow | null = null;
/** The pinned mlflow client venv's site-packages, which the script appends to the trainer venv's path. */
let mlflowSite = '';

interface Transcript {
  status: string;
  param_count: number;
  params: Record<string, string>;
  tags: Record<string, string>;
  metric_steps: Record<string, number[]>;
  metric_values: Record<string, number[]>;
}

/**
 * The Trainer logs `epoch` three times at the last step with one value (the last loss, the evaluation, the summary).
 * Both stores keep a metric point once per (key, step, timestamp, value), as MLflow's primary key does, so two of
 * them that land in the same millisecond are one point, on either server, by timing alone. Compare each history
 * with such repeats (same step and value, one after the other) counted once.
 */
function withoutSameInstantRepeats(t: Transcript): Transcript {
  const steps: Record<string, number[]> = {};
  const values: Record<string, number[]> = {};
  for (const [key, keySteps] of Object.entries(t.metric_steps)) {
    const keyValues = t.metric_values[key] ?? [];
    const keep = keySteps.map((_, i) => i === 0 || keySteps[i] !== keySteps[i - 1] || keyValues[i] !== keyValues[i - 1]);
    steps[key] = keySteps.filter((_, i) => keep[i]);
    values[key] = keyValues.filter((_, i) => keep[i]);
  }
  return { ...t, metric_steps: steps, metric_values: values };
}

describe('a Transformers Trainer with report_to=["mlflow"]', () => {
  beforeAll(async () => {
    // The API alone (no worker): the callback only talks to the tracking routes.
    loaded = testConfig({ HANZO_ML_SERVER_PORT: String(await freePort()) });
    mkdirSync(join(loaded.home, 'logs'), { recursive: true });
    temporal = await startTemporalDevServer({ binary: loaded.bootstrap.temporal, home: loaded.home, port: 0, uiPort: null, namespace: 'default' });
    runtime = await startRuntime({ ...loaded, temporalAddress: temporal.address, temporalUiUrl: null, worker: false });
    const mlflowPython = loaded.bootstrap.mlflow_python ?? '';
    reference = await startReferenceMlflow(mlflowPython);
    mlflowSite = (await exec(mlflowPython, ['-c', "import sysconfig; print(sysconfig.get_paths()['purelib'])"])).stdout.trim();
  }, 120_000);

  afterAll(async () => {
    reference?.stop();
    await runtime?.stop();
    await temporal?.stop();
  });

  it('logs the same params, metric steps, tags and final status to our API as to the reference mlflow server', async () => {
    const script = 'test/mlflow-compat/hf_trainer.py';
    const env = { HANZO_ML_MLFLOW_SITE: mlflowSite, HF_HUB_OFFLINE: '1', TRANSFORMERS_OFFLINE: '1', HF_DATASETS_OFFLINE: '1' };
    const [ours, theirs] = ((await Promise.all([
      runScenario(loaded.bootstrap.python, script, runtime.apiUrl, env),
      runScenario(loaded.bootstrap.python, script, reference!.url, env),
    ])) as Transcript[]).map(withoutSameInstantRepeats);
    // Two CPU runs of the same seeded training agree to float noise, not bit for bit: values are compared to a
    // relative 1e-3, everything else exactly.
    const { metric_values: ourValues, ...ourRest } = ours!;
    const { metric_values: theirValues, ...theirRest } = theirs!;
    expect(ourRest).toEqual(theirRest);
    expect(Object.keys(ourValues).sort()).toEqual(Object.keys(theirValues).sort());
    for (const [key, values] of Object.entries(ourValues)) {
      expect(values, key).toHaveLength(theirValues[key]!.length);
      values.forEach((v, i) => expect(Math.abs(v - theirValues[key]![i]!), `${key}[${i}]`).toBeLessThanOrEqual(1e-3 * Math.max(1, Math.abs(v))));
    }
    // The scenario really ran: the run finished with the model config and training arguments as params, the
    // loss logged at every one of the 6 steps and the evaluation loss every 3.
    expect(ours!.status).toBe('FINISHED');
    expect(ours!.param_count).toBeGreaterThan(100);
    expect(ours!.params).toMatchObject({ max_steps: '6', learning_rate: '0.001', hidden_size: '32', output_dir: '<output_dir>' });
    expect(ours!.tags['mlflow.runName']).toBe('hf-tiny');
    expect(ours!.metric_steps.loss).toEqual([1, 2, 3, 4, 5, 6]);
    expect(ours!.metric_steps.eval_loss).toEqual([3, 6]);
    expect(ours!.metric_values.loss).toHaveLength(6);
  }, 300_000);
});

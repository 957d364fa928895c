// A real sweep: LoRA fine-tunes of the bundled tiny model on the bundled task, end to end through the embedded
// stack (API -> Temporal sweep workflow -> trial child workflows -> trainer jobs), with ASHA on eval/loss.
//
//   npx tsx bench/hpo/lora.ts [--trials 16] [--concurrent 2] [--max-steps 60]
import { readFileSync, mkdirSync, mkdtempSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../../lib/config.js';
import { startTemporalDevServer } from '../../lib/temporal-dev-server.js';
import { startRuntime } from '../../runtime/embedded.js';
import { hpoWorkflowId, type SweepRequest, type SweepResult } from '../../contracts/hpo.js';
import { freePort } from '../../test/support/ports.js';
import { mergeResults } from './report.js';

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};

async function main(): Promise<void> {
  const trials = arg('trials', 16);
  const concurrent = arg('concurrent', 2);
  const maxSteps = arg('max-steps', 60);
  const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-hpo-lora-'));
  mkdirSync(join(home, 'logs'), { recursive: true });
  const { config, bootstrap } = loadConfig({ HANZO_ML_HOME: home, HANZO_ML_SERVER_PORT: String(await freePort()), HANZO_ML_LOGGING_LEVEL: 'warn', HANZO_ML_TRAINER_THREADS: '1' });
  const temporal = await startTemporalDevServer({ binary: bootstrap.temporal, home, port: 0, uiPort: null, namespace: 'default' });
  const runtime = await startRuntime({ config, home, bootstrap, temporalAddress: temporal.address, temporalUiUrl: null });
  const auth = { authorization: `Bearer ${config.auth.dev_token}` };
  try {
    const data = readFileSync(fileURLToPath(new URL('../../examples/data/demo-task.jsonl', import.meta.url)));
    const up = await fetch(`${runtime.apiUrl}/v1/datasets?name=demo-task&format=jsonl&wait=true`, { method: 'POST', headers: { ...auth, 'content-type': 'application/octet-stream' }, body: data });
    if (!up.ok) throw new Error(`dataset upload: ${up.status} ${await up.text()}`);
    const body: SweepRequest = {
      experiment: 'tiny-llama-lora-hpo',
      base_config: { method: 'lora', model: 'hanzo-tiny-llama', dataset: 'demo-task', max_steps: maxSteps, eval_steps: maxSteps / 4, hyperparameters: { batch_size: 8, target_modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj'] } },
      search_space: {
        learning_rate: { type: 'log_uniform', min: 1e-4, max: 3e-2 },
        lora_rank: { type: 'choice', values: [4, 8, 16] },
      },
      strategy: 'bayesian',
      objective: { metric: 'eval/loss', direction: 'minimize' },
      max_trials: trials,
      max_concurrent_trials: concurrent,
      early_stopping: { rule: 'asha', reduction_factor: 2, grace_steps: maxSteps / 4 },
      resources_per_trial: { gpus: 0 },
      seed: 0,
    };
    const started = Date.now();
    const res = await fetch(`${runtime.apiUrl}/v1/hpo`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const { id, message } = (await res.json()) as { id?: string; message?: string };
    if (!id) throw new Error(`sweep did not start: ${message}`);
    const result = (await runtime.client.workflow.getHandle(hpoWorkflowId(id)).result()) as SweepResult;
    const wall = (Date.now() - started) / 1000;
    const sweep = (await (await fetch(`${runtime.apiUrl}/v1/hpo/${id}`, { headers: auth })).json()) as { best_trial: { objective_values: number[]; params: Record<string, unknown>; run_id: string } | null; trials: { by_status: Record<string, number> } };
    const lora = {
      trials,
      max_concurrent_trials: concurrent,
      max_steps: maxSteps,
      strategy: body.strategy,
      early_stopping: 'ASHA (eta 2) on eval/loss',
      status: result.status,
      wall_seconds: wall,
      best_value: sweep.best_trial?.objective_values[0] ?? null,
      best_params: sweep.best_trial?.params ?? null,
      best_run_id: sweep.best_trial?.run_id ?? null,
      by_status: sweep.trials.by_status,
      trial_steps: result.progress.trial_steps_run,
      trial_steps_saved: result.progress.trial_steps_saved,
      machine: `${cpus().length} CPU cores (${cpus()[0]?.model ?? 'unknown'}), trainer threads 1`,
      measured_at: new Date().toISOString(),
    };
    process.stderr.write(`${JSON.stringify(lora)}\n`);
    await mergeResults({ lora });
  } finally {
    await runtime.stop({ stopJobs: true });
    await temporal.stop();
  }
}

await main();

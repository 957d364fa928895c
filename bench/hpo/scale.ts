// A 1,000-trial sweep of a fast synthetic trial, end to end through the embedded stack (Temporal dev server,
// PGlite, the worker, the API): it must finish, every run of the sweep's workflow must stay far under
// Temporal's history limits (continue-as-new), and the scheduling overhead per trial is reported.
//
//   npx tsx bench/hpo/scale.ts [--trials 1000] [--concurrent 8]
import { mkdirSync, mkdtempSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../lib/config.js';
import { startTemporalDevServer } from '../../lib/temporal-dev-server.js';
import { startRuntime } from '../../runtime/embedded.js';
import { hpoWorkflowId, type SweepRequest } from '../../contracts/hpo.js';
import { trialsOf } from '../../db/repo/hpo.js';
import { freePort } from '../../test/support/ports.js';
import { mergeResults } from './report.js';

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};

async function main(): Promise<void> {
  const trials = arg('trials', 1000);
  const concurrent = arg('concurrent', 8);
  const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-hpo-scale-'));
  mkdirSync(join(home, 'logs'), { recursive: true });
  const port = await freePort();
  const { config, bootstrap } = loadConfig({ HANZO_ML_HOME: home, HANZO_ML_SERVER_PORT: String(port), HANZO_ML_LOGGING_LEVEL: 'warn', HANZO_ML_HPO_MAX_CONCURRENT_TRIALS: String(concurrent) });
  const temporal = await startTemporalDevServer({ binary: bootstrap.temporal, home, port: 0, uiPort: null, namespace: 'default' });
  const runtime = await startRuntime({ config, home, bootstrap, temporalAddress: temporal.address, temporalUiUrl: null });
  try {
    const body: SweepRequest = {
      experiment: 'scale-1000',
      base_config: { method: 'synthetic', function: 'branin', max_steps: 10, eval_steps: 5 },
      search_space: { x1: { type: 'uniform', min: -5, max: 10 }, x2: { type: 'uniform', min: 0, max: 15 } },
      strategy: 'random',
      max_trials: trials,
      max_concurrent_trials: concurrent,
      seed: 1,
    };
    const started = Date.now();
    const res = await fetch(`${runtime.apiUrl}/v1/hpo`, { method: 'POST', headers: { authorization: `Bearer ${config.auth.dev_token}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const { id } = (await res.json()) as { id: string };
    if (!id) throw new Error(`sweep did not start: ${res.status}`);
    const handle = runtime.client.workflow.getHandle(hpoWorkflowId(id));
    const result = (await handle.result()) as { status: string; progress: { trials_finished: number; continued_as_new: number } };
    const wall = (Date.now() - started) / 1000;
    const runs = [];
    for await (const w of runtime.client.workflow.list({ query: `WorkflowId = '${hpoWorkflowId(id)}'` })) runs.push({ run_id: w.runId, history_events: w.historyLength ?? 0, history_bytes: w.historySize ?? 0, status: w.status.name });
    const rows = await trialsOf(runtime.catalogue.db, id);
    const durations = rows.map((r) => (r.endedAt!.getTime() - r.startedAt.getTime()) / 1000);
    const scale = {
      trials: trials,
      trials_finished: result.progress.trials_finished,
      catalogue_trials: rows.length,
      completed: rows.filter((r) => r.status === 'completed').length,
      status: result.status,
      max_concurrent_trials: concurrent,
      trial: 'branin, 10 steps, 2 evals, no step delay',
      wall_seconds: wall,
      seconds_per_trial: wall / trials,
      mean_trial_seconds: durations.reduce((a, b) => a + b, 0) / durations.length,
      runs: runs.length,
      continued_as_new: result.progress.continued_as_new,
      max_history_events: Math.max(...runs.map((r) => r.history_events)),
      max_history_bytes: Math.max(...runs.map((r) => r.history_bytes)),
      history_limits: { events: 51200, bytes: 50 * 1024 * 1024 },
      per_run: runs,
      machine: `${cpus().length} CPU cores (${cpus()[0]?.model ?? 'unknown'})`,
      measured_at: new Date().toISOString(),
    };
    process.stderr.write(`${scale.trials_finished} trials in ${wall.toFixed(1)} s over ${runs.length} runs; max history ${scale.max_history_events} events\n`);
    await mergeResults({ scale });
  } finally {
    await runtime.stop({ stopJobs: true });
    await temporal.stop();
  }
}

await main();

// Sweep benchmarks on synthetic objectives with known optima, using the product's own pieces: the suggestion
// process (`python -m hanzo_ml hpo-suggest --serve`), the objectives of activities/hpo-objectives.ts and the
// early-stopping rules of workflows/hpo-rules.ts. No Temporal here (see scale.ts and lora.ts for that).
//
//   npx tsx bench/hpo/synthetic.ts [--seeds 15] [--budget 80]
//
// 1. Trials to reach a target, TPE (strategy bayesian) vs random, on Branin and Hartmann-6, one trial at a time.
// 2. Trial-steps ASHA (and the median rule) save on the learning-curve surrogate against running every trial
//    to its full budget, with the final quality of the best trial each way; 4 trials run at once.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { loadConfig, repoRoot } from '../../lib/config.js';
import { SweepConfigSchema, type HistoryTrial, type Params, type SearchSpace, type SuggestRequest, type SuggestResponse } from '../../contracts/hpo.js';
import { KNOWN_OPTIMA, syntheticMetrics } from '../../activities/hpo-objectives.js';
import { decideStop, emptyRuleState, median, type Curve } from '../../workflows/hpo-rules.js';
import { mergeResults } from './report.js';

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};

export function suggestClient(python: string) {
  const proc = spawn(python, ['-m', 'hanzo_ml', 'hpo-suggest', '--serve'], { env: { ...process.env, PYTHONPATH: join(repoRoot, 'trainer'), OMP_NUM_THREADS: '1' }, stdio: ['pipe', 'pipe', 'inherit'] });
  const waiting: ((line: string) => void)[] = [];
  createInterface({ input: proc.stdout }).on('line', (l) => waiting.shift()?.(l));
  return {
    async ask(req: SuggestRequest): Promise<SuggestResponse> {
      const line = await new Promise<string>((resolve) => {
        waiting.push(resolve);
        proc.stdin.write(JSON.stringify(req) + '\n');
      });
      const body = JSON.parse(line) as SuggestResponse & { error?: string };
      if (body.error) throw new Error(body.error);
      return body;
    },
    close: () => proc.stdin.end(),
  };
}

type Client = ReturnType<typeof suggestClient>;

const SPACES: Record<'branin' | 'hartmann6', SearchSpace> = {
  branin: { x1: { type: 'uniform', min: -5, max: 10 }, x2: { type: 'uniform', min: 0, max: 15 } },
  hartmann6: Object.fromEntries([1, 2, 3, 4, 5, 6].map((i) => [`x${i}`, { type: 'uniform', min: 0, max: 1 }])) as SearchSpace,
};
/** Targets: within reach of a good optimizer in tens of trials, rarely hit by luck. */
const TARGETS = { branin: 0.8, hartmann6: -2.5 };

async function trialsToTarget(client: Client, fn: 'branin' | 'hartmann6', strategy: 'bayesian' | 'random', seed: number, budget: number): Promise<{ trials: number | null; best: number }> {
  const history: HistoryTrial[] = [];
  let best = Infinity;
  for (let n = 0; n < budget; n++) {
    const res = await client.ask({ space: SPACES[fn], strategy, directions: ['minimize'], seed, history: strategy === 'random' ? [] : history, numbers: [n] });
    const s = res.suggestions[0]!;
    const value = syntheticMetrics(fn, s.params, 1, 1, 0)['eval/loss']! - 10 * Math.exp(-6); // the final value f(x)
    best = Math.min(best, value);
    if (value <= TARGETS[fn]) return { trials: n + 1, best };
    history.push({ n, params: s.params, state: 'completed', values: [value], intermediate: [], system_attrs: s.system_attrs });
  }
  return { trials: null, best };
}

/** Median that counts a run that never reached the target as worse than every run that did. */
const censoredMedian = (xs: (number | null)[], budget: number): number => median(xs.map((x) => x ?? budget + 1));

async function tpeVsRandom(client: Client, seeds: number, budget: number) {
  const out: Record<string, unknown> = {};
  for (const fn of ['branin', 'hartmann6'] as const) {
    const row: Record<string, unknown> = { target: TARGETS[fn], optimum: KNOWN_OPTIMA[fn], budget };
    for (const strategy of ['bayesian', 'random'] as const) {
      const runs = [];
      for (let seed = 0; seed < seeds; seed++) runs.push(await trialsToTarget(client, fn, strategy, seed, budget));
      row[strategy] = {
        trials_to_target: runs.map((r) => r.trials),
        reached: runs.filter((r) => r.trials !== null).length,
        median_trials_to_target: censoredMedian(runs.map((r) => r.trials), budget),
        median_best: median(runs.map((r) => r.best)),
      };
      process.stderr.write(`${fn} ${strategy}: median trials to target ${(row[strategy] as { median_trials_to_target: number }).median_trials_to_target}\n`);
    }
    out[fn] = row;
  }
  return out;
}

interface SimTrial {
  n: number;
  params: Params;
  step: number;
  curve: Curve;
}

/** Runs `n` random trials of the learning-curve surrogate, `concurrency` at a time, under an early-stopping rule. */
async function simulateSweep(client: Client, rule: 'none' | 'asha' | 'median', seed: number, n: number, concurrency: number, maxSteps: number, evalSteps: number) {
  const config = SweepConfigSchema.parse({
    experiment: 'bench',
    base_config: { method: 'synthetic', function: 'learning-curve', max_steps: maxSteps, eval_steps: evalSteps },
    search_space: { learning_rate: { type: 'log_uniform', min: 1e-5, max: 0.5 }, width: { type: 'int', min: 16, max: 1024 } },
    strategy: 'random',
    early_stopping: { rule, reduction_factor: 3, grace_steps: evalSteps, min_completed_trials: 5 },
  });
  const { suggestions } = await client.ask({ space: config.search_space, strategy: 'random', directions: ['minimize'], seed, history: [], numbers: Array.from({ length: n }, (_, i) => i) });
  const queue = suggestions.map((s) => ({ n: s.n, params: s.params, step: 0, curve: [] as Curve }));
  const running: SimTrial[] = [];
  const state = emptyRuleState();
  let steps = 0;
  let best = Infinity;
  let completed = 0;
  while (queue.length || running.length) {
    while (running.length < concurrency && queue.length) running.push(queue.shift()!);
    for (const t of [...running]) {
      t.step++;
      steps++;
      if (t.step % evalSteps !== 0 && t.step !== maxSteps) continue;
      const value = syntheticMetrics('learning-curve', t.params, t.step, maxSteps, 0.02)['eval/loss']!;
      t.curve.push([t.step, value]);
      const stop = t.step < maxSteps && decideStop(config.early_stopping, evalSteps, 'minimize', t.curve, state).stop;
      if (t.step === maxSteps) {
        completed++;
        best = Math.min(best, value);
        state.completed.push(t.curve);
      }
      if (stop || t.step === maxSteps) running.splice(running.indexOf(t), 1);
    }
  }
  return { steps, best, completed };
}

async function earlyStopping(client: Client, seeds: number) {
  const n = 81;
  const maxSteps = 270;
  const evalSteps = 10;
  type Sim = Awaited<ReturnType<typeof simulateSweep>>;
  const rows: { seed: number; full: Sim; asha: Sim; median: Sim }[] = [];
  for (let seed = 0; seed < seeds; seed++) {
    const full = await simulateSweep(client, 'none', seed, n, 4, maxSteps, evalSteps);
    const asha = await simulateSweep(client, 'asha', seed, n, 4, maxSteps, evalSteps);
    const med = await simulateSweep(client, 'median', seed, n, 4, maxSteps, evalSteps);
    rows.push({ seed, full, asha, median: med });
  }
  const fraction = (k: 'asha' | 'median') => rows.map((r) => 1 - r[k].steps / r.full.steps);
  const regret = (k: 'asha' | 'median') => rows.map((r) => r[k].best - r.full.best);
  return {
    trials: n,
    max_steps: maxSteps,
    eval_steps: evalSteps,
    concurrency: 4,
    reduction_factor: 3,
    full_budget_steps: n * maxSteps,
    asha: { median_fraction_saved: median(fraction('asha')), min_fraction_saved: Math.min(...fraction('asha')), median_best_minus_full_best: median(regret('asha')), same_best_trial: rows.filter((r) => r.asha.best === r.full.best).length },
    median_rule: { median_fraction_saved: median(fraction('median')), min_fraction_saved: Math.min(...fraction('median')), median_best_minus_full_best: median(regret('median')), same_best_trial: rows.filter((r) => r.median.best === r.full.best).length },
    median_full_best: median(rows.map((r) => r.full.best)),
    seeds: rows.length,
    per_seed: rows,
  };
}

async function main(): Promise<void> {
  const { bootstrap } = loadConfig();
  const seeds = arg('seeds', 15);
  const budget = arg('budget', 80);
  const client = suggestClient(bootstrap.python);
  const started = Date.now();
  const tpe = await tpeVsRandom(client, seeds, budget);
  const es = await earlyStopping(client, seeds);
  client.close();
  await mergeResults({
    synthetic: { tpe_vs_random: tpe, early_stopping: es, seeds, wall_seconds: (Date.now() - started) / 1000, measured_at: new Date().toISOString() },
  });
}

await main();

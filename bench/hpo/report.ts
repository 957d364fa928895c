// bench/results/hpo.json holds one section per benchmark (synthetic, scale, lora); each run replaces its own
// section and rewrites bench/results/hpo.md from the whole file.
import { existsSync, readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

const jsonPath = fileURLToPath(new URL('../results/hpo.json', import.meta.url));
const mdPath = fileURLToPath(new URL('../results/hpo.md', import.meta.url));

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

export async function mergeResults(section: Json): Promise<void> {
  const all: Json = existsSync(jsonPath) ? JSON.parse(readFileSync(jsonPath, 'utf8')) : {};
  Object.assign(all, section);
  await writeFile(jsonPath, JSON.stringify(all, null, 2) + '\n');
  await writeFile(mdPath, markdown(all));
  process.stderr.write(`wrote ${jsonPath} and ${mdPath}\n`);
}

const f = (x: unknown, d = 3): string => (typeof x === 'number' ? (Number.isInteger(x) ? String(x) : x.toFixed(d)) : String(x ?? ''));

function markdown(r: Json): string {
  const out = ['# Hyperparameter sweeps', '', 'Produced by `bench/hpo/*.ts`; the raw numbers are in `hpo.json`.', ''];
  if (r.synthetic) {
    const s = r.synthetic;
    out.push('## Synthetic objectives (`npx tsx bench/hpo/synthetic.ts`)', '', `${s.seeds} seeds each; measured ${s.measured_at}.`, '');
    out.push('### Trials to reach the target, one trial at a time (median; a run that never reaches it counts as budget + 1)', '');
    out.push('| objective | optimum | target | budget | TPE (bayesian) | random | TPE reached | random reached |', '| --- | --- | --- | --- | --- | --- | --- | --- |');
    for (const [fn, row] of Object.entries<Json>(s.tpe_vs_random))
      out.push(`| ${fn} | ${f(row.optimum, 4)} | ${f(row.target, 4)} | ${row.budget} | ${f(row.bayesian.median_trials_to_target)} | ${f(row.random.median_trials_to_target)} | ${row.bayesian.reached}/${s.seeds} | ${row.random.reached}/${s.seeds} |`);
    const e = s.early_stopping;
    out.push('', `### Early stopping on the learning-curve surrogate (${e.trials} random trials of ${e.max_steps} steps, eval every ${e.eval_steps}, ${e.concurrency} at a time)`, '');
    out.push('| rule | trial-steps saved (median) | saved (worst seed) | best loss minus full-budget best (median) | same best as full budget |', '| --- | --- | --- | --- | --- |');
    for (const [name, k] of [['ASHA (eta 3)', 'asha'], ['median rule', 'median_rule']] as const)
      out.push(`| ${name} | ${f(e[k].median_fraction_saved * 100, 1)}% | ${f(e[k].min_fraction_saved * 100, 1)}% | ${f(e[k].median_best_minus_full_best, 4)} | ${e[k].same_best_trial}/${e.seeds} |`);
    out.push('', `Full budget: ${e.full_budget_steps} trial-steps per sweep; median best loss ${f(e.median_full_best, 4)}.`, '');
  }
  if (r.scale) {
    const s = r.scale;
    out.push('## Scale: a 1,000-trial sweep through Temporal (`npx tsx bench/hpo/scale.ts`)', '');
    out.push('| trials | concurrent | wall time | per trial (wall / trials) | mean trial duration | continue-as-new runs | largest run history (events / bytes) |', '| --- | --- | --- | --- | --- | --- | --- |');
    out.push(`| ${s.trials_finished} | ${s.max_concurrent_trials} | ${f(s.wall_seconds, 1)} s | ${f(s.seconds_per_trial * 1000, 0)} ms | ${f(s.mean_trial_seconds * 1000, 0)} ms | ${s.runs} | ${s.max_history_events} / ${s.max_history_bytes} |`, '');
    out.push(`Trials are synthetic (${s.trial}); their own work is nil, so the times are the scheduling overhead: suggestion, child workflow, catalogue rows, tracked run, reports. Measured ${s.measured_at} on ${s.machine}.`, '');
  }
  if (r.lora) {
    const s = r.lora;
    out.push('## A real sweep: LoRA trials of the tiny model (`npx tsx bench/hpo/lora.ts`)', '');
    out.push('| trials | concurrent | strategy | early stopping | wall time | best eval/loss | best trial | trial-steps run | saved |', '| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
    out.push(`| ${s.trials} | ${s.max_concurrent_trials} | ${s.strategy} | ${s.early_stopping} | ${f(s.wall_seconds, 1)} s | ${f(s.best_value, 4)} | ${JSON.stringify(s.best_params)} | ${s.trial_steps} | ${s.trial_steps_saved} (${f((s.trial_steps_saved / (s.trials * s.max_steps)) * 100, 1)}%) |`, '');
    out.push(`By status: ${JSON.stringify(s.by_status)}. Measured ${s.measured_at} on ${s.machine}.`, '');
  }
  return out.join('\n') + '\n';
}

// Gate cost: the wall time of the pipeline's eval stage and how it grows with the size of the held-out set, on
// the tiny base model; and Candle vs PyTorch evaluation throughput on the same held-out token ids.
//
//     npx tsx bench/gate/run.ts [--sizes 25,50,100,200] [--repeats 3]
//
// Eval stage: the evaluateModels activity itself (activities/evaluation.ts) under a mock activity context, with an
// embedded catalogue (PGlite, in memory), file:// objects and the local executor: the job runner, the trainer's
// `eval` job (base and candidate scored, greedy answers, general-text retention), the metrics, the artifacts and
// the gate's bootstrap, as a pipeline runs it (the first version of a model: no production model to score). The
// candidate is an untrained LoRA adapter of the pipeline's default shape: the job's cost depends on the shape,
// not the values. Held-out sets are the last N records of the bundled task data (examples/data/demo-task.jsonl).
// Writes bench/results/gate.{json,md}.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createEvaluationActivities, type EvalOutcome } from '../../activities/evaluation.js';
import { createPipelineRecordActivities } from '../../activities/pipeline-records.js';
import type { ActivityDeps } from '../../activities/deps.js';
import { jobTokenSecrets } from '../../jobs/deps.js';
import { PipelineInputSchema, type PipelineWorkflowInput } from '../../contracts/pipeline.js';
import { openCatalogue } from '../../db/client.js';
import { seedDevOrganization } from '../../db/repo/auth.js';
import { loadConfig, repoRoot } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { createObjectStore } from '../../lib/object-store.js';
import { createExecutor } from '../../jobs/executor/factory.js';

const { values: opts } = parseArgs({
  options: { sizes: { type: 'string', default: '25,50,100,200' }, repeats: { type: 'string', default: '3' }, render: { type: 'boolean', default: false } },
});
const sizes = opts.sizes.split(',').map(Number);
const repeats = Number(opts.repeats);
const TASK_DATA = join(repoRoot, 'examples/data/demo-task.jsonl');

interface Phases {
  /** trainer start to the base model scored: python imports, model load, base scoring */
  start_and_base_s: number;
  /** the adapter loaded and the candidate scored */
  candidate_s: number;
  /** the activity's wall time outside the trainer: job runner, envelope, polling, metrics, artifacts, gate */
  outside_trainer_s: number;
}

interface EvalSample {
  examples: number;
  seconds: number[];
  best_seconds: number;
  per_example_ms: number;
  phases: Phases;
}

/** Phases of one eval job from the timestamps of its log (job runner and trainer lines). */
function jobPhases(pipelineId: string, wallSeconds: number): Phases {
  const lines = readFileSync(join(home, 'work', 'jobs', `${pipelineId}-eval`, 'job.log'), 'utf8').split('\n');
  const at = (marker: string): number => {
    const line = lines.find((l) => l.includes(marker));
    if (!line) throw new Error(`eval job log of ${pipelineId} has no line with "${marker}"`);
    return Date.parse(line.slice(0, 23).replace(' ', 'T').replace(',', '.') + 'Z') / 1000;
  };
  const started = at('-m hanzo_ml eval');
  const base = at('hanzo_ml.evaluate: base:');
  const tuned = at('hanzo_ml.evaluate: tuned:');
  const exited = at('the trainer exited');
  return { start_and_base_s: base - started, candidate_s: tuned - base, outside_trainer_s: wallSeconds - (exited - started) };
}

const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-bench-gate-'));
const loaded = loadConfig({ HANZO_ML_HOME: home, HANZO_ML_LOGGING_LEVEL: 'warn' });
const { config, bootstrap } = loaded;
if (!bootstrap.python || !bootstrap.base_model || !bootstrap.candle) throw new Error('.bootstrap.json lacks python, base_model or candle: run scripts/bootstrap.sh');
const python = (args: string[]): string =>
  execFileSync(bootstrap.python, [join(repoRoot, 'bench/gate/engines.py'), ...args], { env: { ...process.env, PYTHONPATH: join(repoRoot, 'trainer') }, stdio: ['ignore', 'pipe', 'ignore'] }).toString();

/** The last n records of the bundled task data: a held-out set of that size. */
function heldoutSet(n: number): string {
  const records = readFileSync(TASK_DATA, 'utf8').split('\n').filter(Boolean);
  if (n > records.length) throw new Error(`--sizes: ${n} is more than the ${records.length} records of ${TASK_DATA}`);
  const file = join(home, `heldout-${n}.jsonl`);
  writeFileSync(file, records.slice(-n).join('\n') + '\n');
  return file;
}

async function evalStageTimes(): Promise<EvalSample[]> {
  for (const dir of ['logs', 'work', 'tmp', 'objects']) mkdirSync(join(home, dir), { recursive: true });
  const log = createLogger(config.logging);
  const catalogue = await openCatalogue({});
  await seedDevOrganization(catalogue.db, 'dev', config.auth.dev_token);
  const deps: ActivityDeps = {
    db: catalogue.db,
    store: await createObjectStore(config.storage, home),
    config,
    home,
    bootstrap,
    executor: createExecutor(loaded, log),
    log,
    trackingUri: 'http://127.0.0.1:1',
    jobSecrets: jobTokenSecrets(catalogue.db),
  };
  const hp = PipelineInputSchema.shape.hyperparameters.parse(undefined);
  const adapter = join(home, 'adapter');
  python(['adapter', '--base', bootstrap.base_model, '--out', adapter, '--rank', String(hp.lora_rank), '--alpha', String(hp.lora_alpha), '--targets', hp.target_modules.join(',')]);
  const records = createPipelineRecordActivities(deps);
  const evaluation = createEvaluationActivities(deps);
  // Rounds over all sizes rather than all repeats of one size: a change in the machine's load (it is shared) then
  // touches every size alike, and the best of the rounds is compared.
  const runs = new Map<number, { seconds: number; phases: Phases }[]>(sizes.map((n) => [n, []]));
  const tests = new Map(sizes.map((n) => [n, pathToFileURL(heldoutSet(n)).href]));
  for (let r = 0; r < repeats; r++) {
    for (const n of sizes) {
      const test = tests.get(n)!;
      const pipelineId = `gate-${n}-${r}`;
      const input: PipelineWorkflowInput = {
        ...PipelineInputSchema.parse({ model_name: 'gate-bench', base_model: bootstrap.base_model, dataset: { name: 'demo', version: 'latest' } }),
        organization_id: 'dev',
        requested_by: 'bench',
        runtime: { heartbeat_timeout: '30s', approval_timeout: '1h', reload_deadline: '1h' },
      };
      const dataset = { id: 'bench', name: 'demo', version: 1, sha256: 'bench', splits: { train: test, validation: test, test } };
      const { runId } = await records.createTrackingRun({ pipelineId, input, dataset });
      const t0 = performance.now();
      const report = (await new MockActivityEnvironment().run(() => evaluation.evaluateModels({ pipelineId, runId, input, dataset, adapterPath: pathToFileURL(adapter).href }))) as EvalOutcome;
      const seconds = (performance.now() - t0) / 1000;
      if (report.tuned?.num_examples !== n) throw new Error(`eval scored ${report.tuned?.num_examples} examples, expected ${n}`);
      runs.get(n)!.push({ seconds, phases: jobPhases(pipelineId, seconds) });
      process.stderr.write(`eval stage, ${n} examples: ${seconds.toFixed(1)} s (load ${loadavg()[0]!.toFixed(1)})\n`);
    }
  }
  const out: EvalSample[] = sizes.map((n) => {
    const all = runs.get(n)!;
    const best = all.reduce((a, b) => (b.seconds < a.seconds ? b : a));
    return { examples: n, seconds: all.map((x) => x.seconds), best_seconds: best.seconds, per_example_ms: (best.seconds / n) * 1000, phases: best.phases };
  });
  await catalogue.close();
  return out;
}

/** Least squares wall = fixed + per_example * n over the best times. */
function fit(samples: EvalSample[]): { fixed_seconds: number; per_example_seconds: number } {
  const n = samples.length;
  const xs = samples.map((s) => s.examples);
  const ys = samples.map((s) => s.best_seconds);
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  const slope = xs.reduce((a, x, i) => a + (x - mx) * (ys[i]! - my), 0) / xs.reduce((a, x) => a + (x - mx) ** 2, 0);
  return { fixed_seconds: my - slope * mx, per_example_seconds: slope };
}

interface Engine {
  seconds: number;
  tokens_per_s: number;
  scored_tokens_per_s: number;
  how: string;
  torch?: string;
}
interface Throughput {
  sequences: number;
  processed_tokens: number;
  scored_tokens: number;
  repeats: number;
  threads: number;
  pytorch_eval_job: Engine;
  pytorch_inference_mode: Engine;
  candle: Engine;
  general_text: { documents: number; tokens: number; pytorch_eval_job_seconds: number; candle_seconds: number };
}

function throughput(): Throughput {
  const largest = Math.max(...sizes);
  const text = python(['throughput', '--base', bootstrap.base_model, '--heldout', heldoutSet(largest), '--candle', bootstrap.candle, '--tokens-out', join(home, 'heldout-tokens.json'), '--general', join(repoRoot, 'examples/heldout/general-text.txt'), '--threads', String(config.trainer.threads), '--repeats', String(Math.min(repeats, 2))]);
  return JSON.parse(text.trim().split('\n').at(-1)!) as Throughput;
}

/** Says so when the machine's load, not the suite size, decided the times: then the fit measures nothing. */
function noiseWarning(evals: EvalSample[], line: ReturnType<typeof fit>): string[] {
  const spread = Math.max(...evals.map((e) => Math.max(...e.seconds) / Math.min(...e.seconds)));
  if (spread < 1.5 && line.per_example_seconds >= 0) return [];
  return [
    '',
    `**Not a measurement of growth:** runs of one size differ by up to ${spread.toFixed(1)}x${line.per_example_seconds < 0 ? ' and the fitted cost per example is negative' : ''}: ` +
      "the shared machine's load, not the suite size, decided these times. Rerun on a quiet machine; until then read the " +
      'phases of the fastest runs and the fixed cost of the retention set above.',
  ];
}

function markdown(evals: EvalSample[], line: ReturnType<typeof fit>, t: Throughput, machine: Record<string, unknown>, rounds: number): string {
  const first = evals[0]!;
  const last = evals.at(-1)!;
  const rows = evals.map(
    (e) =>
      `| ${e.examples} | ${e.best_seconds.toFixed(1)} | ${e.seconds.map((s) => s.toFixed(1)).join(' / ')} | ${e.per_example_ms.toFixed(0)} | ` +
      `${e.phases.start_and_base_s.toFixed(1)} | ${e.phases.candidate_s.toFixed(1)} | ${e.phases.outside_trainer_s.toFixed(1)} |`,
  );
  const g = t.general_text;
  const eng = (name: string, e: Engine) => `| ${name} | ${e.seconds.toFixed(2)} | ${e.tokens_per_s.toFixed(0)} | ${e.scored_tokens_per_s.toFixed(1)} |`;
  return [
    '# Gate cost: the eval stage on the tiny model, and Candle vs PyTorch eval throughput',
    '',
    `\`npx tsx bench/gate/run.ts --sizes ${sizes.join(',')} --repeats ${rounds}\`. Machine: ${String(machine.cpus)} CPU cores (${String(machine.cpu)}), shared with other work`,
    `(1-minute load average ${Number(machine.load_1m_before).toFixed(1)} before, ${Number(machine.load_1m_after).toFixed(1)} after), trainer threads ${config.trainer.threads}. Absolute times move with the load; compare within a run.`,
    '',
    '## Eval stage wall time by held-out set size',
    '',
    'The pipeline\'s eval stage (`evaluateModels`: job runner, trainer `eval` job scoring base and candidate — test NLL,',
    `greedy answers of up to 12 tokens, general-text retention on ${'`examples/heldout/general-text.txt`'}, the suite's`,
    `instruction set when it has one (${'`examples/heldout/instructions.jsonl`'}, suite ${PipelineInputSchema.shape.eval.parse(undefined).suite}, the pipeline default) — then metrics, artifacts`,
    'and the gate\'s bootstrap), first version of a model (no production model to score; with one, a third model is',
    'scored). Held-out sets: the last N records of the bundled task data; the general text and the instruction set are',
    'the same size in every row.',
    '',
    'Phases of the best run, from the eval job\'s log: trainer start to base scored (imports, model load, base), the',
    'candidate (adapter load and scoring), and the activity outside the trainer (job runner, polling, metrics, gate).',
    '',
    '| examples | best wall s | runs (s) | ms per example (best / N) | start + base s | candidate s | outside trainer s |',
    '| --- | --- | --- | --- | --- | --- | --- |',
    ...rows,
    '',
    `Fixed per model, whatever the suite size: the general-text retention set (${g.documents} documents, ${g.tokens} tokens) costs ` +
      `${g.pytorch_eval_job_seconds.toFixed(1)} s to score once with PyTorch as the eval job scores it (Candle: ${g.candle_seconds.toFixed(1)} s); ` +
      'the job scores it for base and candidate (and production when there is one).',
    '',
    `Linear fit over the best runs: wall ≈ ${line.fixed_seconds.toFixed(1)} s + ${(line.per_example_seconds * 1000).toFixed(0)} ms × examples; ` +
      `${last.examples / first.examples}x the examples cost ${(last.best_seconds / first.best_seconds).toFixed(2)}x the wall time.`,
    ...noiseWarning(evals, line),
    '',
    '## Eval throughput on the same held-out token ids',
    '',
    `The ${t.sequences} held-out records of the largest set, rendered to token ids as the merge job renders them for Candle validation`,
    `(${t.processed_tokens} tokens through the forward pass, ${t.scored_tokens} assistant tokens scored), each sequence scored alone, best of ${t.repeats}.`,
    '',
    '| engine | seconds | tokens/s | scored tokens/s |',
    '| --- | --- | --- | --- |',
    eng(`PyTorch ${t.pytorch_eval_job.torch ?? ''}, as the eval job calls it (${t.threads} threads)`, t.pytorch_eval_job),
    eng('PyTorch, same calls under torch.inference_mode()', t.pytorch_inference_mode),
    eng('Candle (`validate --heldout-tokens`, minus the run without it)', t.candle),
    '',
    `Candle / PyTorch (eval job) throughput: ${(t.candle.tokens_per_s / t.pytorch_eval_job.tokens_per_s).toFixed(1)}x; ` +
      `Candle / PyTorch (inference mode): ${(t.candle.tokens_per_s / t.pytorch_inference_mode.tokens_per_s).toFixed(1)}x.`,
    ...(t.candle.tokens_per_s < t.pytorch_eval_job.tokens_per_s
      ? ['', 'On this CPU PyTorch scores faster than Candle: spec 000\'s claim that Candle evaluation iterates faster does not hold here.']
      : []),
    '',
  ].join('\n');
}

if (opts.render) {
  // Re-renders gate.md from gate.json (after a change to the table's text), without measuring again.
  const saved = JSON.parse(readFileSync(join(repoRoot, 'bench/results/gate.json'), 'utf8')) as { sizes: number[]; repeats: number; eval_stage: EvalSample[]; fit: ReturnType<typeof fit>; throughput: Throughput; machine: Record<string, unknown> };
  sizes.splice(0, sizes.length, ...saved.sizes);
  writeFileSync(join(repoRoot, 'bench/results/gate.md'), markdown(saved.eval_stage, saved.fit, saved.throughput, saved.machine, saved.repeats));
  process.exit(0);
}

const started = Date.now();
const loadBefore = loadavg()[0]!;
const evals = await evalStageTimes();
const line = fit(evals);
const t = throughput();
const machine = { cpus: cpus().length, cpu: cpus()[0]?.model ?? 'unknown', load_1m_before: loadBefore, load_1m_after: loadavg()[0]!, note: 'shared with other work while measured' };
const result = { sizes, repeats, eval_stage: evals, fit: line, growth: evals.at(-1)!.best_seconds / evals[0]!.best_seconds, throughput: t, machine, total_seconds: (Date.now() - started) / 1000 };
const outDir = join(repoRoot, 'bench/results');
writeFileSync(join(outDir, 'gate.json'), JSON.stringify(result, null, 2) + '\n');
writeFileSync(join(outDir, 'gate.md'), markdown(evals, line, t, machine, repeats));
process.stdout.write(JSON.stringify({ fit: line, growth: result.growth, candle_tokens_per_s: t.candle.tokens_per_s, pytorch_tokens_per_s: t.pytorch_eval_job.tokens_per_s, total_seconds: result.total_seconds }) + '\n');

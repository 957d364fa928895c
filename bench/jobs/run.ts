// bench/jobs: what a submitted job's events and log cost and how fast they arrive, on the embedded stack (PGlite
// catalogue, Temporal dev server, worker and API in this process, local executor, file:// objects).
//   1. submit -> running: --submits command jobs one after another; the time from POST /v1/jobs to its `running`
//      status event, and to the first event an SSE client opened right after the POST receives.
//   2. step -> SSE client: a recipe job (lora on the tiny base model, --steps steps) followed over SSE; for each
//      `metrics` event, its arrival at the client minus the trainer's own timestamp of that step (the train/loss
//      point it logged to the run), split into trainer -> event row and event row -> client.
//   3. --followers GET /v1/jobs/{id}/logs streams (bench/jobs/followers.ts, a process of its own) on a command job
//      that prints --rate lines/s for --seconds: this process's RSS and CPU while they follow, and lines/s delivered.
// Writes bench/results/jobs.json and jobs.md.
//
//   npx tsx bench/jobs/run.ts [--submits 5] [--steps 60] [--followers 500] [--rate 100] [--seconds 30]
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { createApiClient } from '../../cli/api-client.js';
import { sseEvents } from '../../cli/job-logs.js';
import type { JobEventView } from '../../contracts/jobs.js';
import { DEFAULT_BASE_MODEL } from '../../lib/base-models.js';
import { repoRoot } from '../../lib/config.js';
import { DEV_TOKEN } from '../../test/support/config.js';
import { startTestStack } from '../../test/support/stack.js';

const arg = (flag: string, fallback: number): number => {
  const i = process.argv.indexOf(flag);
  return i < 0 ? fallback : Number(process.argv[i + 1]);
};
const SUBMITS = arg('--submits', 5);
const STEPS = arg('--steps', 60);
const FOLLOWERS = arg('--followers', 500);
const RATE = arg('--rate', 100);
const SECONDS = arg('--seconds', 30);
const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]! : NaN;
};
const round = (x: number, d = 0): number => Math.round(x * 10 ** d) / 10 ** d;
const summary = (xs: number[]) => ({ n: xs.length, p50_ms: round(pct(xs, 50)), p99_ms: round(pct(xs, 99)), max_ms: round(Math.max(...xs)) });

const stack = await startTestStack({ HANZO_ML_LIMITS_EVENT_STREAMS_PER_TOKEN: String(FOLLOWERS + 10), HANZO_ML_LOGGING_LEVEL: 'error' });
const api = createApiClient(stack.runtime.apiUrl, DEV_TOKEN);

/** Follows a job's events over SSE until it ends, calling `on` with each event and its arrival time. */
async function followEvents(id: string, on: (e: JobEventView, at: number) => void): Promise<void> {
  const res = await api.stream(`/v1/jobs/${id}/events`, { accept: 'text/event-stream' });
  for await (const e of sseEvents(res.body!)) on(JSON.parse(e.data) as JobEventView, Date.now());
}

async function submitToRunning() {
  const toRunning: number[] = [];
  const toFirstEvent: number[] = [];
  for (let i = 0; i < SUBMITS; i++) {
    const t0 = Date.now();
    const job = await api.post<{ id: string }>('/v1/jobs', { type: 'training', image: 'trainer', command: ['python3', '-c', 'import time; time.sleep(1)'] });
    let first: number | null = null;
    let running: number | null = null;
    await followEvents(job.id, (e, at) => {
      first ??= at;
      if (e.type === 'status' && e.data.status === 'running') running = Date.parse(e.created_at);
    });
    toFirstEvent.push(first! - t0);
    if (running !== null) toRunning.push(running - t0);
  }
  return { submit_to_running: summary(toRunning), submit_to_first_event: summary(toFirstEvent) };
}

async function stepToClient() {
  const rows = Array.from({ length: 32 }, (_, i) => JSON.stringify({ messages: [{ role: 'user', content: `what is ${i} plus one?` }, { role: 'assistant', content: `${i + 1}` }] })).join('\n');
  await api.post('/v1/datasets?name=bench-jobs&format=jsonl&wait=true', undefined, { raw: rows, headers: { 'content-type': 'application/octet-stream' } });
  const job = await api.post<{ id: string }>('/v1/jobs', {
    type: 'training',
    recipe: { base_model: DEFAULT_BASE_MODEL, method: 'lora', dataset: { name: 'bench-jobs' }, hyperparameters: { learning_rate: 1e-3, max_steps: STEPS, batch_size: 2, max_seq_length: 64 } },
  });
  const arrivals = new Map<number, { at: number; created: number }>();
  await followEvents(job.id, (e, at) => {
    if (e.type === 'metrics') arrivals.set(Number(e.data.step), { at, created: Date.parse(e.created_at) });
  });
  const view = await api.get<{ run_id: string; status: string }>(`/v1/jobs/${job.id}`);
  const history = await api.get<{ metrics: { step: number; timestamp: number }[] }>(`/api/2.0/mlflow/metrics/get-history?run_id=${view.run_id}&metric_key=train/loss&max_results=10000`);
  const stepAt = new Map(history.metrics.map((m) => [m.step, m.timestamp]));
  const total: number[] = [];
  const toRow: number[] = [];
  const toClient: number[] = [];
  for (const [step, a] of arrivals) {
    const t = stepAt.get(step);
    if (t === undefined) continue;
    total.push(a.at - t);
    toRow.push(a.created - t);
    toClient.push(a.at - a.created);
  }
  return { status: view.status, steps: STEPS, steps_with_an_event: arrivals.size, step_to_client: summary(total), step_to_event_row: summary(toRow), event_row_to_client: summary(toClient) };
}

async function logFollowers() {
  const script = `import sys, time\nfor i in range(${RATE * SECONDS}):\n    print(f"line {i:06d} " + "x" * 60, flush=True)\n    time.sleep(${1 / RATE})\n`;
  const job = await api.post<{ id: string }>('/v1/jobs', { type: 'training', image: 'trainer', command: ['python3', '-c', script] });
  const rssBefore = process.memoryUsage().rss;
  const samples: number[] = [];
  const sampler = setInterval(() => samples.push(process.memoryUsage().rss), 500);
  const cpu0 = process.cpuUsage();
  const t0 = Date.now();
  const { stdout } = await promisify(execFile)('npx', ['tsx', join(repoRoot, 'bench/jobs/followers.ts'), '--url', stack.runtime.apiUrl, '--token', DEV_TOKEN, '--job', job.id, '--n', String(FOLLOWERS)], { maxBuffer: 1 << 20 });
  const wall = (Date.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  clearInterval(sampler);
  const clients = JSON.parse(stdout.trim().split('\n').at(-1)!) as { followers: number; ended: number; lines: number; bytes: number; seconds: number; outcomes: string[] };
  return {
    job_lines: RATE * SECONDS,
    ...clients,
    follow_wall_s: round(wall, 1),
    lines_per_s: round(clients.lines / wall),
    api_rss_before_mib: round(rssBefore / 2 ** 20),
    api_rss_max_mib: round(Math.max(...samples) / 2 ** 20),
    api_cpu_cores: round((cpu.user + cpu.system) / 1e6 / wall, 2),
  };
}

try {
  const loadBefore = loadavg().map((x) => round(x, 2));
  const latency = await submitToRunning();
  process.stderr.write(`submit: ${JSON.stringify(latency)}\n`);
  const steps = await stepToClient();
  process.stderr.write(`steps: ${JSON.stringify(steps)}\n`);
  const followers = await logFollowers();
  process.stderr.write(`followers: ${JSON.stringify(followers)}\n`);
  const result = {
    date: new Date().toISOString(),
    machine: { cpus: cpus().length, cpu: cpus()[0]?.model ?? '', memory_gib: round(totalmem() / 2 ** 30), node: process.version },
    load_average_before: loadBefore,
    load_average_after: loadavg().map((x) => round(x, 2)),
    setup: { submits: SUBMITS, steps: STEPS, followers: FOLLOWERS, lines_per_s_offered: RATE, seconds: SECONDS },
    latency,
    steps,
    followers,
  };
  const out = join(repoRoot, 'bench/results');
  writeFileSync(join(out, 'jobs.json'), JSON.stringify(result, null, 2) + '\n');
  writeFileSync(join(out, 'jobs.md'), markdown(result));
} finally {
  await stack.stop();
}

function markdown(r: {
  date: string;
  machine: Record<string, unknown>;
  load_average_before: number[];
  load_average_after: number[];
  setup: Record<string, number>;
  latency: Awaited<ReturnType<typeof submitToRunning>>;
  steps: Awaited<ReturnType<typeof stepToClient>>;
  followers: Awaited<ReturnType<typeof logFollowers>>;
}): string {
  const s = (x: { n: number; p50_ms: number; p99_ms: number; max_ms: number }) => `${x.p50_ms} / ${x.p99_ms} / ${x.max_ms} (n=${x.n})`;
  return [
    `# Jobs: events and logs (${r.date})`,
    '',
    `Embedded stack in one process (PGlite catalogue, Temporal dev server, worker, API, local executor, file:// objects); clients in this process except the log followers (a process of their own). Machine: ${JSON.stringify(r.machine)}; load average (1/5/15 min) ${r.load_average_before.join(' / ')} before, ${r.load_average_after.join(' / ')} after. Setup: ${JSON.stringify(r.setup)}.`,
    '',
    '| measure | p50 / p99 / max ms |',
    '|---|---|',
    `| submit -> running status event (command job, local executor) | ${s(r.latency.submit_to_running)} |`,
    `| submit -> first event at an SSE client | ${s(r.latency.submit_to_first_event)} |`,
    `| trainer step -> SSE client (${r.steps.steps_with_an_event} of ${r.steps.steps} steps had an event) | ${s(r.steps.step_to_client)} |`,
    `| ... trainer step -> event row (progress.json mirror + worker poll) | ${s(r.steps.step_to_event_row)} |`,
    `| ... event row -> SSE client | ${s(r.steps.event_row_to_client)} |`,
    '',
    `Log followers: ${r.followers.followers} GET /v1/jobs/{id}/logs streams on one API process, a command job printing ${r.followers.job_lines} lines of 73 bytes; ${r.followers.ended} followers ended with the outcome; ${r.followers.lines} lines (${r.followers.bytes} bytes) delivered in ${r.followers.follow_wall_s} s (${r.followers.lines_per_s} lines/s over all followers); API process RSS ${r.followers.api_rss_before_mib} MiB before, ${r.followers.api_rss_max_mib} MiB at most; API process CPU ${r.followers.api_cpu_cores} cores on average (this process also runs the worker and Temporal's client).`,
    '',
    'The job runner mirrors job.log to the store every 5 s, so followers receive a log in bursts of about 5 s of lines. Steps faster than the worker polls (500 ms) share one event: `metrics` events carry the newest step each poll sees.',
    '',
  ].join('\n');
}

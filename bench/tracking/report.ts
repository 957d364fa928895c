// Turns the driver's raw numbers into the benchmark's summary (throughput, p50/p99, ratios) and Markdown table.
export type Workload = 'ingest' | 'ingest_wire' | 'history' | 'history_wire' | 'search' | 'search_wire';
export const WORKLOADS: Workload[] = ['ingest', 'ingest_wire', 'history', 'history_wire', 'search', 'search_wire'];
type System = 'hanzo' | 'mlflow';

export interface WorkloadResult {
  wall_s: number;
  latencies_ms: number[];
  problems: string[];
  points?: number;
  points_read?: number;
  read_back_points?: number;
  seed?: { wall_s: number; latencies_ms: number[] };
  [k: string]: unknown;
}

export interface Stats {
  ops: number;
  points: number;
  wall_s: number;
  points_per_s: number;
  p50_ms: number;
  p99_ms: number;
  read_back_ok: boolean;
  seed?: { wall_s: number; requests: number; p50_ms: number; p99_ms: number };
}

/** Nearest-rank percentile. */
export function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

const round = (x: number, digits = 1): number => Math.round(x * 10 ** digits) / 10 ** digits;

export function stats(w: Workload, r: WorkloadResult): Stats {
  const points = w === 'ingest' || w === 'ingest_wire' ? r.points! : r.points_read!;
  return {
    ops: r.latencies_ms.length,
    points,
    wall_s: round(r.wall_s, 2),
    points_per_s: Math.round(points / r.wall_s),
    p50_ms: round(percentile(r.latencies_ms, 50)),
    p99_ms: round(percentile(r.latencies_ms, 99)),
    read_back_ok: r.problems.length === 0 && (w === 'search' || w === 'search_wire' || r.read_back_points === r.points),
    ...(r.seed
      ? { seed: { wall_s: round(r.seed.wall_s, 2), requests: r.seed.latencies_ms.length, p50_ms: round(percentile(r.seed.latencies_ms, 50)), p99_ms: round(percentile(r.seed.latencies_ms, 99)) } }
      : {}),
  };
}

export interface Comparison {
  hanzo: Stats;
  mlflow: Stats;
  /** hanzo-ml over MLflow: > 1 means hanzo-ml moves more points per second. */
  throughput_ratio: number;
  /** MLflow over hanzo-ml: > 1 means hanzo-ml answers faster. */
  p50_speedup: number;
  p99_speedup: number;
}

export function summarize(pair: Record<System, Record<Workload, WorkloadResult>>): Record<Workload, Comparison> {
  const out = {} as Record<Workload, Comparison>;
  for (const w of WORKLOADS.filter((w) => pair.hanzo[w] && pair.mlflow[w])) {
    const hanzo = stats(w, pair.hanzo[w]);
    const mlflow = stats(w, pair.mlflow[w]);
    out[w] = {
      hanzo,
      mlflow,
      throughput_ratio: round(hanzo.points_per_s / mlflow.points_per_s, 2),
      p50_speedup: round(mlflow.p50_ms / hanzo.p50_ms, 2),
      p99_speedup: round(mlflow.p99_ms / hanzo.p99_ms, 2),
    };
  }
  return out;
}

interface Result {
  command: string;
  date: string;
  machine: { cores: number; cpu: string; ram_gib: number; load_average_1m: number };
  versions: Record<string, string>;
  settings: { quick: boolean; procs: number; workers: number; ingest: object; history: object; search: object };
  backends: Record<string, { workers: number; hanzo: string; mlflow: string; results: Record<Workload, Comparison> }>;
}

const DESCRIBE: Record<Workload, string> = {
  ingest: '(a) ingest: log-batch of 1,000 metrics (client)',
  ingest_wire: '(a) ingest, wire level',
  history: '(b) get-metric-history, whole series (client)',
  history_wire: '(b) get-metric-history, wire level',
  search: '(c) search-runs, metric filter + order (client)',
  search_wire: '(c) search-runs, wire level',
};

export function renderMarkdown(r: Result): string {
  const lines = [
    '# Tracking: hanzo-ml vs `mlflow server`',
    '',
    `Produced by \`${r.command}\` on ${r.date}. Machine: ${r.machine.cores} cores (${r.machine.cpu}), ${r.machine.ram_gib} GiB RAM, shared: 1-minute load average ${r.machine.load_average_1m} when the results were written.`,
    `Versions: ${Object.entries(r.versions)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}.`,
    '',
    `Workload: the stock \`mlflow\` client (MlflowClient.log_batch, get_metric_history, search_runs) from ${r.settings.procs} concurrent processes,`,
    `the same script against both servers, one server at a time. Settings: ingest ${JSON.stringify(r.settings.ingest)}, history ${JSON.stringify(r.settings.history)},`,
    `search ${JSON.stringify(r.settings.search)}.${r.settings.quick ? ' **Quick (smoke) scale.**' : ''}${
      !r.settings.quick && ((r.settings.history as { points: number }).points < 1_000_000 || (r.settings.search as { runs: number }).runs < 20_000)
        ? ' **Below the issue\'s scale (a 1,000,000-point history, 20,000 runs to search).**'
        : ''
    }`,
    `The client processes run on the same ${r.machine.cores} cores as the server under test, so they compete with it for CPU.`,
    'The "client" rows include the client\'s own work (protobuf building and parsing in Python, the same code for both), which is large:',
    'for long histories it outweighs the server. The "wire level" rows send the same requests',
    '(ingest: bodies encoded beforehand by the client\'s encoder; history: the same paged GETs; search: the same runs/search POST; JSON-parsed but no client objects built),',
    'so they show what each server costs.',
    'Throughput is points moved per second of wall time (ingest: points written; history: points read; search: runs returned).',
    'Every workload checks its read-back: all points written are read back equal, latest values match, the search returns the expected runs in order.',
    '',
  ];
  for (const [name, b] of Object.entries(r.backends)) {
    lines.push(`## ${name}: hanzo-ml on ${b.hanzo}, MLflow on ${b.mlflow}, ${b.workers} worker(s) each`, '');
    lines.push('| workload | system | ops | points/s | p50 ms | p99 ms | read-back | throughput ratio | p99 speed-up |');
    lines.push('| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |');
    for (const [w, c] of Object.entries(b.results) as [Workload, Comparison][]) {
      for (const sys of ['hanzo', 'mlflow'] as const) {
        const s = c[sys];
        const ratios = sys === 'hanzo' ? `**${c.throughput_ratio}x** | **${c.p99_speedup}x**` : ' | ';
        lines.push(`| ${sys === 'hanzo' ? DESCRIBE[w] : ''} | ${sys === 'hanzo' ? 'hanzo-ml' : 'mlflow'} | ${s.ops} | ${s.points_per_s} | ${s.p50_ms} | ${s.p99_ms} | ${s.read_back_ok ? 'ok' : 'FAILED'} | ${ratios} |`);
      }
    }
    lines.push('', 'Seeding (through each server\'s API with the same client, timed separately):', '');
    lines.push('| workload | system | requests | wall s | p50 ms | p99 ms |', '| --- | --- | ---: | ---: | ---: | ---: |');
    for (const [w, c] of Object.entries(b.results) as [Workload, Comparison][])
      for (const sys of ['hanzo', 'mlflow'] as const)
        if (c[sys].seed) lines.push(`| ${w} | ${sys === 'hanzo' ? 'hanzo-ml' : 'mlflow'} | ${c[sys].seed!.requests} | ${c[sys].seed!.wall_s} | ${c[sys].seed!.p50_ms} | ${c[sys].seed!.p99_ms} |`);
    lines.push('');
  }
  return lines.join('\n');
}

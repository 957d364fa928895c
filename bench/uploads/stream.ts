// What streaming an upload once saves: the same JSONL body (made on the fly, never held whole) accepted the way
// POST /v1/datasets did before (written to a temporary file while hashed, validated from that file, copied into the
// file store: three passes over the bytes on disk) and the way it does now (one pass through a tee into
// validateDataset and the store's putStream, the store's end held until the checks passed, as the route composes
// them). Each pass runs in a fresh process, sides alternating; wall time and that process's peak RSS, medians.
// Writes bench/results/upload-stream.json and upload-stream.md.
//
//   npx tsx bench/uploads/stream.ts [--mb 300] [--passes 3]
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { writeMeasured } from '../../lib/hash.js';
import { FileObjectStore } from '../../lib/object-store.js';
import { tee } from '../../lib/tee.js';
import { validateDataset } from '../../datasets/ingest/preprocess.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const arg = (flag: string, fallback: string): string => {
  const i = process.argv.indexOf(flag);
  return i >= 0 ? process.argv[i + 1]! : fallback;
};

/** About `bytes` of chat JSONL, 1 KB a line, made as it is read. */
function body(bytes: number): Readable {
  let sent = 0;
  let n = 0;
  return new Readable({
    read() {
      if (sent >= bytes) return void this.push(null);
      const lines: string[] = [];
      for (let i = 0; i < 64; i++, n++) lines.push(JSON.stringify({ messages: [{ role: 'user', content: `q ${n} ${'q'.repeat(400)}` }, { role: 'assistant', content: `a ${n} ${'a'.repeat(500)}` }] }));
      const chunk = Buffer.from(lines.join('\n') + '\n');
      sent += chunk.length;
      this.push(chunk);
    },
  });
}

async function before(dir: string, bytes: number): Promise<string> {
  const store = new FileObjectStore(join(dir, 'objects'));
  const tmp = join(dir, 'upload.jsonl');
  const raw = await writeMeasured(body(bytes), tmp);
  await validateDataset({ sourcePath: tmp, format: 'jsonl' });
  return (await store.putFile('datasets', 'v/raw/source.jsonl', tmp, raw.sha256)).sha256;
}

async function now(dir: string, bytes: number): Promise<string> {
  const store = new FileObjectStore(join(dir, 'objects'));
  const stop = new AbortController();
  const [toStore, toCheck] = [new PassThrough(), new PassThrough()];
  const check = validateDataset({ source: toCheck, displayName: 'upload.jsonl', format: 'jsonl' });
  const [, stored] = await Promise.all([tee(body(bytes), [toStore, toCheck], stop.signal, { sink: toStore, until: check }), store.putStream('datasets', 'v/raw/source.jsonl', toStore, { signal: stop.signal }), check]);
  return stored.sha256;
}

async function child(side: string, bytes: number): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'hanzo-ml-bench-upload-'));
  try {
    const t0 = performance.now();
    const sha256 = await (side === 'before' ? before(dir, bytes) : now(dir, bytes));
    const seconds = (performance.now() - t0) / 1000;
    process.stdout.write(JSON.stringify({ side, seconds, peak_rss_mb: process.resourceUsage().maxRSS / 1024, sha256 }) + '\n');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  const mb = Number(arg('--mb', '300'));
  const passes = Number(arg('--passes', '3'));
  if (process.argv.includes('--side')) return child(arg('--side', 'now'), mb * 1024 * 1024);
  const loadBefore = loadavg();
  const runs: { side: string; seconds: number; peak_rss_mb: number; sha256: string }[] = [];
  for (let p = 0; p < passes; p++) {
    for (const side of ['before', 'now']) {
      const out = execFileSync('nice', ['-n', '10', process.execPath, '--import', 'tsx', fileURLToPath(import.meta.url), '--side', side, '--mb', String(mb)], { cwd: root, encoding: 'utf8' });
      runs.push(JSON.parse(out.trim().split('\n').pop()!));
    }
  }
  if (new Set(runs.map((r) => r.sha256)).size !== 1) throw new Error('the two sides stored different bytes');
  const of = (side: string) => runs.filter((r) => r.side === side);
  const summary = Object.fromEntries(['before', 'now'].map((s) => [s, { seconds: median(of(s).map((r) => r.seconds)), peak_rss_mb: median(of(s).map((r) => r.peak_rss_mb)) }]));
  const result = { mb, passes, cpus: cpus().length, load_before: loadBefore, load_after: loadavg(), summary, runs, at: new Date().toISOString() };
  writeFileSync(join(root, 'bench/results/upload-stream.json'), JSON.stringify(result, null, 2) + '\n');
  const md = [
    `# Upload of ${mb} MB JSONL: three passes (before) vs one streamed pass (now) (${result.at})`,
    '',
    `Machine: ${result.cpus} CPUs, shared with other work; 1-min load ${loadBefore[0]!.toFixed(2)} before, ${result.load_after[0]!.toFixed(2)} after. Each pass a fresh process at nice 10, sides alternating; medians of ${passes}.`,
    '',
    '| side | wall s (median) | peak RSS MB (median) |',
    '|---|---|---|',
    ...(['before', 'now'] as const).map((s) => `| ${s} | ${summary[s]!.seconds.toFixed(2)} | ${summary[s]!.peak_rss_mb.toFixed(0)} |`),
    '',
    `**now ${(summary.before!.seconds / summary.now!.seconds).toFixed(2)}x faster than before** (the same sha256 stored by both).`,
    '',
  ].join('\n');
  writeFileSync(join(root, 'bench/results/upload-stream.md'), md);
  process.stdout.write(md);
}

await main();

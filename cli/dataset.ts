// `hanzo-ml dataset create|list|derive|preview|download`: immutable dataset versions over /v1/datasets.
import { createReadStream, createWriteStream, existsSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { basename, extname, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { InvalidArgumentError, Option, type Command } from 'commander';
import { parse as parseYaml } from 'yaml';
import { ApiClientError, type ApiClient } from './api-client.js';
import type { JobCliIo } from './job.js';
import { TERMINAL_JOB_STATUSES, type JobStatus, type JobView } from '../contracts/jobs.js';
import type { Dataset, DatasetIssue, DeriveAccepted } from '../contracts/datasets.js';

const FORMAT_OF_EXTENSION: Record<string, string> = { '.csv': 'csv', '.parquet': 'parquet', '.arrow': 'arrow', '.feather': 'arrow', '.txt': 'text', '.jsonl': 'jsonl', '.json': 'jsonl' };

/** The format a file name says, under a .gz or .zst. */
export function formatOfFile(path: string): string {
  const inner = path.replace(/\.(gz|zst)$/i, '');
  return FORMAT_OF_EXTENSION[extname(inner).toLowerCase()] ?? 'jsonl';
}

/** The operations' fields that are lists: one value there is a list of one (languages=en). */
const LIST_FIELDS = new Set(['languages', 'kinds']);

/**
 * One --op: `name` or `name:key=value,key=value` (values read as JSON where they parse, lists as a|b), or a JSON
 * object. `filter:min_tokens=5,languages=en|de` is {"op":"filter","min_tokens":5,"languages":["en","de"]}.
 */
export function parseOp(text: string): Record<string, unknown> {
  if (text.trimStart().startsWith('{')) {
    try {
      return JSON.parse(text) as Record<string, unknown>;
    } catch {
      throw new InvalidArgumentError(`--op: ${text} is not valid JSON`);
    }
  }
  const [op, rest] = [text.split(':')[0]!, text.slice(text.indexOf(':') + 1)];
  const out: Record<string, unknown> = { op };
  if (!text.includes(':')) return out;
  for (const pair of rest.split(',').filter(Boolean)) {
    const eq = pair.indexOf('=');
    if (eq < 1) throw new InvalidArgumentError(`--op ${text}: expected key=value, got "${pair}"`);
    const value = pair.slice(eq + 1);
    const key = pair.slice(0, eq);
    out[key] = value.includes('|') || LIST_FIELDS.has(key) ? value.split('|').map(scalar) : scalar(value);
  }
  return out;
}

function scalar(v: string): unknown {
  try {
    return JSON.parse(v);
  } catch {
    return v;
  }
}

/** The derive request: --config's file (YAML or JSON: the whole request), then --op and the flags over it. */
export async function deriveRequest(o: { op: string[]; config?: string; name?: string; tokenizer?: string; tags?: string }): Promise<Record<string, unknown>> {
  if (!o.config && o.op.length === 0) throw new InvalidArgumentError('give the operations: --op (repeatable) or --config ops.yaml');
  const base = o.config ? ((parseYaml(await readFile(o.config, 'utf8')) ?? {}) as Record<string, unknown>) : {};
  const fromFile = Array.isArray(base) ? { operations: base } : base;
  return {
    ...fromFile,
    ...(o.op.length ? { operations: [...((fromFile.operations as unknown[]) ?? []), ...o.op.map(parseOp)] } : {}),
    ...(o.name ? { name: o.name } : {}),
    ...(o.tokenizer ? { tokenizer: o.tokenizer } : {}),
    ...(o.tags ? { tags: o.tags.split(',').map((t) => t.trim()).filter(Boolean) } : {}),
  };
}

/** Polls the preparation job, telling each change of status on stderr, until it ends. */
async function waitForPreparation(api: ApiClient, jobId: string, pollMs = 1000): Promise<JobView> {
  let said = '';
  for (;;) {
    const job = await api.get<JobView>(`/v1/jobs/${encodeURIComponent(jobId)}`);
    const line = `job ${job.id}: ${job.status}${job.message ? ` — ${job.message}` : ''}`;
    if (line !== said) process.stderr.write(`${line}\n`);
    said = line;
    if (TERMINAL_JOB_STATUSES.includes(job.status as JobStatus)) return job;
    await new Promise((r) => setTimeout(r, pollMs));
  }
}

/** `bad.parquet:3: field "messages[1].role": expected ...`: one issue, one line. */
export function issueLine(i: DatasetIssue): string {
  const at = i.line ?? i.record;
  return `${i.file}${at ? `:${at}` : ''}: ${i.field ? `field "${i.field}": ` : ''}${i.message}`;
}

/**
 * Follows an upload's preparation until its version leaves `preparing`, telling on stderr each new stage the job
 * reports (its status and message: what it is doing, the records read and kept). Returns the settled version.
 */
export async function followUpload(api: ApiClient, version: Dataset, pollMs = 1000): Promise<Dataset> {
  let said = '';
  for (let v = version, settledPolls = 0; ; ) {
    const job = v.job_id ? await api.get<JobView>(`/v1/jobs/${encodeURIComponent(v.job_id)}`).catch(() => null) : null;
    const line = `${v.name} v${v.version}: ${v.status}${job ? ` — job ${job.status}${job.message ? `: ${job.message}` : ''}` : ''}`;
    if (line !== said) process.stderr.write(`${line}\n`);
    said = line;
    // The version settles a moment before its job records how it ended: wait for that, a little.
    const jobEnded = !job || TERMINAL_JOB_STATUSES.includes(job.status as JobStatus);
    if (v.status !== 'preparing' && (jobEnded || ++settledPolls > 10)) return v;
    await new Promise((r) => setTimeout(r, v.status === 'preparing' ? pollMs : 200));
    if (v.status === 'preparing') v = await api.get<Dataset>(`/v1/datasets/${encodeURIComponent(v.id)}`);
  }
}

export function registerDatasetCommands(program: Command, io: JobCliIo): void {
  const dataset = program.command('dataset').description('immutable, versioned datasets');
  dataset
    .command('create')
    .alias('upload')
    .description('upload a file as a new version; its preparation (count, dedup, split) runs as a job, followed until it ends')
    .requiredOption('--name <name>', 'dataset name (each upload is a new version)')
    .requiredOption('--path <file>', 'JSONL, CSV, Parquet, Arrow or text file (.gz and .zst too)')
    .addOption(new Option('--format <format>', 'file format (default: from the extension)').choices(['jsonl', 'csv', 'parquet', 'arrow', 'text']))
    .option('--seed <n>', 'split seed', '42')
    .option('--tags <a,b>', 'comma-separated tags')
    .option('--no-wait', 'print the version while it is still preparing (and its job_id) and return at once')
    .action(async (o: { name: string; path: string; format?: string; seed: string; tags?: string; wait: boolean }) => {
      const path = resolve(o.path);
      if (!existsSync(path) || !statSync(path).isFile()) throw new ApiClientError(0, 'INVALID_PARAMETER_VALUE', `${o.path}: no such file`);
      const q = new URLSearchParams({ name: o.name, format: o.format ?? formatOfFile(path), seed: o.seed, wait: 'false', ...(o.tags ? { tags: o.tags } : {}) });
      const body = Readable.toWeb(createReadStream(path)) as unknown as RequestInit['body'];
      const api = io.api();
      // A 400 (a malformed line, a file that is not its format) is thrown with its issues one per line.
      const accepted = await api.post<Dataset>(`/v1/datasets?${q}`, undefined, { raw: body, headers: { 'content-type': 'application/octet-stream', 'x-filename': basename(path) } });
      if (!o.wait) return io.print(accepted);
      const settled = await followUpload(api, accepted);
      if (settled.status !== 'ready') {
        for (const issue of settled.issues ?? []) process.stderr.write(`${issueLine(issue)}\n`);
        process.exitCode = 1;
        return;
      }
      io.print(settled);
    });
  dataset
    .command('list')
    .option('--name <name>')
    .option('--tags <a,b>', 'versions with any of these tags')
    .action(async (o: { name?: string; tags?: string }) => {
      const q = new URLSearchParams({ ...(o.name ? { name: o.name } : {}), ...(o.tags ? { tags: o.tags } : {}) });
      const { datasets } = await io.api().get<{ datasets: Record<string, unknown>[] }>(`/v1/datasets${q.size ? `?${q}` : ''}`);
      io.table(datasets.map((d) => ({ id: d.id, name: d.name, version: d.version, records: d.num_records, sha256: String(d.sha256).slice(0, 16), tags: (d.tags as string[]).join(','), created_at: d.created_at })));
    });
  dataset
    .command('derive <id>')
    .description('a new version made from this one by operations (mask_pii, dedup_exact, dedup_near, filter, augment, tokenize), as a job')
    .option('--op <op>', 'an operation: name[:key=value,...] or JSON, e.g. filter:min_tokens=5 (repeatable, applied in order)', (v: string, all: string[]) => [...all, v], [] as string[])
    .option('--config <ops.yaml>', 'the derive request as YAML or JSON (operations, split, tokenizer, name, tags), or a list of operations')
    .option('--name <name>', "the new version's dataset name (default: the parent's)")
    .option('--tokenizer <base-model>', "whose tokenizer counts, filters and tokenizes (default: the parent's)")
    .option('--tags <a,b>', 'tags of the new version')
    .option('--wait', 'wait until the job ends, telling its progress; print the new version; exit 1 unless it succeeded')
    .action(async (id: string, o: { op: string[]; config?: string; name?: string; tokenizer?: string; tags?: string; wait?: boolean }) => {
      const api = io.api();
      const accepted = await api.post<DeriveAccepted>(`/v1/datasets/${encodeURIComponent(id)}/derive`, await deriveRequest(o));
      if (!o.wait) return io.print(accepted);
      const job = await waitForPreparation(api, accepted.job_id);
      if (job.status !== 'succeeded') {
        process.exitCode = 1;
        return;
      }
      io.print(await api.get(`/v1/datasets/${encodeURIComponent(accepted.dataset_id)}`));
    });
  dataset
    .command('preview <id>')
    .description("a split's first records, one JSON line each")
    .addOption(new Option('--split <split>').choices(['train', 'validation', 'test']).default('train'))
    .option('-n <n>', 'how many (at most 100)', '10')
    .action(async (id: string, o: { split: string; n: string }) => {
      const { records } = await io.api().get<{ records: unknown[] }>(`/v1/datasets/${encodeURIComponent(id)}/preview?split=${o.split}&n=${encodeURIComponent(o.n)}`);
      for (const r of records) process.stdout.write(`${JSON.stringify(r)}\n`);
    });
  dataset
    .command('download <id>')
    .description("a split's JSONL file, through an expiring URL")
    .addOption(new Option('--split <split>').choices(['train', 'validation', 'test']).default('train'))
    .option('--out <file>', 'where to write it (default: <name>-v<version>-<split>.jsonl)')
    .option('--url', 'print the URL (valid 15 minutes) and download nothing')
    .action(async (id: string, o: { split: string; out?: string; url?: boolean }) => {
      const api = io.api();
      const link = await api.get<{ url: string; expires_at: string; size_bytes: number }>(`/v1/datasets/${encodeURIComponent(id)}/download?split=${o.split}`);
      if (o.url) return io.print(link);
      const meta = await api.get<{ name: string; version: number }>(`/v1/datasets/${encodeURIComponent(id)}`);
      const out = o.out ?? `${meta.name}-v${meta.version}-${o.split}.jsonl`;
      const res = await fetch(link.url);
      if (!res.ok || !res.body) throw new ApiClientError(res.status, 'DOWNLOAD_FAILED', `GET ${new URL(link.url).pathname}: ${res.status} ${await res.text()}`);
      await pipeline(Readable.fromWeb(res.body as import('node:stream/web').ReadableStream), createWriteStream(out));
      process.stderr.write(`${out}: ${link.size_bytes} bytes\n`);
    });
}

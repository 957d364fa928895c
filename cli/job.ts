// `hanzo-ml job submit|list|get|cancel|pause|resume`: spec 000's job commands over /v1/jobs.
import { readFile } from 'node:fs/promises';
import { extname } from 'node:path';
import type { Command } from 'commander';
import type { ApiClient } from './api-client.js';
import { TERMINAL_JOB_STATUSES, type JobDryRun, type JobStatus, type JobView } from '../contracts/jobs.js';
import { registerJobLogCommands } from './job-logs.js';

export interface JobCliIo {
  api: () => ApiClient;
  print: (v: unknown) => void;
  table: (rows: Record<string, unknown>[]) => void;
}

/** Submits a job file as it is: JSON for .json, else YAML (the server parses both and names a bad field). */
export async function submitJobFile(api: ApiClient, file: string, idempotencyKey?: string): Promise<JobView> {
  return api.post<JobView>('/v1/jobs', undefined, await jobFileRequest(file, idempotencyKey));
}

/** What the job would cost (POST /v1/jobs?dry_run=true); nothing is queued. */
export async function dryRunJobFile(api: ApiClient, file: string): Promise<JobDryRun> {
  return api.post<JobDryRun>('/v1/jobs?dry_run=true', undefined, await jobFileRequest(file));
}

async function jobFileRequest(file: string, idempotencyKey?: string): Promise<{ raw: string; headers: Record<string, string> }> {
  const text = await readFile(file, 'utf8');
  const json = extname(file).toLowerCase() === '.json';
  return { raw: text, headers: { 'content-type': json ? 'application/json' : 'application/yaml', ...(idempotencyKey ? { 'idempotency-key': idempotencyKey } : {}) } };
}

/** --from-checkpoint: a step (digits) or a checkpoint URI, as GET /v1/jobs/{id} lists them. */
export function resumeBody(fromCheckpoint: string | undefined): { from_checkpoint?: number | string } {
  if (fromCheckpoint === undefined) return {};
  return { from_checkpoint: /^\d+$/.test(fromCheckpoint) ? Number(fromCheckpoint) : fromCheckpoint };
}

/** Polls a job until it has ended. */
export async function waitForJob(api: ApiClient, id: string, pollMs = 2000): Promise<JobView> {
  for (;;) {
    const job = await api.get<JobView>(`/v1/jobs/${encodeURIComponent(id)}`);
    if (TERMINAL_JOB_STATUSES.includes(job.status as JobStatus)) return job;
    await new Promise((r) => setTimeout(r, pollMs));
  }
}

export function registerJobCommands(program: Command, io: JobCliIo): void {
  const job = program.command('job').description('submit, list, read and cancel jobs, and read their logs and events (spec 000 Job Submission)');
  registerJobLogCommands(job, io);
  job
    .command('submit')
    .description('submit a job from a Job Submission file (YAML or JSON); prints its id')
    .requiredOption('--config <job.yaml>', 'the job submission')
    .option('--idempotency-key <key>', 'a retried submit with the same key (within 24 h) returns the same job')
    .option('--wait', 'wait until the job ends; exit 1 unless it succeeded')
    .option('--dry-run', 'print its cost estimate (tokens, steps, GPU-hours, dollars, the budget left) and queue nothing')
    .action(async (o: { config: string; idempotencyKey?: string; wait?: boolean; dryRun?: boolean }) => {
      if (o.dryRun) return io.print(await dryRunJobFile(io.api(), o.config));
      const submitted = await submitJobFile(io.api(), o.config, o.idempotencyKey);
      process.stdout.write(`${submitted.id}\n`);
      process.stderr.write(`job ${submitted.name}: ${submitted.status}\n`);
      if (!o.wait) return;
      const ended = await waitForJob(io.api(), submitted.id);
      process.stderr.write(`job ${ended.name}: ${ended.status}${ended.message ? ` (${ended.message})` : ''}\n`);
      if (ended.status !== 'succeeded') process.exitCode = 1;
    });
  job
    .command('list')
    .description("the organization's jobs, newest first")
    .option('--status <status>', 'validating | queued | running | paused | succeeded | failed | cancelled')
    .option('--type <type>', 'training | eval | conversion | data_preparation | registration')
    .option('--parent <parent>', "only the jobs a parent started: pipeline:<id> or sweep:<id>")
    .option('--limit <n>', 'how many', '50')
    .action(async (o: { status?: string; type?: string; parent?: string; limit: string }) => {
      const q = new URLSearchParams({ limit: o.limit, ...(o.status ? { status: o.status } : {}), ...(o.type ? { type: o.type } : {}), ...(o.parent ? { parent: o.parent } : {}) });
      const { jobs } = await io.api().get<{ jobs: JobView[] }>(`/v1/jobs?${q.toString()}`);
      io.table(jobs.map((j) => ({ id: j.id, name: j.name, type: j.type, kind: j.kind, parent: j.parent ?? '', status: j.status, submitted_by: j.submitted_by, created_at: j.created_at })));
    });
  job
    .command('get <id>')
    .description('one job: status, queue place, attempts, preemptions, checkpoints, progress and ETA, GPU-hours and cost so far')
    .action(async (id: string) => io.print(await io.api().get(`/v1/jobs/${encodeURIComponent(id)}`)));
  job
    .command('cancel <id>')
    .description('cancel a job (a researcher: only their own); it ends cancelled')
    .action(async (id: string) => io.print(await io.api().post(`/v1/jobs/${encodeURIComponent(id)}/cancel`, {})));
  job
    .command('pause <id>')
    .description('pause a job (a researcher: only their own): it writes a checkpoint, stops and frees its GPUs')
    .action(async (id: string) => io.print(await io.api().post(`/v1/jobs/${encodeURIComponent(id)}/pause`, {})));
  job
    .command('resume <id>')
    .description('resume a paused job from its newest checkpoint, or from one of its checkpoints')
    .option('--from-checkpoint <step|uri>', 'a checkpoint of `hanzo-ml job get <id>`, by step or URI')
    .action(async (id: string, o: { fromCheckpoint?: string }) => io.print(await io.api().post(`/v1/jobs/${encodeURIComponent(id)}/resume`, resumeBody(o.fromCheckpoint))));
}

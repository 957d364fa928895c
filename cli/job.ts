// `hanzo-ml job submit|list|get|cancel`: spec 000's job commands over /v1/jobs.
import { readFile } from 'node:fs/promises';
import { extname } from 'node:path';
import type { Command } from 'commander';
import type { ApiClient } from './api-client.js';
import { TERMINAL_JOB_STATUSES, type JobStatus, type JobView } from '../contracts/jobs.js';

export interface JobCliIo {
  api: () => ApiClient;
  print: (v: unknown) => void;
  table: (rows: Record<string, unknown>[]) => void;
}

/** Submits a job file as it is: JSON for .json, else YAML (the server parses both and names a bad field). */
export async function submitJobFile(api: ApiClient, file: string, idempotencyKey?: string): Promise<JobView> {
  const text = await readFile(file, 'utf8');
  const json = extname(file).toLowerCase() === '.json';
  const headers = { 'content-type': json ? 'application/json' : 'application/yaml', ...(idempotencyKey ? { 'idempotency-key': idempotencyKey } : {}) };
  return api.post<JobView>('/v1/jobs', undefined, { raw: text, headers });
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
  const job = program.command('job').description('submit, list, read and cancel jobs (spec 000 Job Submission)');
  job
    .command('submit')
    .description('submit a job from a Job Submission file (YAML or JSON); prints its id')
    .requiredOption('--config <job.yaml>', 'the job submission')
    .option('--idempotency-key <key>', 'a retried submit with the same key (within 24 h) returns the same job')
    .option('--wait', 'wait until the job ends; exit 1 unless it succeeded')
    .action(async (o: { config: string; idempotencyKey?: string; wait?: boolean }) => {
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
    .option('--status <status>', 'validating | queued | running | succeeded | failed | cancelled')
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
    .description('one job: its status, run and spec')
    .action(async (id: string) => io.print(await io.api().get(`/v1/jobs/${encodeURIComponent(id)}`)));
  job
    .command('cancel <id>')
    .description('cancel a job (a researcher: only their own); it ends cancelled')
    .action(async (id: string) => io.print(await io.api().post(`/v1/jobs/${encodeURIComponent(id)}/cancel`, {})));
}

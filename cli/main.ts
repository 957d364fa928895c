// The `hanzo-ml` command line. Every command but `dev` and `demo` talks to the API over HTTP
// (HANZO_ML_API_URL, default http://127.0.0.1:8057; token HANZO_ML_TOKEN, default the dev token).
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Command, InvalidArgumentError, Option } from 'commander';
import { createApiClient, ApiClientError, type ApiClient } from './api-client.js';
import { followPipeline, type PipelineStatus } from './progress.js';
import { runDev } from '../runtime/dev.js';
import { runServe } from '../runtime/serve.js';
import { runWorker } from '../runtime/worker.js';
import { runRelay } from '../runtime/relay.js';
import { setupTemporal } from '../runtime/temporal.js';
import { runDemo } from './demo.js';
import { runClusterApply } from './cluster.js';
import { runAdminBootstrap } from './admin.js';
import { compareRuns } from './compare.js';
import { pullModel } from './pull.js';
import { registerModelVersion } from './register.js';
import { dryRunPipeline, printUsage } from './cost.js';
import { registerJobCommands } from './job.js';
import { registerEvalSuiteCommands } from './eval-suite.js';
import { registerDatasetCommands } from './dataset.js';
import { DEFAULT_BASE_MODEL } from '../lib/base-models.js';

const api = (): ApiClient =>
  createApiClient(process.env.HANZO_ML_API_URL ?? `http://127.0.0.1:${process.env.HANZO_ML_SERVER_PORT ?? 8057}`, process.env.HANZO_ML_TOKEN ?? process.env.HANZO_ML_AUTH_DEV_TOKEN ?? 'hanzo-ml-dev-token');
const print = (v: unknown): void => void process.stdout.write(JSON.stringify(v, null, 2) + '\n');
const table = (rows: Record<string, unknown>[]): void => {
  if (!rows.length) return void process.stdout.write('(none)\n');
  const cols = Object.keys(rows[0]!);
  const width = cols.map((c) => Math.max(c.length, ...rows.map((r) => String(r[c] ?? '').length)));
  const line = (vals: string[]) => vals.map((v, i) => v.padEnd(width[i]!)).join('  ').trimEnd();
  process.stdout.write([line(cols), ...rows.map((r) => line(cols.map((c) => String(r[c] ?? ''))))].join('\n') + '\n');
};

interface QueueListing {
  organization: string;
  quota: { max_gpus: unknown; max_concurrent_jobs: number; priority: string } | null;
  admitted: number;
  pending: number;
  gpus_in_use: number;
  borrowed_gpus: number | null;
  jobs: { job: string; stage: string; position: number | null; gpus: number; reason: string | null }[];
}

function printQueues(orgs: QueueListing[]): void {
  for (const o of orgs) {
    const quota = o.quota ? `max_gpus ${JSON.stringify(o.quota.max_gpus)}, max_concurrent_jobs ${o.quota.max_concurrent_jobs}, priority ${o.quota.priority}` : 'no quota';
    const borrowed = o.borrowed_gpus === null ? '' : `, ${o.borrowed_gpus} borrowed`;
    console.log(`${o.organization}: ${o.admitted} admitted, ${o.pending} pending, ${o.gpus_in_use} GPUs in use${borrowed} (${quota})`);
    table(o.jobs.map((j) => ({ job: j.job, stage: j.stage, position: j.position ?? '', gpus: j.gpus, reason: j.reason ?? '' })));
  }
}

export function buildCli(): Command {
  const program = new Command('hanzo-ml').description('ML training and fine-tuning control plane (HIP-57)').showHelpAfterError();

  program.command('dev').description('run the embedded stack: Temporal dev server, catalogue, object store, worker and API').action(runDev);
  program.command('serve').description('run the API only (stateless; any number of replicas), against the Temporal cluster of temporal.address').action(runServe);
  program.command('relay').description('run only the outbox relay to Kafka (stream.brokers), against the shared catalogue').action(runRelay);
  program.command('worker').description('run the Temporal worker only: workflows, and jobs through scheduler.executor').action(runWorker);
  program
    .command('admin')
    .description('catalogue administration, directly against database.url (no API token needed)')
    .command('bootstrap')
    .description("create the operator organization (auth.dev_organization) and its first ml-admin token; once per catalogue, a second call refuses")
    .option('--subject <subject>', 'who the admin token is for', 'admin')
    .option('--token-file <path>', 'write the token to this new file (mode 0600) instead of printing it')
    .action((o: { subject: string; tokenFile?: string }) => runAdminBootstrap({ subject: o.subject, ...(o.tokenFile ? { tokenFile: o.tokenFile } : {}) }));
  program
    .command('temporal')
    .description('Temporal cluster administration')
    .command('setup')
    .description('register the search attributes the workflows set (a worker also does this when it starts)')
    .action(() => setupTemporal());
  program
    .command('cluster')
    .description('Kubernetes cluster administration')
    .command('apply')
    .description('create or update the Kueue objects of scheduler.quotas and scheduler.preemption (flavors, priority classes, one queue per organization)')
    .action(runClusterApply);
  program
    .command('demo')
    .description('fine-tune the bundled tiny model on the bundled dataset through the whole pipeline')
    .option('--wait-for-approval', 'wait for a human approval instead of approving automatically')
    .option('--api-url <url>', 'use a running hanzo-ml instead of starting the embedded stack')
    .action(async (o: { waitForApproval?: boolean; apiUrl?: string }) => {
      process.exitCode = await runDemo({ waitForApproval: Boolean(o.waitForApproval), ...(o.apiUrl ? { apiUrl: o.apiUrl } : {}) });
    });

  registerJobCommands(program, { api, print, table });
  registerEvalSuiteCommands(program, { api, print, table });

  const pipeline = program.command('pipeline').description('start and steer fine-tuning pipelines');
  pipeline
    .command('start')
    .description('start a pipeline from a request file (JSON), or from flags')
    .option('-f, --file <request.json>', 'pipeline request (the POST /v1/pipelines body)')
    .option('--model <name>', 'registered model name')
    .option('--base-model <name>', 'base model', DEFAULT_BASE_MODEL)
    .option('--data <file>', 'dataset file (JSONL or CSV) to preprocess into a new version')
    .option('--dataset <name>', 'dataset name (with --data), or an existing dataset to use its latest version')
    .option('--max-steps <n>', 'training steps', (v) => Number(v))
    .option('--follow', 'follow progress with a progress bar until it ends or waits for approval')
    .option('--dry-run', 'estimate tokens, steps, GPU-hours and dollars, and start nothing (exit 1 if over budget)')
    .option('--json', 'with --dry-run: the estimate as JSON')
    .action(async (o: { file?: string; model?: string; baseModel: string; data?: string; dataset?: string; maxSteps?: number; follow?: boolean; dryRun?: boolean; json?: boolean }) => {
      const body = o.file ? JSON.parse(await import('node:fs/promises').then((f) => f.readFile(o.file!, 'utf8'))) : requestFromFlags(o);
      if (o.dryRun) return void (process.exitCode = await dryRunPipeline(api(), body, Boolean(o.json)));
      const res = await api().post<{ id: string; temporal_ui_url: string | null }>('/v1/pipelines', body);
      process.stdout.write(`${res.id}\n`);
      if (res.temporal_ui_url) process.stderr.write(`Temporal UI: ${res.temporal_ui_url}\n`);
      if (o.follow) reportStatus(await followPipeline(api(), res.id, { until: (s) => s.progress.awaiting_approval }));
    });
  pipeline
    .command('status <id>')
    .option('--follow', 'follow until it ends or waits for approval')
    .action(async (id: string, o: { follow?: boolean }) => {
      const s = o.follow ? await followPipeline(api(), id, { until: (x) => x.progress.awaiting_approval }) : await api().get<PipelineStatus>(`/v1/pipelines/${id}`);
      print(s);
    });
  pipeline.command('list').action(async () => table((await api().get<{ pipelines: Record<string, unknown>[] }>('/v1/pipelines')).pipelines));
  pipeline
    .command('cancel <id>')
    .description('cancel a running pipeline: its job gets SIGTERM (an emergency checkpoint), its run ends KILLED')
    .action(async (id: string) => {
      const res = await api().post<{ id: string; status: string }>(`/v1/pipelines/${encodeURIComponent(id)}/cancel`);
      process.stdout.write(`${res.id}: ${res.status}\n`);
    });
  for (const decision of ['approve', 'reject'] as const) {
    pipeline
      .command(`${decision} <id>`)
      .description(`${decision} promotion of the pipeline's model version to production`)
      .requiredOption('--reason <text>', 'why (recorded in the audit log)')
      .action(async (id: string, o: { reason: string }) => {
        // The approver recorded is the token's subject: the API takes no name from the request.
        const res = await api().post<{ decision: string; approver: string }>(`/v1/pipelines/${id}/${decision}`, { reason: o.reason });
        process.stdout.write(`${res.decision} recorded for pipeline ${id} (by ${res.approver})\n`);
      });
  }

  registerDatasetCommands(program, { api, print, table });

  const model = program.command('model').description('the model registry');
  model.command('list').action(async () => table((await api().get<{ models: Record<string, unknown>[] }>('/v1/models')).models));
  model.command('versions <name>').action(async (name: string) => {
    const { versions } = await api().get<{ versions: Record<string, unknown>[] }>(`/v1/models/${encodeURIComponent(name)}/versions`);
    table(versions.map((v) => ({ version: v.version, stage: v.stage, status: v.status, run_id: v.run_id, exact_match: (v.metrics as Record<string, unknown>).exact_match, created_at: v.created_at })));
  });
  model
    .command('register [name]')
    .description("register a run's artifact (a file or a directory) as a new version; its files are copied under the version's own prefix, and the command waits until they are")
    .option('--name <name>', 'the registered model (or give it as the argument)')
    .requiredOption('--run <id>', 'the run whose artifact it is')
    .option('--artifact <artifact_path>', "the artifact's path in the run (e.g. checkpoint/final)")
    .option('--path <artifact_path>', 'the same as --artifact')
    .option('--description <text>')
    .option('--no-wait', 'answer once the version is pending_registration, without waiting for its files')
    .action(async (arg: string | undefined, o: { name?: string; run: string; artifact?: string; path?: string; description?: string; wait: boolean }) => {
      const name = arg ?? o.name;
      const artifact = o.artifact ?? o.path;
      if (!name) throw new InvalidArgumentError('name the registered model: --name <name> (or as the argument)');
      if (arg && o.name && arg !== o.name) throw new InvalidArgumentError(`two names given: "${arg}" and --name "${o.name}"`);
      if (!artifact) throw new InvalidArgumentError("name the run's artifact: --artifact <artifact_path>");
      const v = await registerModelVersion(api(), { name, run_id: o.run, artifact_path: artifact, description: o.description, wait: o.wait });
      process.stdout.write(`${name} version ${v.version}: ${v.status}${v.checksum ? ` (${v.checksum})` : ''}\n`);
    });
  model
    .command('pull <name>')
    .description('download one format of a version, verifying every file against its manifest and the manifest against the registry; refuses on any mismatch')
    .option('--version <n>', 'version number', (v: string) => {
      if (!/^[1-9]\d*$/.test(v)) throw new InvalidArgumentError('expected a positive integer');
      return Number(v);
    })
    .addOption(new Option('--stage <stage>', 'the version in this stage').choices(['none', 'staging', 'production', 'archived']))
    .option('--format <format>', 'safetensors, lora, gguf-q8_0, ... (default: the primary format)')
    .option('--dest <dir>', 'a new directory to pull into (default: ./<name>-v<version>-<format>)')
    .action(async (name: string, o: { version?: number; stage?: string; format?: string; dest?: string }) => {
      const r = await pullModel(api(), { name, ...o });
      process.stdout.write(`pulled ${r.name} v${r.version} ${r.format}: ${r.files} files, ${r.size_bytes} bytes, every SHA-256 verified (manifest ${r.checksum}) -> ${r.dest}\n`);
    });
  model
    .command('evaluate <name>')
    .description("run the eval gate on a version that never met a suite: an eval job against its base model and production, whose decision is recorded on the version (pass: it may go to production)")
    .requiredOption('--version <n>', 'version number', (v: string) => {
      if (!/^[1-9]\d*$/.test(v)) throw new InvalidArgumentError('expected a positive integer');
      return Number(v);
    })
    .option('--base <model>', 'the base model to compare with (default: the one the version records)')
    .option('--suite <name@version>', 'the eval suite (default: the eval job\'s)')
    .option('--dataset <name[@version]>', 'the dataset version whose test split is scored (default: the one the version was trained on)')
    .action(async (name: string, o: { version: number; base?: string; suite?: string; dataset?: string }) => {
      const [dataset, dv] = (o.dataset ?? '').split('@');
      if (dv !== undefined && !/^[1-9]\d*$/.test(dv)) throw new InvalidArgumentError(`--dataset: expected name or name@version, got "${o.dataset}"`);
      const body = { ...(o.base ? { base_model: o.base } : {}), ...(o.suite ? { suite: o.suite } : {}), ...(dataset ? { dataset: { name: dataset, version: dv ? Number(dv) : 'latest' } } : {}) };
      const res = await api().post<{ job: { id: string; status: string } }>(`/v1/models/${encodeURIComponent(name)}/versions/${o.version}/evaluate`, body);
      process.stdout.write(`${res.job.id}\n`);
      process.stderr.write(`eval job ${res.job.id} (${res.job.status}); the gate's decision is recorded on ${name} version ${o.version} when it finishes: hanzo-ml job get ${res.job.id}\n`);
    });
  model
    .command('promote <name> <version>')
    .description('move a model version to a stage; production needs the approver role and archives the previous production version')
    .addOption(new Option('--stage <stage>', 'target stage').choices(['none', 'staging', 'production', 'archived']).makeOptionMandatory())
    .option('--reason <text>', 'why (kept in the audit log)')
    .option('--override-reason <text>', 'admin only: why a version the eval gate quarantined, or one that never met a suite, may be served anyway (audited)')
    .action(async (name: string, version: string, o: { stage: string; reason?: string; overrideReason?: string }) => {
      const body = await api().patch<{ version: Record<string, unknown>; archived: number[] }>(
        `/v1/models/${encodeURIComponent(name)}/versions/${encodeURIComponent(version)}/stage`,
        { stage: o.stage, ...(o.reason ? { reason: o.reason } : {}), ...(o.overrideReason ? { override_reason: o.overrideReason } : {}) },
      );
      process.stdout.write(`${name} version ${body.version.version} is now ${body.version.stage}${body.archived.length ? `; archived ${body.archived.join(', ')}` : ''}\n`);
    });

  program
    .command('experiment')
    .description('experiments of the tracking API')
    .command('list')
    .action(async () => {
      const { experiments } = await api().get<{ experiments: Record<string, unknown>[] }>('/v1/experiments?limit=1000');
      table(experiments.map((e) => ({ id: e.id, name: e.name, created_at: e.created_at })));
    });
  program
    .command('run')
    .description('tracked runs')
    .command('compare <a> <b>')
    .description('params and final/best metrics of two runs, and the difference (b - a)')
    .option('--metrics <k1,k2>', 'metric keys (default: every key either run has)')
    .action(async (a: string, b: string, o: { metrics?: string }) => {
      table(await compareRuns(api(), a, b, (o.metrics ?? '').split(',').map((k) => k.trim()).filter(Boolean)));
    });

  const hpo = program.command('hpo').description('hyperparameter sweeps');
  hpo
    .command('start')
    .description('start a sweep from a configuration file (YAML or JSON; the POST /v1/hpo body)')
    .requiredOption('--config <sweep.yaml>', 'sweep configuration')
    .action(async (o: { config: string }) => {
      const { readFile } = await import('node:fs/promises');
      const { parse } = await import('yaml');
      const body: unknown = parse(await readFile(o.config, 'utf8'));
      const res = await api().post<{ id: string; strategy: string; temporal_ui_url: string | null }>('/v1/hpo', body);
      process.stdout.write(`${res.id}\n`);
      process.stderr.write(`strategy: ${res.strategy}${res.temporal_ui_url ? `; Temporal UI: ${res.temporal_ui_url}` : ''}\n`);
    });
  hpo
    .command('results <id>')
    .description('the best trials of a sweep, best first')
    .option('--top <n>', 'how many', (v) => Number(v), 5)
    .action(async (id: string, o: { top: number }) => {
      const sweep = await api().get<{ status: string; trials: { total: number; by_status: Record<string, number> }; gpu_hours: number; trial_steps_saved: number | null }>(`/v1/hpo/${encodeURIComponent(id)}`);
      const { trials, objectives } = await api().get<{ trials: Record<string, unknown>[]; objectives: { metric: string }[] }>(`/v1/hpo/${encodeURIComponent(id)}/trials?top=${o.top}`);
      process.stderr.write(`sweep ${id}: ${sweep.status}; ${sweep.trials.total} trials ${JSON.stringify(sweep.trials.by_status)}; ${sweep.gpu_hours.toFixed(4)} GPU-hours\n`);
      table(
        trials.map((t) => ({
          trial: t.number,
          ...Object.fromEntries(objectives.map((ob, i) => [ob.metric, (t.objective_values as number[] | null)?.[i]?.toPrecision(6) ?? ''])),
          params: JSON.stringify(t.params),
          steps: t.steps,
          run_id: t.run_id,
        })),
      );
    });
  hpo.command('status <id>').action(async (id: string) => print(await api().get(`/v1/hpo/${encodeURIComponent(id)}`)));
  hpo.command('list').action(async () => table((await api().get<{ sweeps: Record<string, unknown>[] }>('/v1/hpo')).sweeps));
  hpo.command('cancel <id>').description('cancel a sweep and its running trials').action(async (id: string) => print(await api().post(`/v1/hpo/${encodeURIComponent(id)}/cancel`)));

  program
    .command('queue')
    .description('GPU queues (scheduler.quotas)')
    .command('list')
    .description('per organization: admitted and pending jobs, GPUs in use and borrowed, the position of each pending job')
    .action(async () => printQueues((await api().get<{ organizations: QueueListing[] }>('/v1/queues')).organizations));

  program
    .command('usage')
    .description("device-hours, dollars and jobs of the month's finished jobs, per organization (your own; all for operator admins)")
    .option('--month <YYYY-MM>', 'calendar month (UTC); default this one')
    .option('--json', 'as JSON')
    .action(async (o: { month?: string; json?: boolean }) => printUsage(api(), o.month, Boolean(o.json)));

  identityCommands(program);
  const schedule = program.command('schedule').description('retraining on a Temporal Schedule');
  schedule
    .command('create')
    .requiredOption('--name <name>')
    .requiredOption('--model <name>', 'registered model name')
    .requiredOption('--dataset <name>', 'retrain on the latest version of this dataset')
    .option('--base-model <name>', 'base model', DEFAULT_BASE_MODEL)
    .option('--every <interval>', 'e.g. 6h, 1d')
    .option('--cron <expr>', 'cron expression, e.g. "0 3 * * 1"')
    .option('--max-steps <n>', 'training steps', (v) => Number(v))
    .option('--auto-approve', 'promote without a human decision when the eval gate passes')
    .option('--paused', 'create it paused')
    .action(async (o: { name: string; model: string; dataset: string; baseModel: string; every?: string; cron?: string; maxSteps?: number; autoApprove?: boolean; paused?: boolean }) => {
      print(
        await api().post('/v1/schedules', {
          name: o.name,
          ...(o.every ? { every: o.every } : {}),
          ...(o.cron ? { cron: o.cron } : {}),
          paused: Boolean(o.paused),
          pipeline: {
            model_name: o.model,
            base_model: o.baseModel,
            dataset: { name: o.dataset, version: 'latest' },
            ...(o.maxSteps ? { hyperparameters: { learning_rate: 2e-3, max_steps: o.maxSteps, batch_size: 8 } } : {}),
            promotion: { auto_approve: Boolean(o.autoApprove) },
          },
        }),
      );
    });
  schedule.command('list').action(async () => {
    const { schedules } = await api().get<{ schedules: Record<string, unknown>[] }>('/v1/schedules');
    table(schedules.map((s) => ({ id: s.id, name: s.name, spec: JSON.stringify(s.spec), paused: s.paused, next: (s.next_action_times as string[])[0] ?? '' })));
  });
  for (const action of ['pause', 'unpause'] as const)
    schedule.command(`${action} <id-or-name>`).action(async (id: string) => print(await api().post(`/v1/schedules/${encodeURIComponent(id)}/${action}`)));
  schedule.command('delete <id-or-name>').action(async (id: string) => print(await api().del(`/v1/schedules/${encodeURIComponent(id)}`)));

  return program;
}

function requestFromFlags(o: { model?: string; baseModel: string; data?: string; dataset?: string; maxSteps?: number }): unknown {
  if (!o.model) throw new ApiClientError(0, 'INVALID_PARAMETER_VALUE', '--model is required (or give --file)');
  if (!o.dataset) throw new ApiClientError(0, 'INVALID_PARAMETER_VALUE', '--dataset is required (or give --file)');
  return {
    model_name: o.model,
    base_model: o.baseModel,
    dataset: o.data ? { name: o.dataset, source_uri: pathToFileURL(resolve(o.data)).href } : { name: o.dataset, version: 'latest' },
    ...(o.maxSteps ? { hyperparameters: { learning_rate: 2e-3, max_steps: o.maxSteps, batch_size: 8 } } : {}),
  };
}

/** `org create`, `token create|list|revoke`, `audit`: tenants, their tokens and their audit trail. */
function identityCommands(program: Command): void {
  program
    .command('org')
    .description('organizations (tenants)')
    .command('create <name>')
    .description('create an organization; prints its first ml-admin token, once')
    .option('--admin <subject>', 'who the admin token is for', 'admin')
    .action(async (name: string, o: { admin: string }) => print(await api().post('/v1/organizations', { name, admin_subject: o.admin })));
  const token = program.command('token').description("API tokens of the caller's organization (admin)");
  token
    .command('create <subject>')
    .description('create a token; it is printed once and stored only as a hash')
    .addOption(new Option('--role <role>', 'role of spec 000').choices(['ml-admin', 'ml-researcher', 'ml-viewer']).makeOptionMandatory())
    .option('--approver', 'may approve production promotions')
    .option('--expires <duration>', 'lifetime, e.g. 30d or 12h (default: never)')
    .action(async (subject: string, o: { role: string; approver?: boolean; expires?: string }) =>
      print(await api().post('/v1/tokens', { subject, role: o.role, approver: Boolean(o.approver), ...(o.expires ? { expires: o.expires } : {}) })),
    );
  token
    .command('list')
    .description("the organization's tokens; with --jobs, each job's tracking token (revoked when its job ends)")
    .option('--jobs', 'list job tokens instead of user tokens')
    .action(async (o: { jobs?: boolean }) => table((await api().get<{ tokens: Record<string, unknown>[] }>(`/v1/tokens${o.jobs ? '?kind=job' : ''}`)).tokens));
  token
    .command('revoke <id>')
    .description("revoke a user's or a job's token; the next request with it is refused")
    .action(async (id: string) => print(await api().del(`/v1/tokens/${encodeURIComponent(id)}`)));
  program
    .command('audit')
    .description("the organization's audit trail, newest first (admin)")
    .option('--limit <n>', 'entries', '50')
    .option('--action <action>', 'only this action')
    .action(async (o: { limit: string; action?: string }) => {
      const q = new URLSearchParams({ limit: o.limit, ...(o.action ? { action: o.action } : {}) });
      const { entries } = await api().get<{ entries: Record<string, unknown>[] }>(`/v1/audit?${q}`);
      table(entries.map((e) => ({ time: e.time, actor: e.actor, action: e.action, resource: e.resource, outcome: e.outcome, request_id: e.request_id, source: e.source_address })));
    });
}

function reportStatus(s: PipelineStatus): void {
  const p = s.progress;
  if (p.awaiting_approval) process.stderr.write(`\nwaiting for approval: hanzo-ml pipeline approve ${s.id} --reason "..."\n`);
  else process.stderr.write(`\n${s.status}: ${s.result?.outcome ?? p.error ?? ''} ${s.result?.reason ?? ''}\n`);
  for (const w of s.result?.warnings ?? []) process.stderr.write(`warning: ${w}\n`);
}

export async function main(argv: string[]): Promise<void> {
  try {
    await buildCli().parseAsync(argv);
  } catch (err) {
    const msg = err instanceof ApiClientError ? `error: ${err.code}: ${err.message}` : `error: ${(err as Error).message}`;
    process.stderr.write(msg + '\n');
    process.exitCode = process.exitCode || 1;
  }
}

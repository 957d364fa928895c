// What a pipeline will cost before it starts (`pipeline start --dry-run`) and what an organization spent in a
// month (`usage`): the data as JSON on stdout with --json, else a short summary.
import type { ApiClient } from './api-client.js';
import type { PipelineDryRun, UsageReport } from '../contracts/cost.js';

const usd = (n: number): string => `$${n.toFixed(n < 1 ? 4 : 2)}`;

/** Estimates a pipeline request without starting it; exit code 1 when it would exceed the budget. */
export async function dryRunPipeline(api: ApiClient, body: unknown, json: boolean): Promise<number> {
  const res = await api.post<PipelineDryRun>('/v1/pipelines?dry_run=true', body);
  if (json) process.stdout.write(JSON.stringify(res, null, 2) + '\n');
  else {
    const e = res.estimate;
    const basis = e.basis === 'measured' ? `measured over ${e.samples} finished job${e.samples === 1 ? '' : 's'}` : 'configured';
    process.stdout.write(
      `${e.steps} steps, ${e.tokens} training tokens (${e.epochs.toFixed(2)} epochs)\n` +
        `${e.gpu_hours.toFixed(4)} ${e.gpu_type} device-hours at ${Math.round(e.tokens_per_gpu_second)} tokens/s${e.startup_gpu_seconds > 0 ? ` after ${e.startup_gpu_seconds.toFixed(0)} s of start-up` : ''} (${basis}), ${usd(e.usd)} at ${usd(e.price_per_gpu_hour_usd)}/hour\n` +
        (res.budget ? `budget: ${usd(res.budget.left_usd)} left of ${usd(res.budget.monthly_budget_usd)} this month${res.fits_budget ? '' : ' (this would exceed it)'}\n` : ''),
    );
  }
  return res.fits_budget === false ? 1 : 0;
}

export async function printUsage(api: ApiClient, month: string | undefined, json: boolean): Promise<void> {
  const res = await api.get<UsageReport>(`/v1/usage${month ? `?month=${encodeURIComponent(month)}` : ''}`);
  if (json) return void process.stdout.write(JSON.stringify(res, null, 2) + '\n');
  process.stdout.write(`${res.month}\n`);
  for (const o of res.organizations) {
    const budget = o.monthly_budget_usd === null ? '' : ` of ${usd(o.monthly_budget_usd)} budget`;
    process.stdout.write(`${o.organization_id}: ${o.jobs} jobs, ${o.gpu_hours.toFixed(4)} device-hours, ${usd(o.cost_usd)}${budget}\n`);
  }
}

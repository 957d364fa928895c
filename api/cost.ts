// Cost before launch, at the API: a pipeline's estimate (datasets/cost-estimate.ts) and the organization's
// monthly budget it must fit in. Job submission can call the same two functions with its own train spec.
import type { ApiDeps } from './deps.js';
import type { PipelineInput } from '../contracts/pipeline.js';
import type { BudgetState, CostEstimate } from '../contracts/cost.js';
import { estimateTrainingCost, EstimateError, type EstimateData } from '../datasets/cost-estimate.js';
import { findDatasetVersion } from '../db/repo/datasets.js';
import { monthlyUsage } from '../db/repo/usage.js';
import { resolveBaseModel } from '../lib/base-models.js';
import { ApiError, invalid } from './errors.js';

/** What the pipeline's train stage will cost; its input has passed checkPipelineInput. */
export async function estimatePipeline(deps: ApiDeps, req: PipelineInput, organizationId: string): Promise<CostEstimate> {
  const ds = req.dataset;
  let data: EstimateData;
  if ('source_uri' in ds) data = { source: { path: ds.source_uri, format: ds.format, seed: ds.seed, splits: ds.splits } };
  else {
    const row = (await findDatasetVersion(deps.db, organizationId, ds.name, ds.version))!;
    const splits = row.splits as Record<'train' | 'validation', { path: string }>;
    data = { splits: { train: splits.train.path, validation: splits.validation.path } };
  }
  const { method, hyperparameters, quantization, adalora, preference, data: options, hardware } = req;
  try {
    return await estimateTrainingCost(deps, {
      baseModel: { name: req.base_model, dir: resolveBaseModel(req.base_model, deps.config, deps.bootstrap) },
      plan: { method, hyperparameters, quantization, adalora, preference, data: options, hardware },
      data,
    });
  } catch (err) {
    if (err instanceof EstimateError) throw invalid(err.message);
    throw err;
  }
}

/** The calendar month (UTC) a date falls in, "YYYY-MM". */
export const monthOf = (d: Date): string => d.toISOString().slice(0, 7);

/** The organization's budget this month, or null when scheduler.monthly_budgets_usd gives it none. */
export async function budgetOf(deps: ApiDeps, organizationId: string, now = new Date()): Promise<BudgetState | null> {
  const budget = deps.config.scheduler.monthly_budgets_usd[organizationId];
  if (budget === undefined) return null;
  const [usage] = await monthlyUsage(deps.db, monthOf(now), organizationId);
  const spent = usage?.cost_usd ?? 0;
  return { monthly_budget_usd: budget, spent_usd: spent, left_usd: Math.max(0, budget - spent) };
}

/** Refuses (402) a job whose estimate exceeds what is left of its organization's budget this month. */
export function checkBudget(organizationId: string, estimate: CostEstimate, budget: BudgetState | null): void {
  if (!budget || estimate.usd <= budget.left_usd) return;
  const usd = (n: number): string => `$${n.toFixed(4)}`;
  throw new ApiError(
    'PAYMENT_REQUIRED',
    `the estimate of ${usd(estimate.usd)} (${estimate.gpu_hours.toFixed(3)} GPU-hours) exceeds what is left of organization ${organizationId}'s monthly budget: ${usd(budget.left_usd)} of ${usd(budget.monthly_budget_usd)} (${usd(budget.spent_usd)} spent this month)`,
  );
}

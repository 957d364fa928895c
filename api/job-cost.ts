// Cost before launch for a submitted job: a recipe job's estimate is the pipeline's (the trainer's own token count
// on the job's dataset version and base model, device-hours from measured throughput, dollars from
// scheduler.gpu_prices_usd); a command job's work is not known before it runs, so only its price per device-hour
// and, with schedule.max_duration, the most it can cost.
import type { ApiDeps } from './deps.js';
import { recipeHardware, type JobDryRun, type JobSubmission } from '../contracts/jobs.js';
import { estimateTrainingCost, EstimateError } from '../datasets/cost-estimate.js';
import { findDatasetVersion } from '../db/repo/datasets.js';
import { resolveBaseModel } from '../lib/base-models.js';
import { durationMs } from '../lib/config.js';
import { accountedGpuType, devicePriceUsd } from '../lib/prices.js';
import { invalid } from './errors.js';

export type JobEstimate = Pick<JobDryRun, 'kind' | 'estimate' | 'known'>;

/** The job's estimate; its submission has passed checkJobSubmission. */
export async function estimateJob(deps: ApiDeps, spec: JobSubmission, organizationId: string): Promise<JobEstimate> {
  const recipe = spec.recipe;
  if (!recipe) return { kind: 'command', estimate: null, known: commandBounds(deps, spec) };
  const row = (await findDatasetVersion(deps.db, organizationId, recipe.dataset.name, recipe.dataset.version))!;
  const splits = row.splits as Record<'train' | 'validation', { path: string }>;
  try {
    const estimate = await estimateTrainingCost(deps, {
      baseModel: { name: recipe.base_model, dir: resolveBaseModel(recipe.base_model, deps.config, deps.bootstrap) },
      plan: { method: recipe.method, hyperparameters: recipe.hyperparameters, data: recipe.data, hardware: recipeHardware(spec) },
      data: { splits: { train: splits.train.path, validation: splits.validation.path } },
    });
    return { kind: 'recipe', estimate, known: null };
  } catch (err) {
    if (err instanceof EstimateError) throw invalid(err.message);
    throw err;
  }
}

/** A command job: its devices' price, and the most it can cost when schedule.max_duration bounds it. */
function commandBounds(deps: ApiDeps, spec: JobSubmission): NonNullable<JobDryRun['known']> {
  const nodes = spec.distributed?.num_nodes ?? 1;
  const perNode = spec.distributed?.gpus_per_node ?? spec.resources.gpus;
  const hw = { gpus_per_node: perNode, gpu_type: spec.resources.gpu_type };
  const price = devicePriceUsd(deps.config, hw);
  // A CPU job is accounted as one device per node.
  const devices = perNode > 0 ? perNode * nodes : nodes;
  const hours = spec.schedule.max_duration ? durationMs(spec.schedule.max_duration) / 3_600_000 : null;
  return {
    gpu_type: accountedGpuType(hw),
    gpus: perNode * nodes,
    price_per_gpu_hour_usd: price,
    max_gpu_hours: hours === null ? null : hours * devices,
    max_usd: hours === null ? null : hours * devices * price,
  };
}

// The model an eval or conversion job works on (contracts/job-kinds.ts ModelSource), resolved to what its tools
// read: an adapter directory with the base model it applies to, and/or a full safetensors model directory. The
// API resolves it before queueing (a bad source is a 400 naming the field) and the job again when it runs (a
// version deleted meanwhile fails the job). Only the caller's organization is searched: another organization's
// model or job does not exist for it.
import type { Config } from '../contracts/config.js';
import type { ModelSource } from '../contracts/job-kinds.js';
import { JobRecipeSchema } from '../contracts/jobs.js';
import type { Db } from '../db/client.js';
import { getJob } from '../db/repo/jobs.js';
import { aliasTarget, getModel, getVersion } from '../db/repo/models.js';
import { artifactsOf } from '../db/repo/run-artifacts.js';
import { BaseModelError, resolveBaseModel } from '../lib/base-models.js';
import type { Bootstrap } from '../lib/config.js';

/** A bad source, its message starting with the field it is about. */
export class ModelSourceError extends Error {}

export interface ResolvedModel {
  /** How the job names it: `name@version` or `job <id>`. */
  label: string;
  /** The base model the adapter applies to (a name or path resolveBaseModel accepts); null without an adapter. */
  baseModel: string | null;
  /** Object URI of the adapter directory (LoRA family); null: the source has none. */
  adapterDir: string | null;
  /** Object URI of a full safetensors model directory (tokenizer included); null: the source has none. */
  modelDir: string | null;
  /** The registered version, when the source is one. */
  version: { name: string; version: number } | null;
}

interface Ctx {
  db: Db;
  config: Config;
  bootstrap: Bootstrap;
}

const dirOf = (uri: string, file: string): string => uri.slice(0, uri.length - file.length - 1);

async function fromJob(db: Db, organizationId: string, field: string, id: string): Promise<Omit<ResolvedModel, 'baseModel'> & { recordedBase: string | null }> {
  const job = await getJob(db, organizationId, id);
  if (!job) throw new ModelSourceError(`${field}.job: no job "${id}" in this organization`);
  if (job.status !== 'succeeded') throw new ModelSourceError(`${field}.job: job ${id} is ${job.status}; only a succeeded job's output can be used`);
  const recipe = JobRecipeSchema.safeParse((job.spec as { recipe?: unknown }).recipe);
  const files = job.runId ? await artifactsOf(db, job.runId) : [];
  const adapter = files.find((f) => f.path === 'adapter/adapter_config.json');
  const model = files.find((f) => f.path === 'model/config.json');
  if (!recipe.success || (!adapter && !model)) throw new ModelSourceError(`${field}.job: job ${id} is not a training recipe job with a model output (adapter/ or model/ on its run)`);
  return {
    label: `job ${id}`,
    recordedBase: recipe.data.base_model,
    adapterDir: adapter ? dirOf(adapter.uri, 'adapter_config.json') : null,
    modelDir: model ? dirOf(model.uri, 'config.json') : null,
    version: null,
  };
}

async function fromVersion(db: Db, organizationId: string, field: string, ref: string): Promise<Omit<ResolvedModel, 'baseModel'> & { recordedBase: string | null }> {
  const [name, which] = ref.split('@') as [string, string];
  const model = await getModel(db, organizationId, name);
  if (!model) throw new ModelSourceError(`${field}.model: no registered model "${name}" in this organization`);
  const number = /^\d+$/.test(which) ? Number(which) : await aliasTarget(db, model.id, which);
  if (number === null) throw new ModelSourceError(`${field}.model: model "${name}" has no alias "${which}"`);
  const found = await getVersion(db, organizationId, name, number);
  if (!found) throw new ModelSourceError(`${field}.model: model "${name}" has no version ${number}`);
  const v = found.version;
  if (v.status !== 'ready') throw new ModelSourceError(`${field}.model: ${name}@${number} is ${v.status}, not ready`);
  const artifacts = v.artifacts as Record<string, { path: string } | undefined>;
  const adapter = artifacts.lora;
  return {
    label: `${name}@${number}`,
    recordedBase: v.baseModel,
    adapterDir: adapter ? adapter.path.replace(/\/+$/, '') : null,
    modelDir: artifacts.safetensors ? artifacts.safetensors.path.replace(/\/+$/, '') : null,
    version: { name, version: number },
  };
}

/**
 * The source as directories. `field` is the section's name (eval, conversion); `baseModel` the section's own
 * base_model. An adapter whose base model does not resolve on this server is kept only with a full model beside it
 * (which then stands alone); otherwise the error names base_model.
 */
export async function resolveModelSource(ctx: Ctx, organizationId: string, field: string, source: ModelSource, baseModel?: string): Promise<ResolvedModel> {
  const found = source.job !== undefined ? await fromJob(ctx.db, organizationId, `${field}.source`, source.job) : await fromVersion(ctx.db, organizationId, `${field}.source`, source.model!);
  const { recordedBase, ...rest } = found;
  if (!rest.adapterDir) return { ...rest, baseModel: null };
  const base = baseModel ?? recordedBase;
  const problem = base === null ? 'records no base model' : baseModelProblem(ctx, base);
  if (problem === null) return { ...rest, baseModel: base };
  if (baseModel !== undefined) throw new ModelSourceError(`${field}.base_model: ${problem}`);
  if (rest.modelDir) return { ...rest, adapterDir: null, baseModel: null };
  throw new ModelSourceError(`${field}.base_model: ${rest.label} ${base === null ? problem : `records base model "${base}", which does not resolve here (${problem})`}: give base_model`);
}

function baseModelProblem(ctx: Ctx, name: string): string | null {
  try {
    resolveBaseModel(name, ctx.config, ctx.bootstrap);
    return null;
  } catch (err) {
    if (err instanceof BaseModelError) return err.message;
    throw err;
  }
}

/** An eval job scores an adapter on its base, or a full model: the source must give one of them. */
export function requireScorable(model: ResolvedModel, field: string): ResolvedModel {
  if ((model.adapterDir === null || model.baseModel === null) && model.modelDir === null)
    throw new ModelSourceError(`${field}.source: ${model.label} has neither safetensors weights nor an adapter to score`);
  return model;
}

/** A conversion merges an adapter into its base model: the source must give both. */
export function requireAdapter(model: ResolvedModel, field: string): ResolvedModel & { adapterDir: string; baseModel: string } {
  if (model.adapterDir === null || model.baseModel === null) throw new ModelSourceError(`${field}.source: ${model.label} has no adapter to merge (a full model needs no merge)`);
  return model as ResolvedModel & { adapterDir: string; baseModel: string };
}

// Hyperparameter sweeps and population-based training (spec 000, "Hyperparameter Optimization"): the sweep
// configuration POST /v1/hpo takes, the workflow inputs, the compact trial history the sweep workflow carries,
// and the suggestion request the stateless sampler (`python -m hanzo_ml hpo-suggest`) answers.
import { z } from 'zod';
import { JobPrioritySchema } from './config.js';
import { LoraHyperparametersSchema } from './trainer-job.js';
import { PIPELINE_TASK_QUEUE } from './pipeline.js';

/** Sweeps run on the pipeline worker: one worker process serves every workflow of the control plane. */
export const HPO_TASK_QUEUE = PIPELINE_TASK_QUEUE;
export const hpoWorkflowId = (sweepId: string): string => `hpo:${sweepId}`;
export const hpoTrialWorkflowId = (sweepId: string, n: number): string => `hpo:${sweepId}:trial:${n}`;
/** One round of one member of a population-based training sweep. */
export const pbtMemberWorkflowId = (sweepId: string, member: number, round: number): string => `hpo:${sweepId}:member:${member}:round:${round}`;

const duration = z.string().regex(/^\d+(ms|s|m|h|d)$/, 'expected a duration such as "30s"');
const name = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._/-]*$/, 'letters, digits, ".", "_", "/" and "-", starting with a letter or digit');

// ---- the search space --------------------------------------------------------------------------

const bounds = { min: z.number().finite(), max: z.number().finite() };
const gridPoints = z.number().int().min(2).max(1000).optional().describe('grid strategy: evenly spaced points (in log space for log_uniform)');

/** min < max (and the type's own rules) are checked with the whole sweep, where the message can name the field. */
export const SearchParamSchema = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('uniform'), ...bounds, points: gridPoints }),
  z.strictObject({ type: z.literal('log_uniform'), ...bounds, points: gridPoints }),
  z.strictObject({ type: z.literal('int'), ...bounds, step: z.number().int().positive().default(1), log: z.boolean().default(false) }),
  z.strictObject({ type: z.literal('choice'), values: z.array(z.union([z.number(), z.string(), z.boolean()])).min(1).max(1000) }),
]);
export type SearchParam = z.infer<typeof SearchParamSchema>;

/** The grid is enumerated in memory by the suggestion process (trainer/hanzo_ml/hpo/space.py), which has the same cap. */
export const MAX_GRID_POINTS = 1_000_000;

/** Points one parameter contributes to a grid (continuous parameters: their "points"). */
function gridAxisSize(p: SearchParam): number {
  if (p.type === 'choice') return p.values.length;
  if (p.type === 'int') return p.max < p.min ? 0 : Math.floor((p.max - p.min) / p.step) + 1;
  return p.points ?? 0;
}
export const SearchSpaceSchema = z
  .record(z.string().regex(/^[a-z][a-z0-9_]*$/, 'parameter names are snake_case'), SearchParamSchema)
  .refine((s) => Object.keys(s).length > 0, { message: 'the search space needs at least one parameter' });
export type SearchSpace = z.infer<typeof SearchSpaceSchema>;
export type ParamValue = number | string | boolean;
export type Params = Record<string, ParamValue>;

// ---- what one trial does ---------------------------------------------------------------------------

/** Objectives with known optima, evaluated step by step: for benchmarking and testing the scheduler. */
export const SYNTHETIC_FUNCTIONS = ['branin', 'hartmann6', 'learning-curve'] as const;
export const SyntheticFunctionSchema = z.enum(SYNTHETIC_FUNCTIONS);
export type SyntheticFunction = z.infer<typeof SyntheticFunctionSchema>;

export const SyntheticBaseConfigSchema = z.strictObject({
  method: z.literal('synthetic'),
  function: SyntheticFunctionSchema,
  max_steps: z.number().int().positive().max(100_000).default(100),
  eval_steps: z.number().int().positive().default(10).describe('report the objective every N steps'),
  noise: z.number().min(0).max(1).default(0).describe('relative observation noise, deterministic per trial'),
  step_ms: z.number().int().min(0).max(60_000).default(0).describe('wall time each step takes (emulates work)'),
});
export type SyntheticBaseConfig = z.infer<typeof SyntheticBaseConfigSchema>;

export const LoraBaseConfigSchema = z.strictObject({
  method: z.literal('lora'),
  model: z.string().min(1).describe('base model name or absolute path'),
  dataset: name.describe('dataset name'),
  dataset_version: z.union([z.number().int().positive(), z.literal('latest')]).default('latest'),
  max_steps: z.number().int().positive(),
  eval_steps: z.number().int().positive().describe('evaluate (and checkpoint) every N steps'),
  hyperparameters: LoraHyperparametersSchema.omit({ max_steps: true })
    .partial()
    .prefault({})
    .describe('fixed hyperparameters; the search space overrides these per trial'),
  keep_checkpoints: z.number().int().positive().default(2),
});
export type LoraBaseConfig = z.infer<typeof LoraBaseConfigSchema>;

export const BaseConfigSchema = z.discriminatedUnion('method', [LoraBaseConfigSchema, SyntheticBaseConfigSchema]);
export type BaseConfig = z.infer<typeof BaseConfigSchema>;

/** The parameters each synthetic function takes, and the domain of each. */
export const SYNTHETIC_DOMAINS: Record<SyntheticFunction, Record<string, [number, number]>> = {
  branin: { x1: [-5, 10], x2: [0, 15] },
  hartmann6: Object.fromEntries([1, 2, 3, 4, 5, 6].map((i) => [`x${i}`, [0, 1] as [number, number]])),
  'learning-curve': { learning_rate: [1e-6, 1], width: [8, 4096] },
};

/** LoRA hyperparameters a sweep may search over. */
export const LORA_SEARCHABLE = Object.keys(LoraHyperparametersSchema.shape).filter((k) => k !== 'max_steps' && k !== 'target_modules');

// ---- the sweep configuration ----------------------------------------------------------------

export const ObjectiveSchema = z.strictObject({
  metric: z.string().min(1).default('eval/loss'),
  direction: z.enum(['minimize', 'maximize']).default('minimize'),
});
export type Objective = z.infer<typeof ObjectiveSchema>;

export const STRATEGIES = ['grid', 'random', 'bayesian', 'evolutionary', 'pbt'] as const;
export const StrategySchema = z.enum(STRATEGIES);
export type Strategy = z.infer<typeof StrategySchema>;

export const EarlyStoppingSchema = z.strictObject({
  rule: z.enum(['none', 'median', 'asha']).default('none').describe('median stopping rule, or asynchronous successive halving'),
  patience: z.number().int().positive().optional().describe('also stop a trial with no improvement for this many evals'),
  min_delta: z.number().min(0).default(0).describe('smallest change that counts as an improvement'),
  grace_steps: z.number().int().positive().optional().describe('no rule stops a trial before this step (default: eval_steps)'),
  min_completed_trials: z.number().int().min(1).default(5).describe('median rule: completed trials needed before it stops any'),
  reduction_factor: z.number().int().min(2).max(10).default(3).describe('ASHA: keep the top 1/reduction_factor at each rung'),
});
export type EarlyStopping = z.infer<typeof EarlyStoppingSchema>;

export const PbtSettingsSchema = z.strictObject({
  population_size: z.number().int().min(2).max(64).default(4),
  interval_steps: z.number().int().positive().describe('train this many steps between exploit/explore rounds'),
  quantile: z.number().gt(0).max(0.5).default(0.25).describe('bottom quantile copies from the top quantile'),
  perturb_factors: z.tuple([z.number().positive(), z.number().positive()]).default([0.8, 1.2]),
  resample_probability: z.number().min(0).max(1).default(0.25).describe('explore by resampling from the search space instead of perturbing'),
});
export type PbtSettings = z.infer<typeof PbtSettingsSchema>;

export const ResourcesSchema = z.strictObject({
  gpus: z.number().int().min(0).max(64).default(1).describe('GPUs each trial holds; GPU time = wall time x gpus'),
  gpu_type: z.string().min(1).optional(),
  memory: z.string().regex(/^\d+(Mi|Gi|Ti)$/, 'expected a quantity such as "64Gi"').optional(),
});

/** Trials of a sweep, or member rounds of a population: each is a child workflow and a tracked run. */
export const MAX_TRIALS = 100_000;

const SweepConfigObjectSchema = z.strictObject({
    experiment: name.describe('the experiment every trial is a run of'),
    base_config: BaseConfigSchema,
    search_space: SearchSpaceSchema,
    strategy: StrategySchema.optional().describe('default: hpo.default_strategy of the server config'),
    objective: z.union([ObjectiveSchema, z.array(ObjectiveSchema).min(1).max(4)]).prefault({}),
    max_trials: z.number().int().positive().max(MAX_TRIALS).default(20),
    max_concurrent_trials: z.number().int().positive().max(256).default(4),
    early_stopping: EarlyStoppingSchema.prefault({}),
    resources_per_trial: ResourcesSchema.prefault({}),
    priority: JobPrioritySchema.default('low').describe("queue priority of every trial (scheduler.quotas): low by default, so a sweep yields to other work; never above the organization's"),
    seed: z.number().int().nonnegative().max(2 ** 31 - 1).default(0),
    warm_start: z.boolean().default(false).describe('seed the sampler with the trials of earlier sweeps on the same base model and search space'),
    pbt: PbtSettingsSchema.optional(),
});
export const SweepConfigSchema = SweepConfigObjectSchema.superRefine(checkSweep);
export type SweepConfig = z.infer<typeof SweepConfigSchema>;
export type SweepRequest = z.input<typeof SweepConfigSchema>;

export const objectivesOf = (c: Pick<SweepConfig, 'objective'>): Objective[] => (Array.isArray(c.objective) ? c.objective : [c.objective]);

/** LoRA hyperparameters that take integers (the search space must give them as "int" or "choice"). */
const LORA_INTEGER = ['batch_size', 'gradient_accumulation_steps', 'warmup_steps', 'lora_rank', 'max_seq_length', 'seed'];

function checkSweep(cfg: z.infer<typeof SweepConfigObjectSchema>, ctx: z.RefinementCtx): void {
  const issue = (path: (string | number)[], message: string) => ctx.addIssue({ code: 'custom', path, message });
  const objectives = objectivesOf(cfg);
  if (cfg.strategy === 'evolutionary' && objectives.length < 2) issue(['objective'], 'the evolutionary strategy is multi-objective: give a list of two or more objectives');
  if (cfg.strategy !== 'evolutionary' && objectives.length > 1) issue(['objective'], `several objectives need strategy "evolutionary" (got "${cfg.strategy ?? 'default'}")`);
  if (new Set(objectives.map((o) => o.metric)).size !== objectives.length) issue(['objective'], 'each objective metric may appear once');
  const base = cfg.base_config;
  if (base.eval_steps > base.max_steps) issue(['base_config', 'eval_steps'], `must not exceed max_steps (${base.max_steps})`);
  for (const [key, param] of Object.entries(cfg.search_space)) {
    const path = ['search_space', key];
    if (param.type !== 'choice') {
      if (!(param.min < param.max)) issue([...path, 'max'], `must be greater than min (${param.min})`);
      if (param.type === 'log_uniform' && param.min <= 0) issue([...path, 'min'], 'log_uniform needs min > 0');
      if (param.type === 'int' && !(Number.isInteger(param.min) && Number.isInteger(param.max))) issue([...path, 'min'], 'int bounds must be integers');
      if (param.type === 'int' && param.log && param.step !== 1) issue([...path, 'step'], 'a log-scaled int parameter takes step 1');
    }
    if (base.method === 'synthetic') {
      const domain = SYNTHETIC_DOMAINS[base.function][key];
      if (!domain) {
        issue(path, `not a parameter of ${base.function}; expected one of ${Object.keys(SYNTHETIC_DOMAINS[base.function]).join(', ')}`);
        continue;
      }
      const values = param.type === 'choice' ? param.values : [param.min, param.max];
      if (values.some((v) => typeof v !== 'number' || v < domain[0] || v > domain[1])) issue(path, `${base.function} defines ${key} on [${domain[0]}, ${domain[1]}]`);
    } else if (!LORA_SEARCHABLE.includes(key)) {
      issue(path, `not a LoRA hyperparameter a sweep can search; expected one of ${LORA_SEARCHABLE.join(', ')}`);
    } else {
      const shape = LoraHyperparametersSchema.shape[key as keyof typeof LoraHyperparametersSchema.shape];
      const samples = param.type === 'choice' ? param.values : [param.min, param.max];
      for (const v of samples) {
        const checked = shape.safeParse(v);
        if (!checked.success) issue(path, `value ${JSON.stringify(v)} is not a valid ${key}: ${checked.error.issues[0]?.message}`);
      }
      if ((param.type === 'uniform' || param.type === 'log_uniform') && LORA_INTEGER.includes(key)) issue(path, `${key} is an integer: use type "int" or "choice"`);
    }
    if (cfg.strategy === 'grid' && (param.type === 'uniform' || param.type === 'log_uniform') && param.points === undefined)
      issue(path, 'grid search needs a discrete grid: give "points" for a continuous parameter, or use "choice" / "int"');
  }
  if (cfg.strategy === 'grid') {
    const size = Object.values(cfg.search_space).reduce((n, p) => n * gridAxisSize(p), 1);
    if (size > MAX_GRID_POINTS) issue(['search_space'], `the grid has ${size.toLocaleString('en-US')} points, more than ${MAX_GRID_POINTS.toLocaleString('en-US')}; use random or bayesian`);
  }
  if (base.method === 'synthetic')
    for (const key of Object.keys(SYNTHETIC_DOMAINS[base.function]))
      if (!(key in cfg.search_space)) issue(['search_space', key], `${base.function} takes ${Object.keys(SYNTHETIC_DOMAINS[base.function]).join(', ')}: every one must be searched`);
  if (cfg.strategy === 'pbt') {
    if (!cfg.pbt) issue(['pbt'], 'strategy "pbt" needs pbt settings (population_size, interval_steps)');
    if (base.method === 'lora')
      issue(['base_config', 'method'], 'population-based training of LoRA members is not available yet (the trainer cannot stop at a round boundary nor take a new learning rate on resume); use the synthetic "learning-curve" members');
    else if (base.function !== 'learning-curve') issue(['base_config', 'function'], 'population-based training needs a training run: use "learning-curve"');
    if (objectives.length > 1) issue(['objective'], 'population-based training ranks members on one objective');
    if (cfg.pbt && cfg.pbt.interval_steps > base.max_steps) issue(['pbt', 'interval_steps'], `must not exceed base_config.max_steps (${base.max_steps})`);
    // Every round of every member is a child workflow, like a trial: the same cap as max_trials.
    const memberRounds = cfg.pbt ? Math.ceil(base.max_steps / cfg.pbt.interval_steps) * cfg.pbt.population_size : 0;
    if (memberRounds > MAX_TRIALS)
      issue(['pbt', 'interval_steps'], `${memberRounds.toLocaleString('en-US')} member rounds (population_size x max_steps / interval_steps), more than ${MAX_TRIALS.toLocaleString('en-US')}: use a longer interval`);
    for (const key of Object.keys(cfg.search_space))
      if (base.method === 'lora' && !PBT_MUTABLE.includes(key)) issue(['search_space', key], `population-based training changes hyperparameters mid-run; ${key} cannot change on resume (allowed: ${PBT_MUTABLE.join(', ')})`);
    if (cfg.early_stopping.rule !== 'none') issue(['early_stopping', 'rule'], 'population-based training replaces early stopping with exploit/explore');
  } else if (cfg.pbt) issue(['pbt'], 'pbt settings are only for strategy "pbt"');
  if (cfg.strategy !== 'pbt' && cfg.early_stopping.rule !== 'none' && objectives.length > 1) issue(['early_stopping', 'rule'], 'early stopping ranks trials on one objective; not with several');
}

/** LoRA hyperparameters that can change when a run resumes from a checkpoint (the adapter shape cannot). */
export const PBT_MUTABLE = ['learning_rate', 'weight_decay', 'lora_dropout', 'max_grad_norm'];

/** The sweep as the workflow takes it: the validated config, who asked, and server settings. */
export const SweepWorkflowInputSchema = z.strictObject({
  sweep_id: z.string().min(1),
  config: SweepConfigSchema.and(z.object({ strategy: StrategySchema })),
  organization_id: z.string().min(1),
  requested_by: z.string().min(1),
  runtime: z.strictObject({
    heartbeat_timeout: duration,
    /** Continue-as-new once the history passes this many events (Temporal also suggests it near its limit). */
    continue_as_new_after_events: z.number().int().min(100).default(8000),
  }),
});
export type SweepWorkflowInput = z.infer<typeof SweepWorkflowInputSchema>;

// ---- trial history (carried by the workflow, replayed into the sampler) ----------------------------

export const TRIAL_STATES = ['running', 'completed', 'pruned', 'failed', 'cancelled'] as const;
export type TrialState = (typeof TRIAL_STATES)[number];

export const HistoryTrialSchema = z.object({
  n: z.number().int().nonnegative(),
  params: z.record(z.string(), z.union([z.number(), z.string(), z.boolean()])),
  state: z.enum(TRIAL_STATES),
  /** Final objective values, in the order of the sweep's objectives (null unless completed). */
  values: z.array(z.number()).nullable(),
  /** [step, objective value] at each eval: what the pruning rules and the sampler see. */
  intermediate: z.array(z.tuple([z.number().int(), z.number()])),
  /** Sampler bookkeeping returned with the suggestion (e.g. NSGA-II's generation), replayed as is. */
  system_attrs: z.record(z.string(), z.unknown()).default({}),
});
export type HistoryTrial = z.infer<typeof HistoryTrialSchema>;

export const SuggestRequestSchema = z.object({
  space: SearchSpaceSchema,
  strategy: z.enum(['grid', 'random', 'bayesian', 'evolutionary']),
  directions: z.array(z.enum(['minimize', 'maximize'])).min(1),
  seed: z.number().int().nonnegative(),
  history: z.array(HistoryTrialSchema),
  /** Trial numbers to suggest for; each suggestion depends on (seed, its number, the history) only. */
  numbers: z.array(z.number().int().nonnegative()).min(1),
});
export type SuggestRequest = z.infer<typeof SuggestRequestSchema>;

export const SuggestResponseSchema = z.object({
  suggestions: z.array(z.object({ n: z.number().int(), params: z.record(z.string(), z.union([z.number(), z.string(), z.boolean()])), system_attrs: z.record(z.string(), z.unknown()) })),
  /** Grid only: every grid point has been handed out. */
  exhausted: z.boolean(),
});
export type SuggestResponse = z.infer<typeof SuggestResponseSchema>;

// ---- trials and progress -------------------------------------------------------------------------

export const TrialInputSchema = z.object({
  sweep_id: z.string(),
  n: z.number().int().nonnegative(),
  params: z.record(z.string(), z.union([z.number(), z.string(), z.boolean()])),
  config: SweepWorkflowInputSchema.shape.config,
  organization_id: z.string(),
  requested_by: z.string(),
  heartbeat_timeout: duration,
  /** The sweep's workflow ID: where intermediate reports go. */
  report_to: z.string(),
});
export type TrialInput = z.infer<typeof TrialInputSchema>;

export const TrialOutcomeSchema = z.object({
  n: z.number().int(),
  state: z.enum(TRIAL_STATES),
  metrics: z.record(z.string(), z.number()),
  steps: z.number().int().nonnegative(),
  gpu_seconds: z.number().nonnegative(),
  run_id: z.string().nullable(),
  error: z.string().nullable(),
  /** [step, objective] at each eval, as reported to the sweep. */
  curve: z.array(z.tuple([z.number().int(), z.number()])).optional(),
});
export type TrialOutcome = z.infer<typeof TrialOutcomeSchema>;

/** Sent by a trial's activity at each eval (an Update); the answer says whether the trial goes on. */
export const TrialReportSchema = z.object({ n: z.number().int(), step: z.number().int().nonnegative(), value: z.number() });
export type TrialReport = z.infer<typeof TrialReportSchema>;

export const SweepProgressSchema = z.object({
  sweep_id: z.string(),
  status: z.enum(['running', 'draining', 'completed', 'cancelled', 'failed']),
  strategy: StrategySchema,
  trials_started: z.number().int(),
  trials_finished: z.number().int(),
  counts: z.record(z.string(), z.number().int()),
  running: z.array(z.object({ n: z.number().int(), params: z.record(z.string(), z.unknown()), last_step: z.number().int().nullable(), last_value: z.number().nullable() })),
  best: z.object({ n: z.number().int(), params: z.record(z.string(), z.unknown()), values: z.array(z.number()) }).nullable(),
  pareto_front: z.array(z.number().int()),
  continued_as_new: z.number().int(),
  warm_start_trials: z.number().int().describe('finished trials of earlier sweeps replayed into the sampler'),
  trial_steps_run: z.number().int(),
  trial_steps_saved: z.number().int().describe('steps pruned trials did not run'),
  error: z.string().nullable(),
});
export type SweepProgress = z.infer<typeof SweepProgressSchema>;

export const SweepResultSchema = z.object({
  status: z.enum(['completed', 'cancelled', 'failed']),
  progress: SweepProgressSchema,
});
export type SweepResult = z.infer<typeof SweepResultSchema>;

// ---- population-based training ----------------------------------------------------------------


export const PbtRoundOrderSchema = z.object({
  round: z.number().int().nonnegative(),
  end_step: z.number().int().positive(),
  params: z.record(z.string(), z.union([z.number(), z.string(), z.boolean()])),
  /** Copy this member's checkpoint (taken at the end of the previous round) before training. */
  exploit_from: z.number().int().nonnegative().nullable(),
});
export type PbtRoundOrder = z.infer<typeof PbtRoundOrderSchema>;

export const PbtMemberRoundInputSchema = z.object({
  sweep_id: z.string(),
  member: z.number().int().nonnegative(),
  config: SweepWorkflowInputSchema.shape.config,
  organization_id: z.string(),
  requested_by: z.string(),
  heartbeat_timeout: duration,
  order: PbtRoundOrderSchema,
});
export type PbtMemberRoundInput = z.infer<typeof PbtMemberRoundInputSchema>;

export const PbtRoundResultSchema = z.object({
  member: z.number().int(),
  round: z.number().int(),
  step: z.number().int(),
  value: z.number().nullable(),
  checkpoint: z.string().nullable().describe('URI of the member checkpoint at the end of the round: checkpoints/{org}/{member run}/{step}/ in the object store'),
  gpu_seconds: z.number().nonnegative(),
});
export type PbtRoundResult = z.infer<typeof PbtRoundResultSchema>;

export const HpoStartResponseSchema = z.object({ id: z.string(), workflow_id: z.string(), strategy: StrategySchema, temporal_ui_url: z.string().nullable() });
export const TrialsQuerySchema = z.strictObject({
  top: z.coerce.number().int().positive().max(100_000).optional().describe('only the best N completed trials, best first'),
  state: z.enum(TRIAL_STATES).optional(),
  order: z.enum(['best', 'number']).default('best').describe('best: completed trials best first on the first objective, the others after them by number; number: by trial number'),
  limit: z.coerce.number().int().min(1).max(1000).optional().describe('a page of this many trials, at offset (total and next_offset say how many there are); absent: every trial'),
  offset: z.coerce.number().int().min(0).default(0).describe('the page at this position of the order'),
});
export type TrialsQuery = z.infer<typeof TrialsQuerySchema>;

/** GET /v1/hpo/{id}/trial-points: what the sweep's charts draw of every trial, without its metrics or curves. */
export const TrialPointsSchema = z.object({
  sweep_id: z.string(),
  points: z.array(
    z.object({
      number: z.number().int(),
      status: z.enum(TRIAL_STATES),
      params: z.record(z.string(), z.union([z.number(), z.string(), z.boolean(), z.null()])),
      objective_values: z.array(z.number()).nullable(),
      ended_at: z.string().nullable(),
    }),
  ),
});
export type TrialPoints = z.infer<typeof TrialPointsSchema>;

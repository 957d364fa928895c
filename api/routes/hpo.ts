// /v1/hpo: start a hyperparameter sweep, follow it (status and best trial), list its trials, cancel it.
import { randomUUID } from 'node:crypto';
import { Hono, type Context } from 'hono';
import { WorkflowNotFoundError, type WorkflowHandle } from '@temporalio/client';
import { TypedSearchAttributes } from '@temporalio/common';
import type { ApiDeps, AppEnv } from '../deps.js';
import {
  HPO_TASK_QUEUE,
  SweepConfigSchema,
  TrialsQuerySchema,
  hpoWorkflowId,
  type TrialPoints,
  objectivesOf,
  type SweepConfig,
  type SweepProgress,
  type SweepWorkflowInput,
} from '../../contracts/hpo.js';
import { ORGANIZATION_KEY } from '../../contracts/search-attributes.js';
import type { hpoSweepWorkflow } from '../../workflows/hpo.js';
import { sweepProgressQuery } from '../../contracts/hpo-messages.js';
import { findDatasetVersion } from '../../db/repo/datasets.js';
import { createSweep, getSweep, lineageOf, listSweeps, sweepTotals, trialCounts, trialPoints, trialsPage, type TrialRow } from '../../db/repo/hpo.js';
import { artifactRootUri } from '../../lib/object-store.js';
import { auditedChange } from '../audit.js';
import { BaseModelError, resolveBaseModel } from '../../lib/base-models.js';
import { checkBaseModel } from '../input-policy.js';
import { ApiError, invalid, notFound } from '../errors.js';
import { jsonBody, queryParams } from '../validate.js';
import { requireOwnerOrAdmin, requireRole } from '../auth.js';

/** Rejects a sweep that cannot run (strategy, concurrency cap, base model, dataset) before anything starts. */
export async function checkSweep(deps: ApiDeps, req: SweepConfig, organizationId: string): Promise<SweepWorkflowInput['config']> {
  const strategy = req.strategy ?? deps.config.hpo.default_strategy;
  const resolved = SweepConfigSchema.safeParse({ ...req, strategy });
  if (!resolved.success) throw invalid(`invalid request body: ${resolved.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  const cap = deps.config.hpo.max_concurrent_trials;
  if (req.max_concurrent_trials > cap) throw invalid(`max_concurrent_trials: ${req.max_concurrent_trials} exceeds this server's hpo.max_concurrent_trials (${cap})`);
  const base = req.base_config;
  if (base.method === 'lora') {
    try {
      resolveBaseModel(base.model, deps.config, deps.bootstrap);
    } catch (err) {
      if (err instanceof BaseModelError) throw invalid(`base_config.model: ${err.message}`);
      throw err;
    }
    if (!(await findDatasetVersion(deps.db, organizationId, base.dataset, base.dataset_version)))
      throw invalid(`base_config.dataset: "${base.dataset}" has no version ${base.dataset_version}`);
  }
  return { ...resolved.data, strategy };
}

const trialView = (t: TrialRow) => ({
  number: t.number,
  status: t.status,
  run_id: t.runId,
  params: t.params,
  objective_values: t.objectiveValues,
  metrics: t.metrics,
  steps: t.steps,
  gpu_hours: t.gpuSeconds / 3600,
  reason: t.reason,
  started_at: t.startedAt.toISOString(),
  ended_at: t.endedAt?.toISOString() ?? null,
});

export function hpoRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();
  const uiLink = (id: string): string | null =>
    deps.temporalUiUrl ? `${deps.temporalUiUrl}/namespaces/${deps.config.temporal.namespace}/workflows/${encodeURIComponent(hpoWorkflowId(id))}` : null;

  async function owned(c: Context<AppEnv>, id: string) {
    const row = await getSweep(deps.db, c.get('principal').organizationId, id);
    if (!row) throw notFound(`sweep ${id}`);
    return row;
  }

  async function liveProgress(handle: WorkflowHandle): Promise<{ status: string; progress: SweepProgress | null }> {
    try {
      const d = await handle.describe();
      const progress = await handle.query(sweepProgressQuery).catch(() => null);
      return { status: d.status.name, progress };
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return { status: 'UNKNOWN', progress: null };
      throw err;
    }
  }

  app.post('/', async (c) => {
    const principal = requireRole(c, 'developer');
    const req = await jsonBody(c, SweepConfigSchema);
    if (req.base_config.method === 'lora') checkBaseModel(deps.config, principal, 'base_config.model', req.base_config.model);
    const config = await checkSweep(deps, req, principal.organizationId);
    const id = randomUUID();
    const input: SweepWorkflowInput = {
      sweep_id: id,
      config,
      organization_id: principal.organizationId,
      requested_by: principal.subject,
      runtime: { heartbeat_timeout: deps.config.temporal.heartbeat_timeout, continue_as_new_after_events: 8000 },
    };
    // The sweep's row, its job.submitted event and the audit row commit only once Temporal has accepted the
    // start (the transaction's last step): a refused start leaves no sweep marked running that nothing runs.
    // Should the commit fail after the start, the workflow finds no sweep row and fails its first activity.
    await auditedChange(c, deps, { action: 'hpo.create', target: id, detail: { experiment: config.experiment, strategy: config.strategy } }, async (tx) => {
      await createSweep(tx, input, artifactRootUri(deps));
      await deps.temporal.workflow.start<typeof hpoSweepWorkflow>(config.strategy === 'pbt' ? 'pbtWorkflow' : 'hpoSweepWorkflow', {
        taskQueue: HPO_TASK_QUEUE,
        workflowId: hpoWorkflowId(id),
        args: [input],
        memo: { organization_id: principal.organizationId },
        typedSearchAttributes: new TypedSearchAttributes([{ key: ORGANIZATION_KEY, value: principal.organizationId }]),
      });
    });
    return c.json({ id, workflow_id: hpoWorkflowId(id), strategy: config.strategy, temporal_ui_url: uiLink(id) }, 201);
  });

  app.get('/', async (c) => {
    const principal = requireRole(c, 'viewer');
    const rows = await listSweeps(deps.db, principal.organizationId, 100);
    return c.json({
      sweeps: rows.map((r) => ({ id: r.id, experiment: (r.config as SweepConfig).experiment, strategy: r.strategy, status: r.status, best_trial: r.bestTrial, created_at: r.createdAt.toISOString() })),
    });
  });

  app.get('/:id', async (c) => {
    requireRole(c, 'viewer');
    const row = await owned(c, c.req.param('id'));
    const config = row.config as SweepConfig;
    const objectives = objectivesOf(config);
    // The best trial and the counts by status are read in the catalogue: a sweep of thousands of trials is not loaded.
    const [top, byStatus, totals] = await Promise.all([
      trialsPage(deps.db, row.id, { order: 'best', direction: objectives[0]!.direction, limit: 1, offset: 0 }),
      trialCounts(deps.db, row.id),
      sweepTotals(deps.db, row.id),
    ]);
    const best = top.rows[0]?.status === 'completed' ? top.rows[0] : null;
    const { status, progress } = await liveProgress(deps.temporal.workflow.getHandle(hpoWorkflowId(row.id)));
    return c.json({
      id: row.id,
      workflow_id: hpoWorkflowId(row.id),
      experiment_id: row.experimentId,
      strategy: row.strategy,
      status: row.status,
      workflow_status: status,
      objectives,
      best_trial: best ? trialView(best) : null,
      pareto_front: progress?.pareto_front ?? [],
      trials: { total: totals.trials, by_status: byStatus },
      trial_steps: totals.steps,
      trial_steps_saved: progress?.trial_steps_saved ?? null,
      gpu_hours: totals.gpuSeconds / 3600,
      progress,
      config,
      temporal_ui_url: uiLink(row.id),
    });
  });

  /**
   * A sweep's trials in an order (best first by default), all of them or a page at `offset` with the total: the
   * console's trials table fetches the page its scrolled view sits at. `top` keeps the best N completed trials.
   */
  app.get('/:id/trials', async (c) => {
    requireRole(c, 'viewer');
    const row = await owned(c, c.req.param('id'));
    const q = queryParams(c, TrialsQuerySchema);
    if (q.top !== undefined && q.order !== 'best') throw invalid('order: top lists the best trials best first; leave order out, or top');
    if (q.top !== undefined && q.state !== undefined && q.state !== 'completed') throw invalid(`state: top lists completed trials, not ${q.state} ones`);
    const config = row.config as SweepConfig;
    const page = await trialsPage(deps.db, row.id, {
      order: q.order,
      direction: objectivesOf(config)[0]!.direction,
      state: q.top !== undefined ? 'completed' : q.state,
      // top: the first N of the completed trials, paged within them
      limit: q.top === undefined ? q.limit : Math.max(0, Math.min(q.limit ?? q.top, q.top - q.offset)),
      offset: q.offset,
    });
    const total = q.top === undefined ? page.total : Math.min(page.total, q.top);
    const end = q.offset + page.rows.length;
    return c.json({ sweep_id: row.id, objectives: objectivesOf(config), trials: page.rows.map(trialView), total, next_offset: q.limit !== undefined && end < total ? end : null });
  });

  /** What the sweep's charts draw, for every trial: its number, status, parameters, objectives and end; no metrics or curves. */
  app.get('/:id/trial-points', async (c) => {
    requireRole(c, 'viewer');
    const row = await owned(c, c.req.param('id'));
    const points = await trialPoints(deps.db, row.id);
    const body: TrialPoints = {
      sweep_id: row.id,
      points: points.map((t) => ({
        number: t.number,
        status: t.status,
        params: t.params as TrialPoints['points'][number]['params'],
        objective_values: (t.objectiveValues as number[] | null) ?? null,
        ended_at: t.endedAt?.toISOString() ?? null,
      })),
    };
    return c.json(body);
  });

  /** Population-based training: what every member did in every round, and whose checkpoint it started from. */
  app.get('/:id/lineage', async (c) => {
    requireRole(c, 'viewer');
    const row = await owned(c, c.req.param('id'));
    const rows = await lineageOf(deps.db, row.id);
    return c.json({
      sweep_id: row.id,
      lineage: rows.map((r) => ({ member: r.member, round: r.round, action: r.action, parent_member: r.parentMember, params: r.params, step: r.step, value: r.value, checkpoint: r.checkpoint })),
    });
  });

  app.post('/:id/cancel', async (c) => {
    requireRole(c, 'developer');
    const row = await owned(c, c.req.param('id'));
    requireOwnerOrAdmin(c, row.createdBy, `sweep ${row.id}`);
    if (row.status !== 'running') throw new ApiError('INVALID_STATE', `sweep ${row.id} is ${row.status}`);
    // A Temporal call with no catalogue row of its own (the workflow records the sweep's end): the audit row
    // commits only if the cancellation was accepted.
    await auditedChange(c, deps, { action: 'hpo.cancel', target: row.id }, () => deps.temporal.workflow.getHandle(hpoWorkflowId(row.id)).cancel());
    return c.json({ id: row.id, cancel_requested: true });
  });

  return app;
}

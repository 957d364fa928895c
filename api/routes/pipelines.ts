// /v1/pipelines: start a fine-tuning pipeline, follow it, and decide its promotion.
import { MULTI_NODE_METHODS, MULTI_NODE_REFUSALS } from '../../contracts/trainer-job.js';
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Hono, type Context } from 'hono';
import { WorkflowNotFoundError, WorkflowUpdateFailedError, type WorkflowHandle } from '@temporalio/client';
import { TypedSearchAttributes } from '@temporalio/common';
import type { ApiDeps, AppEnv } from '../deps.js';
import {
  ApprovalRequestSchema,
  PIPELINE_TASK_QUEUE,
  PipelineInputSchema,
  pipelineWorkflowId,
  type PipelineInput,
  type PipelineWorkflowInput,
  type PipelineResult,
} from '../../contracts/pipeline.js';
import { MODEL_NAME_KEY, ORGANIZATION_KEY, STAGE_KEY } from '../../contracts/search-attributes.js';
import type { fineTunePipelineWorkflow } from '../../workflows/pipeline.js';
import { pipelineProgressQuery, promotionDecisionUpdate } from '../../contracts/pipeline-messages.js';
import { findDatasetVersion } from '../../db/repo/datasets.js';
import { getPipelineRow, listPipelines, upsertPipeline } from '../../db/repo/pipelines.js';
import type { Principal } from '../../db/repo/auth.js';
import { BaseModelError, resolveBaseModel } from '../../lib/base-models.js';
import { ApiError, invalid, notFound } from '../errors.js';
import { auditedChange } from '../audit.js';
import { jsonBody, queryParams } from '../validate.js';
import { DryRunQuerySchema, type PipelineDryRun } from '../../contracts/cost.js';
import { requireOwnerOrAdmin, requireRole } from '../auth.js';
import { checkPipelinePolicy } from '../input-policy.js';
import { budgetOf, checkBudget, estimatePipeline } from '../cost.js';

/** The workflow input: the request plus the caller and the server settings a workflow cannot read. */
export function workflowInput(deps: ApiDeps, req: PipelineInput, principal: Principal): PipelineWorkflowInput {
  return {
    ...req,
    organization_id: principal.organizationId,
    requested_by: principal.subject,
    runtime: {
      heartbeat_timeout: deps.config.temporal.heartbeat_timeout,
      approval_timeout: deps.config.promotion.approval_timeout,
      reload_deadline: deps.config.promotion.webhook_deadline,
    },
  };
}

/** Rejects a pipeline that cannot start (missing base model, dataset or file) before any job runs. */
export async function checkPipelineInput(deps: ApiDeps, req: PipelineInput, principal: Principal): Promise<void> {
  const organizationId = principal.organizationId;
  checkPipelinePolicy(deps.config, principal, req);
  try {
    resolveBaseModel(req.base_model, deps.config, deps.bootstrap);
  } catch (err) {
    if (err instanceof BaseModelError) throw invalid(`base_model: ${err.message}`);
    throw err;
  }
  checkHardware(deps, req);
  const ds = req.dataset;
  if ('source_uri' in ds) {
    if (ds.source_uri.startsWith('file://') && !existsSync(fileURLToPath(ds.source_uri))) throw invalid(`dataset.source_uri: ${ds.source_uri} does not exist`);
    if (!/^(file|s3):\/\//.test(ds.source_uri)) throw invalid(`dataset.source_uri: expected file:// or s3://, got ${ds.source_uri}`);
  } else if (!(await findDatasetVersion(deps.db, organizationId, ds.name, ds.version))) {
    throw invalid(`dataset: "${ds.name}" has no version ${ds.version}`);
  }
}

/** A job no executor could run: refused here, before a workflow or a pod exists. */
function checkHardware(deps: ApiDeps, req: PipelineInput): void {
  const hw = req.hardware;
  if (!hw || hw.nodes <= 1) return;
  if (deps.config.scheduler.executor !== 'kubernetes') throw invalid(`hardware.nodes: ${hw.nodes} machines need scheduler.executor: kubernetes (the local executor runs on this machine only)`);
  if (!(MULTI_NODE_METHODS as readonly string[]).includes(req.method))
    throw invalid(`hardware.nodes: ${hw.nodes}: method "${req.method}" cannot be sharded across machines (${MULTI_NODE_REFUSALS[req.method] ?? 'not verified'}); use ${MULTI_NODE_METHODS.join(' or ')}, or one node`);
}

export function pipelineRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();
  const uiLink = (id: string): string | null =>
    deps.temporalUiUrl ? `${deps.temporalUiUrl}/namespaces/${deps.config.temporal.namespace}/workflows/${encodeURIComponent(pipelineWorkflowId(id))}` : null;

  /** The caller's pipeline, or 404 (another organization's pipeline does not exist for them). */
  async function ownedHandle(c: Context<AppEnv>, id: string): Promise<{ handle: WorkflowHandle; status: string }> {
    const principal = c.get('principal');
    const handle = deps.temporal.workflow.getHandle(pipelineWorkflowId(id));
    try {
      const d = await handle.describe();
      if (d.memo?.organization_id !== principal.organizationId) throw notFound(`pipeline ${id}`);
      return { handle, status: d.status.name };
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) throw notFound(`pipeline ${id}`);
      throw err;
    }
  }

  app.post('/', async (c) => {
    const principal = requireRole(c, 'developer');
    const req = await jsonBody(c, PipelineInputSchema);
    await checkPipelineInput(deps, req, principal);
    const dryRun = queryParams(c, DryRunQuerySchema).dry_run === 'true';
    const budget = await budgetOf(deps, principal.organizationId);
    // The estimate runs the trainer's data code (seconds): only when asked for, or when there is a budget to check.
    if (dryRun || budget) {
      const estimate = await estimatePipeline(deps, req, principal.organizationId);
      if (dryRun) return c.json({ dry_run: true, estimate, budget, fits_budget: budget ? estimate.usd <= budget.left_usd : null } satisfies PipelineDryRun);
      checkBudget(principal.organizationId, estimate, budget);
    }
    const id = randomUUID();
    const input = workflowInput(deps, req, principal);
    // The pipeline's catalogue row (and its job.submitted event) and the audit row commit only once Temporal has
    // accepted the start, which is the transaction's last step: a refused start leaves no row claiming a pipeline.
    // Should the commit fail after the start, the workflow's recordPipeline activity writes the same row (an
    // upsert), so the pipeline is still listed; only its audit row would be missing.
    await auditedChange(c, deps, { action: 'pipeline.start', target: id, detail: { model_name: req.model_name, method: req.method } }, async (tx) => {
      await upsertPipeline(tx, { id, organizationId: principal.organizationId, modelName: req.model_name, datasetName: req.dataset.name, stage: 'queued', input, createdBy: principal.subject });
      await deps.temporal.workflow.start<typeof fineTunePipelineWorkflow>('fineTunePipelineWorkflow', {
        taskQueue: PIPELINE_TASK_QUEUE,
        workflowId: pipelineWorkflowId(id),
        args: [input],
        memo: { organization_id: principal.organizationId },
        typedSearchAttributes: new TypedSearchAttributes([
          { key: ORGANIZATION_KEY, value: principal.organizationId },
          { key: MODEL_NAME_KEY, value: req.model_name },
          { key: STAGE_KEY, value: 'queued' },
        ]),
      });
    });
    return c.json({ id, workflow_id: pipelineWorkflowId(id), temporal_ui_url: uiLink(id) }, 201);
  });

  app.get('/', async (c) => {
    const principal = requireRole(c, 'viewer');
    const rows = await listPipelines(deps.db, principal.organizationId, 100);
    return c.json({
      pipelines: rows.map((r) => ({ id: r.id, model_name: r.modelName, dataset_name: r.datasetName, stage: r.stage, outcome: r.outcome, created_at: r.createdAt.toISOString() })),
    });
  });

  app.get('/:id', async (c) => {
    requireRole(c, 'viewer');
    const id = c.req.param('id');
    const { handle, status } = await ownedHandle(c, id);
    const progress = await handle.query(pipelineProgressQuery);
    const result = status === 'COMPLETED' ? ((await handle.result()) as PipelineResult) : null;
    return c.json({ id, workflow_id: pipelineWorkflowId(id), status, progress, result, temporal_ui_url: uiLink(id) });
  });

  /** Cancels a running pipeline: its job gets SIGTERM (an emergency checkpoint) and is deleted; the run ends KILLED. */
  app.post('/:id/cancel', async (c) => {
    const principal = requireRole(c, 'developer');
    const id = c.req.param('id');
    const { handle, status } = await ownedHandle(c, id);
    requireOwnerOrAdmin(c, (await getPipelineRow(deps.db, principal.organizationId, id))?.createdBy ?? null, `pipeline ${id}`);
    if (status !== 'RUNNING') throw new ApiError('INVALID_STATE', `pipeline ${id} is not running (${status.toLowerCase()})`);
    // Cancelling is a Temporal call with no catalogue row of its own: the audit row is committed only if the
    // request was accepted (the workflow records the stage it ends in).
    await auditedChange(c, deps, { action: 'pipeline.cancel', target: id }, () => handle.cancel());
    return c.json({ id, status: 'CANCEL_REQUESTED' }, 202);
  });

  for (const decision of ['approve', 'reject'] as const) {
    app.post(`/:id/${decision}`, async (c) => {
      const principal = requireRole(c, 'approver');
      const id = c.req.param('id');
      const body = await jsonBody(c, ApprovalRequestSchema);
      const { handle } = await ownedHandle(c, id);
      // The approver is who authenticated, never a name from the request.
      const approver = principal.subject;
      try {
        // The decision is a workflow update: the audit row commits only if the workflow accepted it (its
        // validator refuses a second decision or a pipeline not awaiting approval). The update handler does no
        // I/O, so holding the transaction across it waits on no catalogue write of the worker.
        const progress = await auditedChange(c, deps, { action: `pipeline.${decision}`, target: id, detail: { approver, reason: body.reason } }, () =>
          handle.executeUpdate(promotionDecisionUpdate, { args: [{ decision, approver, reason: body.reason }] }),
        );
        return c.json({ id, decision, approver, progress });
      } catch (err) {
        if (err instanceof WorkflowUpdateFailedError) throw new ApiError('INVALID_STATE', (err.cause as Error | undefined)?.message ?? err.message);
        throw err;
      }
    });
  }

  return app;
}

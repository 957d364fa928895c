// POST /v1/datasets/{id}/derive: a new version made from this one by prepare-dataset's operations, as a job
// (datasetPreparationWorkflow). The answer is 202 with the job and the id the version will have; the version is
// recorded only once its files are stored, so GET /v1/datasets/{dataset_id} answers 404 until then and the job
// (GET /v1/jobs/{job_id}, type data_preparation, parent dataset:<id>) says how it goes, or why it failed.
import { randomUUID } from 'node:crypto';
import type { Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../../deps.js';
import { DeriveRequestSchema, datasetPreparationWorkflowId, type DatasetPreparationInput } from '../../../contracts/data-prep.js';
import type { DeriveAccepted } from '../../../contracts/datasets.js';
import { PIPELINE_TASK_QUEUE } from '../../../contracts/pipeline.js';
import { deriveTarget, preparationJob } from '../../../datasets/derive.js';
import { recordChildJob } from '../../../db/repo/child-jobs.js';
import { getDataset } from '../../../db/repo/datasets.js';
import { BaseModelError, DEFAULT_BASE_MODEL, resolveBaseModel } from '../../../lib/base-models.js';
import { deterministicUuid } from '../../../lib/ids.js';
import type { datasetPreparationWorkflow } from '../../../workflows/dataset-prep.js';
import { auditedChange } from '../../audit.js';
import { requireRole } from '../../auth.js';
import { invalid, notFound } from '../../errors.js';
import { checkBaseModel } from '../../input-policy.js';
import { jsonBody } from '../../validate.js';

export function deriveRoute(app: Hono<AppEnv>, deps: ApiDeps): void {
  app.post('/:id/derive', async (c) => {
    const principal = requireRole(c, 'developer');
    const parent = await getDataset(deps.db, principal.organizationId, c.req.param('id'));
    if (!parent) throw notFound(`dataset ${c.req.param('id')}`);
    const req = await jsonBody(c, DeriveRequestSchema);
    const target = deriveTarget(parent, req);
    const tokenizer = target.tokenizer ?? DEFAULT_BASE_MODEL;
    if (req.tokenizer !== undefined) checkBaseModel(deps.config, principal, 'tokenizer', req.tokenizer);
    try {
      resolveBaseModel(tokenizer, deps.config, deps.bootstrap);
    } catch (err) {
      if (err instanceof BaseModelError) throw invalid(`tokenizer: ${err.message}`);
      throw err;
    }
    const datasetId = randomUUID();
    const input: DatasetPreparationInput = {
      organization_id: principal.organizationId,
      requested_by: principal.subject,
      job_id: deterministicUuid(`dataset-preparation:${datasetId}`),
      parent_id: parent.id,
      dataset_id: datasetId,
      name: target.name,
      tokenizer,
      request: req,
      heartbeat_timeout: deps.config.temporal.heartbeat_timeout,
    };
    const workflowId = datasetPreparationWorkflowId(datasetId);
    // The job row is listed from the start (queued); should the workflow not start, nothing commits.
    await auditedChange(c, deps, { action: 'dataset.derive', target: parent.id, detail: { dataset_id: datasetId, name: target.name, operations: req.operations.map((o) => o.op) } }, async (tx) => {
      await recordChildJob(tx, preparationJob(input), 'queued');
      await deps.temporal.workflow.start<typeof datasetPreparationWorkflow>('datasetPreparationWorkflow', {
        taskQueue: PIPELINE_TASK_QUEUE,
        workflowId,
        args: [input],
        memo: { organization_id: principal.organizationId },
      });
    });
    return c.json({ job_id: input.job_id, dataset_id: datasetId, workflow_id: workflowId } satisfies DeriveAccepted, 202);
  });
}

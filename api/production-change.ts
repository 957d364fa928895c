// Serving follows every change of the production version, not only a pipeline's promotion: a manual stage change
// (PATCH, MLflow transition-stage), the `production` alias and a rollback start the reload hook's workflow
// (workflows/reload.ts) once the request's transaction committed (api/audit.ts afterCommit). Nothing starts when promotion.webhook_url is not set.
import { randomUUID } from 'node:crypto';
import type { ApiDeps } from './deps.js';
import { afterCommit } from './audit.js';
import type { ReloadNotice } from '../activities/reload.js';
import type { Artifact } from '../contracts/pipeline.js';
import { PIPELINE_TASK_QUEUE } from '../contracts/pipeline.js';
import type { productionReloadWorkflow } from '../workflows/reload.js';
import type { ModelVersionRow } from '../db/repo/models.js';

/** The alias that names what is served, like the production stage. */
export const PRODUCTION_ALIAS = 'production';

/** The workflow ID of one manual production change's hook. */
export const productionReloadWorkflowId = (eventId: string): string => `reload:${eventId}`;

/**
 * Starts the hook for `version`, now in production. `replaced`: the versions it took over from (the archived
 * production version, or the alias's previous target); a version older than one of them is a rollback.
 * Returns the hook's event id, or null when no hook is configured.
 */
export async function notifyProductionChange(
  deps: ApiDeps,
  p: { organizationId: string; modelName: string; version: ModelVersionRow; replaced: number[]; actor: string; at?: Date },
): Promise<string | null> {
  const { webhook_url: url, webhook_deadline: deadline } = deps.config.promotion;
  if (!url) return null;
  const eventId = randomUUID();
  const notice: ReloadNotice = {
    organizationId: p.organizationId,
    pipelineId: null,
    actor: p.actor,
    rollback: p.replaced.some((v) => v > p.version.version),
    modelName: p.modelName,
    version: p.version.version,
    archived: p.replaced,
    artifacts: p.version.artifacts as Record<string, Artifact>,
    promotedAt: (p.at ?? p.version.stageChangedAt).toISOString(),
    eventId,
  };
  // Serving must read the new production version when it is told: the request's transaction commits first.
  await afterCommit(async () => {
    await deps.temporal.workflow.start<typeof productionReloadWorkflow>('productionReloadWorkflow', {
      taskQueue: PIPELINE_TASK_QUEUE,
      workflowId: productionReloadWorkflowId(eventId),
      args: [{ notice, deadline }],
      memo: { organization_id: p.organizationId },
    });
  });
  return eventId;
}

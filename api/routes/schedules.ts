// /v1/schedules: retraining on a Temporal Schedule that starts the pipeline on the latest dataset version.
import { randomUUID } from 'node:crypto';
import { Hono } from 'hono';
import { ScheduleNotFoundError } from '@temporalio/client';
import { TypedSearchAttributes } from '@temporalio/common';
import type { ApiDeps, AppEnv } from '../deps.js';
import { PIPELINE_TASK_QUEUE, ScheduleCreateSchema, scheduleId } from '../../contracts/pipeline.js';
import { MODEL_NAME_KEY, ORGANIZATION_KEY, STAGE_KEY } from '../../contracts/search-attributes.js';
import { deleteSchedule, findSchedule, insertSchedule, listSchedules, type ScheduleRow } from '../../db/repo/pipelines.js';
import { ApiError, invalid, notFound } from '../errors.js';
import { durationMs } from '../../lib/config.js';
import { shortestCronGapMinutes } from '../../lib/cron-gap.js';
import { jsonBody } from '../validate.js';
import { requireRole } from '../auth.js';
import { auditedChange } from '../audit.js';
import { checkPipelineInput, workflowInput } from './pipelines.js';

export function scheduleRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();

  async function view(row: ScheduleRow) {
    const handle = deps.temporal.schedule.getHandle(scheduleId(row.id));
    const d = await handle.describe().catch((err: unknown) => (err instanceof ScheduleNotFoundError ? null : Promise.reject(err)));
    return {
      id: row.id,
      name: row.name,
      spec: row.spec,
      pipeline: row.pipeline,
      created_at: row.createdAt.toISOString(),
      paused: d?.state.paused ?? null,
      next_action_times: d?.info.nextActionTimes.slice(0, 3).map((t) => t.toISOString()) ?? [],
      recent_actions: d?.info.recentActions.map((a) => ({ at: a.takenAt.toISOString(), workflow_id: 'workflow' in a.action ? a.action.workflow.workflowId : null })) ?? [],
    };
  }

  async function owned(orgId: string, idOrName: string): Promise<ScheduleRow> {
    const row = await findSchedule(deps.db, orgId, idOrName);
    if (!row) throw notFound(`schedule ${idOrName}`);
    return row;
  }

  app.post('/', async (c) => {
    const principal = requireRole(c, 'developer');
    const body = await jsonBody(c, ScheduleCreateSchema);
    await checkPipelineInput(deps, body.pipeline, principal);
    checkScheduleInterval(deps, body);
    if (await findSchedule(deps.db, principal.organizationId, body.name)) throw new ApiError('RESOURCE_ALREADY_EXISTS', `schedule "${body.name}" already exists`);
    const id = randomUUID();
    const spec = body.every ? { every: body.every } : { cron: body.cron! };
    // The schedule's row and the audit row commit only once Temporal has created the schedule (the
    // transaction's last step). Should the commit fail after that, the schedule is deleted again: a schedule
    // nobody can list must not keep starting pipelines.
    let created = false;
    const row = await auditedChange(c, deps, { action: 'schedule.create', target: id, detail: { name: body.name, ...spec } }, async (tx) => {
      const inserted = await insertSchedule(tx, { id, organizationId: principal.organizationId, name: body.name, spec, pipeline: body.pipeline, createdBy: principal.subject });
      await deps.temporal.schedule.create({
        scheduleId: scheduleId(id),
        spec: body.every ? { intervals: [{ every: body.every as `${number}${'s' | 'm' | 'h' | 'd'}` }] } : { cronExpressions: [body.cron!] },
        action: {
          type: 'startWorkflow',
          workflowType: 'fineTunePipelineWorkflow',
          taskQueue: PIPELINE_TASK_QUEUE,
          // Temporal appends the scheduled time, so each run gets its own `pipeline:sched-...` ID.
          workflowId: `pipeline:sched-${id}`,
          args: [workflowInput(deps, body.pipeline, principal)],
          memo: { organization_id: principal.organizationId, schedule_id: id },
          typedSearchAttributes: new TypedSearchAttributes([
            { key: ORGANIZATION_KEY, value: principal.organizationId },
            { key: MODEL_NAME_KEY, value: body.pipeline.model_name },
            { key: STAGE_KEY, value: 'queued' },
          ]),
        },
        state: { paused: body.paused, note: `retraining ${body.pipeline.model_name} on dataset ${body.pipeline.dataset.name}` },
      });
      created = true;
      return inserted;
    }).catch(async (err: unknown) => {
      if (created) await deps.temporal.schedule.getHandle(scheduleId(id)).delete().catch(() => undefined);
      throw err;
    });
    return c.json(await view(row), 201);
  });

  app.get('/', async (c) => {
    const principal = requireRole(c, 'viewer');
    const rows = await listSchedules(deps.db, principal.organizationId);
    return c.json({ schedules: await Promise.all(rows.map(view)) });
  });

  app.get('/:id', async (c) => {
    const principal = requireRole(c, 'viewer');
    return c.json(await view(await owned(principal.organizationId, c.req.param('id'))));
  });

  for (const action of ['pause', 'unpause'] as const) {
    app.post(`/:id/${action}`, async (c) => {
      const principal = requireRole(c, 'developer');
      const row = await owned(principal.organizationId, c.req.param('id'));
      const handle = deps.temporal.schedule.getHandle(scheduleId(row.id));
      // A Temporal call with no catalogue row: the audit row commits only if Temporal accepted it.
      await auditedChange(c, deps, { action: `schedule.${action}`, target: row.id }, () =>
        action === 'pause' ? handle.pause(`paused by ${principal.subject}`) : handle.unpause(`unpaused by ${principal.subject}`),
      );
      return c.json(await view(row));
    });
  }

  app.delete('/:id', async (c) => {
    const principal = requireRole(c, 'developer');
    const row = await owned(principal.organizationId, c.req.param('id'));
    // The row and the audit row go only once Temporal has deleted the schedule (the transaction's last step),
    // so a schedule that still fires is never missing from the catalogue.
    await auditedChange(c, deps, { action: 'schedule.delete', target: row.id, detail: { name: row.name } }, async (tx) => {
      await deleteSchedule(tx, row.id);
      await deps.temporal.schedule
        .getHandle(scheduleId(row.id))
        .delete()
        .catch((err: unknown) => {
          if (!(err instanceof ScheduleNotFoundError)) throw err;
        });
    });
    return c.json({ id: row.id, deleted: true });
  });

  return app;
}

/** A schedule may not fire more often than limits.min_schedule_interval (each run is a whole pipeline). */
function checkScheduleInterval(deps: ApiDeps, body: { every?: string | undefined; cron?: string | undefined }): void {
  const minMs = durationMs(deps.config.limits.min_schedule_interval);
  if (body.every !== undefined && durationMs(body.every) < minMs)
    throw invalid(`every: ${body.every} is shorter than limits.min_schedule_interval (${deps.config.limits.min_schedule_interval})`);
  if (body.cron !== undefined) {
    let gap: number | null;
    try {
      gap = shortestCronGapMinutes(body.cron);
    } catch (err) {
      throw invalid((err as Error).message);
    }
    if (gap !== null && gap * 60_000 < minMs)
      throw invalid(`cron: "${body.cron}" fires ${gap} minute(s) apart, more often than limits.min_schedule_interval (${deps.config.limits.min_schedule_interval})`);
  }
}

// /v1/runs (spec 000): create a run, log its parameters (immutable, as in MLflow) and metrics, set its status, and
// read it back with its config, params, tags, latest metrics and artifacts; metric history paged by cursor.
// The same rows the MLflow API serves, so a run written here reads the same through either API.
import { randomUUID } from 'node:crypto';
import { and, asc, eq, sql } from 'drizzle-orm';
import { Hono } from 'hono';
import { z } from 'zod';
import type { ApiDeps, AppEnv } from '../deps.js';
import type { KeyValue } from '../../db/repo/common.js';
import { createExperiment, ensureDefaultExperiment, getExperiment, getExperimentByName, type ExperimentRow } from '../../db/repo/experiments.js';
import { logParams } from '../../db/repo/params-tags.js';
import { artifactsOf } from '../../db/repo/run-artifacts.js';
import { createRun, getRun, runDataOf, setRunStatus, updateRun, type RunRow } from '../../db/repo/runs.js';
import { MlflowDoubleSchema } from '../../contracts/mlflow.js';
import { RunCreateSchema, RunParamsSchema, RunStatusUpdateSchema, type RunView } from '../../contracts/runs.js';
import { artifactRootUri } from '../../lib/object-store.js';
import { invalid, notFound } from '../errors.js';
import { jsonBody, queryParams } from '../validate.js';
import { requireRole } from '../auth.js';
import { storedExperimentId, validateKey, wireDouble } from './mlflow/common.js';
import { keyOfUri } from './mlflow/artifact-store.js';
import { decodeHistoryToken, encodeHistoryToken } from './mlflow/runs.js';
import { artifactObjects } from '../../db/schema/index.js';
import { logMetrics, metricHistory } from '../../db/repo/metrics.js';

export const MetricPointSchema = z.strictObject({
  key: z.string().min(1).max(250),
  // NaN and infinities as MLflow writes them: "NaN", "Infinity", "-Infinity".
  value: MlflowDoubleSchema,
  step: z.number().int().nonnegative().default(0),
  timestamp: z.number().int().nonnegative().optional(),
});
const LogMetricsSchema = z.strictObject({ metrics: z.array(MetricPointSchema).min(1).max(1000) });
const HistoryQuerySchema = z.strictObject({
  key: z.string().min(1),
  limit: z.coerce.number().int().min(1).max(25_000).default(1000),
  page_token: z.string().optional(),
});

/** Status names of both vocabularies, as stored. */
const STORED_STATUS = {
  RUNNING: 'running',
  FINISHED: 'completed',
  FAILED: 'failed',
  KILLED: 'cancelled',
  running: 'running',
  completed: 'completed',
  failed: 'failed',
  cancelled: 'cancelled',
} as const satisfies Record<string, RunRow['status']>;

/** Postgres text cannot hold NUL: refuse it with the field's name rather than fail in the database. */
function refuseNul(fields: Record<string, string | undefined>): void {
  for (const [path, value] of Object.entries(fields))
    if (value?.includes('\0')) throw invalid(`${path}: strings may not contain NUL (\\u0000) characters`);
}

function checkEntries(what: 'params' | 'tags', entries: Record<string, string>): KeyValue[] {
  return Object.entries(entries).map(([key, value]) => {
    validateKey(key, `${what}.${key}`);
    refuseNul({ [`${what}.${key}`]: key + value });
    return { key, value };
  });
}

function conflictMessage(runId: string, conflicts: { key: string; old: string; new: string }[]): string {
  const listed = conflicts.map((c) => `'${c.key}' (logged '${c.old}', now '${c.new}')`).join(', ');
  return `params.${conflicts[0]!.key}: parameters are immutable and run ${runId} already has a different value for ${listed}`;
}

async function experimentFor(deps: ApiDeps, organizationId: string, body: { experiment_id?: string; experiment_name?: string }): Promise<ExperimentRow> {
  const db = deps.db;
  let exp: ExperimentRow | null;
  if (body.experiment_name) {
    exp = await getExperimentByName(db, organizationId, body.experiment_name);
    if (!exp) {
      const id = randomUUID().replaceAll('-', '');
      const artifactLocation = `${artifactRootUri(deps)}/experiments/${id}`;
      // null: another request created it first; either way the name now exists.
      await createExperiment(db, { id, organizationId, name: body.experiment_name, artifactLocation, tags: [] });
      exp = await getExperimentByName(db, organizationId, body.experiment_name);
    }
  } else {
    const wire = body.experiment_id ?? '0';
    if (wire === '0') await ensureDefaultExperiment(db, organizationId, artifactRootUri(deps));
    exp = await getExperiment(db, organizationId, storedExperimentId(wire, organizationId));
    if (!exp) throw notFound(`experiment_id: experiment ${wire}`);
  }
  if (exp!.lifecycleStage !== 'active') throw invalid(`experiment "${exp!.name}" is deleted; restore it or choose another`);
  return exp!;
}

export function runRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();
  const db = deps.db;

  /** Files uploaded under the run's artifact root (POST /v1/runs/{id}/artifacts, the MLflow artifact proxy). */
  async function uploadedArtifacts(run: RunRow): Promise<RunView['artifacts']> {
    const root = keyOfUri(deps, run.artifactUri);
    if (root === null) return [];
    const escaped = root.replace(/[\\%_]/g, (ch) => `\\${ch}`);
    const rows = await db
      .select()
      .from(artifactObjects)
      .where(and(eq(artifactObjects.organizationId, run.organizationId), sql`${artifactObjects.key} like ${`${escaped}/%`} escape '\\'`))
      .orderBy(asc(artifactObjects.key));
    return rows.map((r) => ({ key: r.key.slice(root.length + 1), path: `${artifactRootUri(deps)}/${r.key}`, size_bytes: r.sizeBytes, sha256: r.sha256, metadata: {} }));
  }

  async function view(run: RunRow): Promise<RunView> {
    const [data, recorded, uploaded] = await Promise.all([runDataOf(db, [run.id]), artifactsOf(db, run.id), uploadedArtifacts(run)]);
    const artifacts = recorded.map((a) => ({ key: a.path, path: a.uri, size_bytes: a.sizeBytes, sha256: a.sha256, metadata: a.metadata as Record<string, unknown> }));
    const known = new Set(artifacts.map((a) => a.key));
    const pairs = (rows: KeyValue[] | undefined) => Object.fromEntries((rows ?? []).map((r) => [r.key, r.value]));
    return {
      id: run.id,
      experiment_id: run.experimentId,
      name: run.name,
      status: run.status,
      lifecycle_stage: run.lifecycleStage,
      start_time: run.startTime.toISOString(),
      end_time: run.endTime?.toISOString() ?? null,
      user_id: run.userId,
      organization: run.organizationId,
      artifact_uri: run.artifactUri,
      config: run.config,
      params: pairs(data.params.get(run.id)),
      tags: pairs(data.tags.get(run.id)),
      metrics: Object.fromEntries(
        (data.metrics.get(run.id) ?? []).map((m) => [m.key, { value: wireDouble(m.value) as RunView['metrics'][string]['value'], step: m.step, timestamp: m.timestamp }]),
      ),
      artifacts: [...artifacts, ...uploaded.filter((a) => !known.has(a.key))],
    };
  }

  /** The caller's run, which must not be deleted to take writes (as in MLflow). */
  async function writableRun(organizationId: string, id: string): Promise<RunRow> {
    const run = await getRun(db, organizationId, id);
    if (!run) throw notFound(`run ${id}`);
    if (run.lifecycleStage !== 'active') throw invalid(`run ${id} is deleted and takes no more writes`);
    return run;
  }

  app.post('/', async (c) => {
    const principal = requireRole(c, 'developer');
    const body = await jsonBody(c, RunCreateSchema);
    refuseNul({ run_name: body.run_name, experiment_name: body.experiment_name, experiment_id: body.experiment_id });
    const tags = checkEntries('tags', body.tags);
    const params = checkEntries('params', body.params);
    const nameTag = body.tags['mlflow.runName'];
    if (body.run_name && nameTag !== undefined && body.run_name !== nameTag)
      throw invalid(`run_name: "${body.run_name}" differs from the mlflow.runName tag "${nameTag}"`);
    const exp = await experimentFor(deps, principal.organizationId, body);
    const id = randomUUID().replaceAll('-', '');
    const name = body.run_name ?? nameTag ?? `run-${id.slice(0, 8)}`;
    await createRun(db, {
      id,
      organizationId: principal.organizationId,
      experimentId: exp.id,
      name,
      userId: principal.subject,
      artifactUri: `${exp.artifactLocation}/${id}/artifacts`,
      startTime: body.start_time ?? Date.now(),
      tags: [...tags.filter((t) => t.key !== 'mlflow.runName'), { key: 'mlflow.runName', value: name }],
    });
    await logParams(db, id, params);
    return c.json(await view((await getRun(db, principal.organizationId, id))!), 201);
  });

  app.get('/:id', async (c) => {
    const principal = requireRole(c, 'viewer');
    const run = await getRun(db, principal.organizationId, c.req.param('id'));
    if (!run) throw notFound(`run ${c.req.param('id')}`);
    return c.json(await view(run));
  });

  app.post('/:id/params', async (c) => {
    const principal = requireRole(c, 'developer');
    const body = await jsonBody(c, RunParamsSchema);
    const params = checkEntries('params', body.params);
    const run = await writableRun(principal.organizationId, c.req.param('id'));
    const conflicts = await logParams(db, run.id, params);
    if (conflicts.length) throw invalid(conflictMessage(run.id, conflicts));
    return c.json({ params: Object.fromEntries(params.map((p) => [p.key, p.value])) });
  });

  app.patch('/:id/status', async (c) => {
    const principal = requireRole(c, 'developer');
    const body = await jsonBody(c, RunStatusUpdateSchema);
    const run = await writableRun(principal.organizationId, c.req.param('id'));
    const status = STORED_STATUS[body.status];
    if (status === 'running' && body.end_time !== undefined) throw invalid('end_time: a running run has no end time');
    // A run set running again (resumed) has no end; a finished one ends now unless the caller says when.
    if (status === 'running') await setRunStatus(db, run.id, status);
    else await updateRun(db, run.id, { status, endTime: body.end_time ?? Date.now() });
    return c.json(await view((await getRun(db, principal.organizationId, run.id))!));
  });

  app.get('/:id/metrics', async (c) => {
    const principal = requireRole(c, 'viewer');
    const q = queryParams(c, HistoryQuerySchema);
    const run = await getRun(deps.db, principal.organizationId, c.req.param('id'));
    if (!run) throw notFound(`run ${c.req.param('id')}`);
    // Pages in (step, timestamp, value) order, the table's key, so points that share a step and time are never
    // split across a page boundary and lost; NaN and infinities go out in the form they came in.
    const page = await metricHistory(deps.db, run.id, q.key, { after: decodeHistoryToken(q.page_token), limit: q.limit });
    const next = page.next ? JSON.stringify(encodeHistoryToken(page.next)) : 'null';
    return c.body(`{"metrics":[${page.json}],"next_page_token":${next}}`, 200, { 'content-type': 'application/json' });
  });

  app.post('/:id/metrics', async (c) => {
    const principal = requireRole(c, 'developer');
    const body = await jsonBody(c, LogMetricsSchema);
    body.metrics.forEach((m, i) => validateKey(m.key, `metrics.${i}.key`));
    const run = await writableRun(principal.organizationId, c.req.param('id'));
    const now = Date.now();
    await logMetrics(deps.db, run.id, body.metrics.map((m) => ({ key: m.key, value: m.value, step: m.step, timestamp: m.timestamp ?? now })));
    return c.json({});
  });

  return app;
}

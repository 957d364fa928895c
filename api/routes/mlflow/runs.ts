// MLflow runs: create, get, update, delete, restore, search, logging (metric, parameter, tag, batch) and metric
// history. Writes are idempotent: a replayed metric point, parameter or tag changes nothing.
import { artifactRootUri } from '../../../lib/object-store.js';
import { randomInt, randomUUID } from 'node:crypto';
import type { Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../../deps.js';
import { ApiError, invalid } from '../../errors.js';
import { requireRole } from '../../auth.js';
import {
  CreateRunSchema,
  DeleteTagSchema,
  GetMetricHistorySchema,
  LogBatchSchema,
  LogMetricSchema,
  LogParamSchema,
  RunIdSchema,
  SearchRunsSchema,
  SetTagSchema,
  UpdateRunSchema,
  type MlflowMetric,
} from '../../../contracts/mlflow.js';
import type { KeyValue } from '../../../db/repo/common.js';
import { ensureDefaultExperiment, getExperiment } from '../../../db/repo/experiments.js';
import { logModelMetrics, type ModelMetricInput } from '../../../db/repo/logged-models.js';
import { deleteRunTag, logParams, setRunTags } from '../../../db/repo/params-tags.js';
import { searchRuns, type RunCursor } from '../../../db/repo/run-search.js';
import { createRun, fromMlflowStatus, getRun, runDataOf, setRunLifecycle, updateRun, type RunRow } from '../../../db/repo/runs.js';
import type { Db } from '../../../db/client.js';
import { maxResults, mlflowRequest, storedExperimentId, validateKey, validateLength } from './common.js';
import { RUN_GRAMMAR, parseFilter, parseOrderBy } from './search-filter.js';
import { runInfoView, runView } from './views.js';
import { type HistoryCursor, logMetrics, logRunMetrics, metricHistory } from '../../../db/repo/metrics.js';
import { audit, type Principal } from '../../../db/repo/auth.js';
import { auditContext } from '../identity.js';

const MAX_PARAM_VALUE = 6000;
const MAX_TAG_VALUE = 8000;
const MAX_BATCH_BYTES = 1024 * 1024;

function checkBatchLimit(what: string, limit: number, n: number): void {
  if (n > limit)
    throw invalid(`A batch logging request can contain at most ${limit} ${what}. Got ${n} ${what}. Please split up ${what} across multiple requests and try again.`);
}

function checkMetric(m: MlflowMetric, path: string): void {
  validateKey(m.key, path ? `${path}.name` : 'name');
  if (m.timestamp < 0) throw invalid(`Invalid value ${m.timestamp} for parameter '${path ? `${path}.` : ''}timestamp' supplied: it must be non-negative.`);
}

function checkParam(p: KeyValue, path: string): void {
  validateKey(p.key, path ? `${path}.key` : 'key');
  validateLength(path ? `${path}.value` : 'value', p.value, MAX_PARAM_VALUE);
}

function checkTag(t: KeyValue, path: string): void {
  validateKey(t.key, path ? `${path}.key` : 'key');
  validateLength(path ? `${path}.value` : 'value', t.value, MAX_TAG_VALUE);
}

const ADJECTIVES = ['bold', 'calm', 'eager', 'gentle', 'keen', 'lucky', 'quiet', 'swift', 'wise', 'brave'];
const NOUNS = ['owl', 'fox', 'lark', 'otter', 'heron', 'lynx', 'finch', 'hare', 'wolf', 'crane'];
const randomRunName = (): string => `${ADJECTIVES[randomInt(ADJECTIVES.length)]}-${NOUNS[randomInt(NOUNS.length)]}-${randomInt(1000)}`;

export function mlflowRunRoutes(app: Hono<AppEnv>, deps: ApiDeps): void {
  const db = deps.db;

  /** The caller's run `id`, as the handler read it from the request: what scopedRunId allows, else 404. */
  async function runOf(p: Principal, id: string, on: Db = db): Promise<RunRow> {
    const run = await getRun(on, p.organizationId, scopedRunId(p, id));
    if (!run) throw runNotFound(id);
    return run;
  }
  async function activeRunOf(p: Principal, id: string, on: Db = db): Promise<RunRow> {
    const run = await runOf(p, id, on);
    checkActive(id, run.lifecycleStage);
    return run;
  }
  /** A metric naming a logged model is that model's too; the model must be the caller's (checked before any write). */
  async function recordModelMetrics(organizationId: string, runId: string, points: ModelMetricInput[], on: Db = db): Promise<void> {
    const [missing] = await logModelMetrics(on, organizationId, runId, points);
    if (missing) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `Logged model with ID '${missing}' not found.`);
  }
  async function runResponse(run: RunRow) {
    return { run: runView(run, await runDataOf(db, [run.id])) };
  }

  app.post('/runs/create', async (c) => {
    const p = requireRole(c, 'developer');
    const body = await mlflowRequest(c, CreateRunSchema);
    body.tags.forEach((t, i) => checkTag(t, `tags[${i}]`));
    const nameTag = body.tags.find((t) => t.key === 'mlflow.runName')?.value;
    if (body.run_name && nameTag !== undefined && body.run_name !== nameTag)
      throw invalid(`Both 'run_name' argument and 'mlflow.runName' tag are specified, but with different values (run_name='${body.run_name}', mlflow.runName='${nameTag}').`);
    const wireExp = body.experiment_id || '0';
    if (wireExp === '0') await ensureDefaultExperiment(db, p.organizationId, artifactRootUri(deps));
    const exp = await getExperiment(db, p.organizationId, storedExperimentId(wireExp, p.organizationId));
    if (!exp) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `No Experiment with id=${wireExp} exists`);
    if (exp.lifecycleStage !== 'active') throw invalid(`The experiment ${wireExp} must be in the 'active' state. Current state is ${exp.lifecycleStage}.`);
    const id = randomUUID().replace(/-/g, '');
    const name = body.run_name || nameTag || randomRunName();
    const tags = [...body.tags.filter((t) => t.key !== 'mlflow.runName'), { key: 'mlflow.runName', value: name }];
    await createRun(db, {
      id,
      organizationId: p.organizationId,
      experimentId: exp.id,
      name,
      userId: body.user_id ?? body.tags.find((t) => t.key === 'mlflow.user')?.value ?? p.subject,
      artifactUri: `${exp.artifactLocation}/${id}/artifacts`,
      startTime: body.start_time ?? Date.now(),
      tags,
    });
    return c.json(await runResponse(await runOf(p, id)));
  });

  app.get('/runs/get', async (c) => {
    const p = requireRole(c, 'viewer');
    const q = await mlflowRequest(c, RunIdSchema);
    return c.json(await runResponse(await runOf(p, q.run_id)));
  });

  app.post('/runs/update', async (c) => {
    const p = requireRole(c, 'developer');
    const body = await mlflowRequest(c, UpdateRunSchema);
    const run = await activeRunOf(p, body.run_id);
    await updateRun(db, run.id, {
      ...(body.status ? { status: fromMlflowStatus(body.status) } : {}),
      ...(body.end_time !== undefined ? { endTime: body.end_time } : {}),
      ...(body.run_name ? { name: body.run_name } : {}),
    });
    return c.json({ run_info: runInfoView(await runOf(p, run.id)) });
  });

  for (const [path, stage] of [
    ['/runs/delete', 'deleted'],
    ['/runs/restore', 'active'],
  ] as const)
    app.post(path, async (c) => {
      // Spec 000: deleting a run is ml-admin's; restoring one undoes no one's work.
      const p = requireRole(c, stage === 'deleted' ? 'admin' : 'developer');
      const body = await mlflowRequest(c, RunIdSchema);
      const run = await runOf(p, body.run_id);
      await setRunLifecycle(db, run.id, stage);
      return c.json({});
    });

  app.post('/runs/log-metric', async (c) => {
    const p = requireRole(c, 'developer');
    const body = await mlflowRequest(c, LogMetricSchema);
    checkMetric(body, '');
    const run = await activeRunOf(p, body.run_id);
    await recordModelMetrics(p.organizationId, run.id, [body]);
    await logMetrics(db, run.id, [{ key: body.key, value: body.value, timestamp: body.timestamp, step: body.step }]);
    return c.json({});
  });

  app.post('/runs/log-parameter', async (c) => {
    const p = requireRole(c, 'developer');
    const body = await mlflowRequest(c, LogParamSchema);
    checkParam(body, '');
    const run = await activeRunOf(p, body.run_id);
    const [conflict] = await logParams(db, run.id, [{ key: body.key, value: body.value }]);
    if (conflict)
      throw invalid(
        `Changing param values is not allowed. Param with key='${conflict.key}' was already logged with value='${conflict.old}' for run ID='${run.id}'. Attempted logging new value '${conflict.new}'.`,
      );
    return c.json({});
  });

  app.post('/runs/set-tag', async (c) => {
    const p = requireRole(c, 'developer');
    const body = await mlflowRequest(c, SetTagSchema);
    checkTag(body, '');
    const run = await activeRunOf(p, body.run_id);
    await setRunTags(db, run.id, [{ key: body.key, value: body.value }]);
    return c.json({});
  });

  app.post('/runs/delete-tag', async (c) => {
    const p = requireRole(c, 'developer');
    const body = await mlflowRequest(c, DeleteTagSchema);
    const run = await activeRunOf(p, body.run_id);
    if (!(await deleteRunTag(db, run.id, body.key))) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `No tag with name: ${body.key} in run with id ${run.id}`);
    return c.json({});
  });

  app.post('/runs/log-batch', async (c) => {
    const p = requireRole(c, 'developer');
    const size = Number(c.req.header('content-length') ?? 0);
    if (size > MAX_BATCH_BYTES) throw invalid(`Batched logging API requests must be at most ${MAX_BATCH_BYTES} bytes, got payload of size ${size}.`);
    const body = await mlflowRequest(c, LogBatchSchema);
    checkBatchLimit('metrics', 1000, body.metrics.length);
    checkBatchLimit('params', 100, body.params.length);
    checkBatchLimit('tags', 100, body.tags.length);
    checkBatchLimit('metrics, params, and tags', 1000, body.metrics.length + body.params.length + body.tags.length);
    body.metrics.forEach((m, i) => checkMetric(m, `metrics[${i}]`));
    body.params.forEach((m, i) => checkParam(m, `params[${i}]`));
    body.tags.forEach((m, i) => checkTag(m, `tags[${i}]`));
    const seen = new Set<string>();
    const dupes = body.params.filter((x) => seen.has(x.key) || !seen.add(x.key)).map((x) => `'${x.key}'`);
    if (dupes.length)
      throw invalid(`Duplicate parameter keys have been submitted: [${dupes.join(', ')}]. Please ensure the request contains only one param value per param key.`);
    // This route is outside the request transaction (app.ts: the training hot path): the batch writes itself and
    // its audit row atomically. Metrics alone are one statement with the run's check and the audit row.
    const entry = { ...auditContext(c, p), action: `POST ${c.req.path}`, target: c.req.path, detail: { status: 200 } };
    if (!body.params.length && !body.tags.length && !body.metrics.some((m) => m.model_id)) {
      const stage = await logRunMetrics(db, p.organizationId, scopedRunId(p, body.run_id), body.metrics, entry);
      if (!stage) throw runNotFound(body.run_id);
      checkActive(body.run_id, stage);
      return c.json({});
    }
    await db.transaction(async (t) => {
      const tx = t as unknown as Db;
      const run = await activeRunOf(p, body.run_id, tx);
      await recordModelMetrics(p.organizationId, run.id, body.metrics, tx);
      const conflicts = await logParams(tx, run.id, body.params);
      if (conflicts.length) {
        const listed = conflicts.map((x) => `{'key': '${x.key}', 'old_value': '${x.old}', 'new_value': '${x.new}'}`).join(', ');
        throw invalid(`Changing param values is not allowed. Params were already logged='[${listed}]' for run ID='${run.id}'.`);
      }
      await logMetrics(tx, run.id, body.metrics);
      await setRunTags(tx, run.id, body.tags);
      await audit(tx, entry);
    });
    return c.json({});
  });

  for (const method of ['get', 'post'] as const)
    app[method]('/runs/search', async (c) => {
      const p = requireRole(c, 'viewer');
      const q = await mlflowRequest(c, SearchRunsSchema);
      const limit = maxResults(q.max_results, 1000, 50_000);
      const after = decodeSearchToken(q.page_token);
      const filter = parseFilter(q.filter, RUN_GRAMMAR);
      const orderBy = q.order_by.map((o) => parseOrderBy(o, RUN_GRAMMAR));
      const experimentIds = q.experiment_ids.map((e) => storedExperimentId(e, p.organizationId));
      const page = await searchRuns(db, p.organizationId, { experimentIds, filter, orderBy, view: q.run_view_type, after, limit }).catch((err: unknown) => {
        // A token for another search (other keys), or whose values do not cast to this search's key types.
        if (err instanceof RangeError || (after && isDataException(err))) throw invalidToken(q.page_token ?? '');
        throw err;
      });
      const data = await runDataOf(
        db,
        page.rows.map((r) => r.id),
      );
      return c.json({ runs: page.rows.map((r) => runView(r, data)), ...(page.next ? { next_page_token: encodeSearchToken(page.next) } : {}) });
    });

  app.get('/metrics/get-history', async (c) => {
    const p = requireRole(c, 'viewer');
    const q = await mlflowRequest(c, GetMetricHistorySchema);
    const runId = q.run_id || q.run_uuid;
    if (!runId) throw invalid("Missing value for required parameter 'run_id'.");
    const run = await runOf(p, runId);
    const limit = maxResults(q.max_results, 25_000, 25_000);
    const page = await metricHistory(db, run.id, q.metric_key, { after: decodeHistoryToken(q.page_token), limit });
    const next = page.next ? `,"next_page_token":${JSON.stringify(encodeHistoryToken(page.next))}` : '';
    return c.body(`{"metrics":[${page.json}]${next}}`, 200, { 'content-type': 'application/json' });
  });
}

/**
 * The run id a handler uses, held to a job token's scope: a job's token reaches its own run only. api/auth.ts
 * refused a request naming any other run anywhere; this compares the very value the handler goes on to use, so
 * the check and the write cannot read different places of the request.
 */
function scopedRunId(p: Principal, id: string): string {
  if (typeof p.runId === 'string' && id !== p.runId) throw runNotFound(id);
  return id;
}

const runNotFound = (id: string): ApiError => new ApiError('RESOURCE_DOES_NOT_EXIST', `Run with id=${id} not found`);

function checkActive(id: string, stage: string): void {
  if (stage !== 'active') throw invalid(`The run ${id} must be in the 'active' state. Current state is ${stage}.`);
}

const invalidToken = (token: string) => invalid(`Invalid page token: '${token}' is not a token this server issued`);

/** Postgres's SQLSTATE class 22 (data exception): a value that does not cast, say. */
function isDataException(err: unknown): boolean {
  const e = err as { code?: unknown; cause?: { code?: unknown } };
  return [e.code, e.cause?.code].some((code) => typeof code === 'string' && code.startsWith('22'));
}

/** Search page tokens carry the last run's sort-key values (a keyset cursor). */
const encodeSearchToken = (cur: RunCursor): string => Buffer.from(JSON.stringify({ after: cur })).toString('base64url');
function decodeSearchToken(token: string | undefined): RunCursor | null {
  if (!token) return null;
  try {
    const { after } = JSON.parse(Buffer.from(token, 'base64url').toString()) as { after?: unknown };
    if (Array.isArray(after) && after.length > 0 && after.every((v) => v === null || typeof v === 'string')) return after as RunCursor;
  } catch {
    // fall through to the error below
  }
  throw invalidToken(token);
}

/** History page tokens are keyset cursors (the last point's position), so deep pages cost what the first does. */
export const encodeHistoryToken = (cur: HistoryCursor): string => Buffer.from(JSON.stringify([cur.step, cur.timestamp, String(cur.value)])).toString('base64url');
export function decodeHistoryToken(token: string | undefined): HistoryCursor | null {
  if (!token) return null;
  try {
    const [step, timestamp, value] = JSON.parse(Buffer.from(token, 'base64url').toString()) as unknown[];
    if (Number.isSafeInteger(step) && Number.isSafeInteger(timestamp) && typeof value === 'string' && !Number.isNaN(Number(value)))
      return { step: step as number, timestamp: timestamp as number, value: Number(value) };
  } catch {
    // fall through to the error below
  }
  throw invalidToken(token);
}


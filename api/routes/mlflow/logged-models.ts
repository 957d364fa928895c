// MLflow 3 logged models: create, get, finalize (PATCH), delete, search, tags, params and artifact listing and
// download. `mlflow.<flavor>.log_model` creates a model, uploads its files through the artifact proxy under
// `mlflow-artifacts:/<experiment>/models/<id>/artifacts` and finalizes it; `load_model("models:/<id>")` reads it back.
import { randomInt, randomUUID } from 'node:crypto';
import type { Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../../deps.js';
import { ApiError, invalid } from '../../errors.js';
import { requireRole } from '../../auth.js';
import {
  CreateLoggedModelSchema,
  FinalizeLoggedModelSchema,
  ListLoggedModelArtifactsSchema,
  LoggedModelParamsSchema,
  LoggedModelTagsSchema,
  SearchLoggedModelsSchema,
} from '../../../contracts/mlflow-artifacts.js';
import { ensureDefaultExperiment, getExperiment, type ExperimentRow } from '../../../db/repo/experiments.js';
import { LOGGED_MODEL_ORDER_KEYS, createLoggedModel, deleteLoggedModelTag, getLoggedModel, logLoggedModelParams, searchLoggedModels, setLoggedModelTags, updateLoggedModel, withDetails, type LoggedModelFull, type LoggedModelRow } from '../../../db/repo/logged-models.js';
import { isOtherOrganizationsRun } from '../../../db/repo/runs.js';
import { artifactRootUri } from '../../../lib/object-store.js';
import { decodePageToken, encodePageToken, maxResults, mlflowRequest, storedExperimentId, validateKey, validateLength, wireDouble, wireExperimentId } from './common.js';
import { parseFilter, type Grammar } from './search-filter.js';
import { artifactArea, keyOfUri, safeArtifactPath, wireExperimentLocation } from './artifact-store.js';

const LOGGED_MODEL_GRAMMAR: Grammar = {
  what: 'logged model',
  attributes: {
    name: 'string',
    model_id: 'string',
    model_type: 'string',
    status: 'string',
    source_run_id: 'string',
    creation_timestamp: 'number',
    creation_time: 'number',
    last_updated_timestamp: 'number',
  },
  entities: ['param', 'tag', 'attribute'],
};

const BAD_NAME_CHARS = ['/', ':', '.', '%', '"', "'"];
const ADJECTIVES = ['bold', 'calm', 'eager', 'gentle', 'keen', 'lucky', 'quiet', 'swift', 'wise', 'brave'];
const NOUNS = ['owl', 'fox', 'lark', 'otter', 'heron', 'lynx', 'finch', 'hare', 'wolf', 'crane'];
const randomModelName = (): string => `${ADJECTIVES[randomInt(ADJECTIVES.length)]}-${NOUNS[randomInt(NOUNS.length)]}-${randomInt(1000)}`;

function loggedModelView(m: LoggedModelFull) {
  const r = m.row;
  return {
    info: {
      model_id: r.id,
      experiment_id: wireExperimentId(r.experimentId, r.organizationId),
      name: r.name,
      creation_timestamp_ms: r.creationTime,
      last_updated_timestamp_ms: r.lastUpdatedTime,
      artifact_uri: r.artifactLocation,
      status: r.status,
      model_type: r.modelType,
      ...(r.sourceRunId ? { source_run_id: r.sourceRunId } : {}),
      ...(r.statusMessage ? { status_message: r.statusMessage } : {}),
      ...(m.tags.length ? { tags: m.tags } : {}),
    },
    data: {
      ...(m.params.length ? { params: m.params } : {}),
      ...(m.metrics.length ? { metrics: m.metrics.map((x) => ({ ...x, value: wireDouble(x.value), model_id: r.id })) } : {}),
    },
  };
}

export function loggedModelRoutes(app: Hono<AppEnv>, deps: ApiDeps): void {
  const db = deps.db;
  const area = artifactArea(deps);

  async function modelOf(organizationId: string, id: string, allowDeleted = false): Promise<LoggedModelRow> {
    const row = await getLoggedModel(db, organizationId, id, allowDeleted);
    if (!row) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `Logged model with ID '${id}' not found.`);
    return row;
  }
  async function experimentOf(organizationId: string, wireId: string): Promise<ExperimentRow> {
    if (wireId === '0') await ensureDefaultExperiment(db, organizationId, artifactRootUri(deps));
    const exp = await getExperiment(db, organizationId, storedExperimentId(wireId, organizationId));
    if (!exp) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `No Experiment with id=${wireId} exists`);
    return exp;
  }
  const respond = async (row: LoggedModelRow) => ({ model: loggedModelView((await withDetails(db, [row]))[0]!) });

  app.post('/logged-models', async (c) => {
    const p = requireRole(c, 'developer');
    const body = await mlflowRequest(c, CreateLoggedModelSchema);
    if (body.name !== undefined && (body.name === '' || BAD_NAME_CHARS.some((ch) => body.name!.includes(ch))))
      throw invalid(
        `Invalid model name ('${body.name}') provided. Model name must be a non-empty string and cannot contain the following characters: ('/', ':', '.', '%', '"', "'")`,
      );
    body.tags.forEach((t, i) => {
      validateKey(t.key, `tags[${i}].key`);
      validateLength(`tags[${i}].value`, t.value, 8000);
    });
    body.params.forEach((t, i) => {
      validateKey(t.key, `params[${i}].key`);
      validateLength(`params[${i}].value`, t.value, 6000);
    });
    const exp = await experimentOf(p.organizationId, body.experiment_id);
    if (exp.lifecycleStage !== 'active') throw invalid(`The experiment ${body.experiment_id} must be in the 'active' state. Current state is ${exp.lifecycleStage}.`);
    // The source run is lineage only, unchecked as in MLflow, unless it is another organization's: not found.
    if (body.source_run_id && (await isOtherOrganizationsRun(db, p.organizationId, body.source_run_id)))
      throw new ApiError('RESOURCE_DOES_NOT_EXIST', `Run with id=${body.source_run_id} not found`);
    const id = `m-${randomUUID().replace(/-/g, '')}`;
    const now = Date.now();
    await createLoggedModel(db, {
      id,
      organizationId: p.organizationId,
      experimentId: exp.id,
      name: body.name ?? randomModelName(),
      artifactLocation: `${wireExperimentLocation(exp.artifactLocation, wireExperimentId(exp.id, p.organizationId))}/models/${id}/artifacts`,
      modelType: body.model_type ?? '',
      sourceRunId: body.source_run_id || null,
      creationTime: now,
      tags: body.tags,
      params: body.params,
    });
    return c.json(await respond(await modelOf(p.organizationId, id)));
  });

  for (const method of ['get', 'post'] as const)
    app[method]('/logged-models/search', async (c) => {
      const p = requireRole(c, 'viewer');
      const q = await mlflowRequest(c, SearchLoggedModelsSchema);
      if (q.datasets.some((d) => !d.dataset_name)) throw invalid('`dataset_name` in the `datasets` clause must be specified.');
      const limit = maxResults(q.max_results, 100, 50_000);
      const offset = decodePageToken(q.page_token);
      const filter = parseFilter(q.filter, LOGGED_MODEL_GRAMMAR);
      const orderBy = q.order_by.map((o) => {
        const key = o.field_name.replace(/_ms$/, '');
        if (!LOGGED_MODEL_ORDER_KEYS.includes(key)) throw invalid(`Invalid order by field name: ${o.field_name}`);
        return { key, ascending: o.ascending };
      });
      const page = await searchLoggedModels(db, p.organizationId, {
        experimentIds: q.experiment_ids.map((e) => storedExperimentId(e, p.organizationId)),
        filter,
        datasets: q.datasets,
        orderBy,
        offset,
        limit,
      });
      const models = (await withDetails(db, page.rows)).map(loggedModelView);
      return c.json({ ...(models.length ? { models } : {}), ...(page.more ? { next_page_token: encodePageToken(offset + limit) } : {}) });
    });

  app.get('/logged-models/:id', async (c) => {
    const p = requireRole(c, 'viewer');
    const allowDeleted = (c.req.query('allow_deleted') ?? 'false').toLowerCase() === 'true';
    return c.json(await respond(await modelOf(p.organizationId, c.req.param('id'), allowDeleted)));
  });

  app.patch('/logged-models/:id', async (c) => {
    const p = requireRole(c, 'developer');
    const body = await mlflowRequest(c, FinalizeLoggedModelSchema);
    if (!body.status) throw invalid("Missing value for required parameter 'status'.");
    const row = await modelOf(p.organizationId, c.req.param('id'));
    await updateLoggedModel(db, row.id, { status: body.status });
    return c.json(await respond(await modelOf(p.organizationId, row.id)));
  });

  app.delete('/logged-models/:id', async (c) => {
    const p = requireRole(c, 'admin'); // spec 000: deleting a model is ml-admin's
    const row = await modelOf(p.organizationId, c.req.param('id'));
    await updateLoggedModel(db, row.id, { lifecycleStage: 'deleted' });
    return c.json({});
  });

  app.patch('/logged-models/:id/tags', async (c) => {
    const p = requireRole(c, 'developer');
    const body = await mlflowRequest(c, LoggedModelTagsSchema);
    body.tags.forEach((t, i) => {
      validateKey(t.key, `tags[${i}].key`);
      validateLength(`tags[${i}].value`, t.value, 8000);
    });
    const row = await modelOf(p.organizationId, c.req.param('id'));
    await setLoggedModelTags(db, row.id, body.tags);
    return c.json({});
  });

  app.delete('/logged-models/:id/tags/:key', async (c) => {
    const p = requireRole(c, 'developer');
    const row = await modelOf(p.organizationId, c.req.param('id'));
    const key = c.req.param('key');
    if (!(await deleteLoggedModelTag(db, row.id, key))) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `No tag with key '${key}' found for model with ID '${row.id}'.`);
    return c.json({});
  });

  app.post('/logged-models/:id/params', async (c) => {
    const p = requireRole(c, 'developer');
    const body = await mlflowRequest(c, LoggedModelParamsSchema);
    body.params.forEach((t, i) => {
      validateKey(t.key, `params[${i}].key`);
      validateLength(`params[${i}].value`, t.value, 6000);
    });
    const row = await modelOf(p.organizationId, c.req.param('id'));
    await logLoggedModelParams(db, row.id, body.params);
    return c.json({});
  });

  /** The model's artifact root as an object key, or an error for models stored outside this server. */
  function rootKeyOf(row: LoggedModelRow): string {
    const key = keyOfUri(deps, row.artifactLocation);
    if (key === null) throw invalid(`The artifacts of logged model '${row.id}' live at ${row.artifactLocation}, outside this server's artifact store.`);
    return key;
  }

  app.get('/logged-models/:id/artifacts/directories', async (c) => {
    const p = requireRole(c, 'viewer');
    const q = await mlflowRequest(c, ListLoggedModelArtifactsSchema);
    const path = q.artifact_directory_path === undefined ? '' : safeArtifactPath(q.artifact_directory_path);
    const row = await modelOf(p.organizationId, c.req.param('id'));
    const files = await area.list(p.organizationId, [rootKeyOf(row), path].filter(Boolean).join('/'), path);
    return c.json({ root_uri: row.artifactLocation, ...(files.length ? { files } : {}) });
  });

  app.get('/logged-models/:id/artifacts/files', async (c) => {
    const p = requireRole(c, 'viewer');
    const raw = c.req.query('artifact_file_path');
    if (!raw) throw new ApiError('BAD_REQUEST', 'Request must include the "artifact_file_path" query parameter.');
    const path = safeArtifactPath(raw);
    const row = await modelOf(p.organizationId, c.req.param('id'));
    return area.download(p.organizationId, `${rootKeyOf(row)}/${path}`, path);
  });
}

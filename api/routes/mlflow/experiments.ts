// MLflow experiments: get-by-name, create, get, search, delete, restore, update, set-experiment-tag,
// delete-experiment-tag.
import { checkedLocation } from '../../input-policy.js';
import { artifactRootUri } from '../../../lib/object-store.js';
import { randomUUID } from 'node:crypto';
import type { Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../../deps.js';
import { ApiError, invalid } from '../../errors.js';
import { requireRole } from '../../auth.js';
import {
  CreateExperimentSchema,
  DeleteExperimentTagSchema,
  ExperimentByNameSchema,
  ExperimentIdSchema,
  SearchExperimentsSchema,
  SetExperimentTagSchema,
  UpdateExperimentSchema,
} from '../../../contracts/mlflow.js';
import { createExperiment, deleteExperimentTag, ensureDefaultExperiment, experimentTagsOf, getExperiment, getExperimentByName, searchExperiments, setExperimentTag, updateExperiment, type ExperimentRow } from '../../../db/repo/experiments.js';
import { decodePageToken, encodePageToken, maxResults, mlflowRequest, storedExperimentId, validateKey, validateLength } from './common.js';
import { EXPERIMENT_GRAMMAR, parseFilter, parseOrderBy } from './search-filter.js';
import { experimentView } from './views.js';

export function experimentRoutes(app: Hono<AppEnv>, deps: ApiDeps): void {
  const db = deps.db;

  /** The caller's experiment, or RESOURCE_DOES_NOT_EXIST (also for another organization's). */
  async function experimentOf(organizationId: string, wireId: string): Promise<ExperimentRow> {
    if (wireId === '0') await ensureDefaultExperiment(db, organizationId, artifactRootUri(deps));
    const exp = await getExperiment(db, organizationId, storedExperimentId(wireId, organizationId));
    if (!exp) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `No Experiment with id=${wireId} exists`);
    return exp;
  }
  const view = async (e: ExperimentRow) => experimentView(e, (await experimentTagsOf(db, [e.id])).get(e.id)!);

  app.get('/experiments/get-by-name', async (c) => {
    const p = requireRole(c, 'viewer');
    const q = await mlflowRequest(c, ExperimentByNameSchema);
    if (q.experiment_name === 'Default') await ensureDefaultExperiment(db, p.organizationId, artifactRootUri(deps));
    const exp = await getExperimentByName(db, p.organizationId, q.experiment_name);
    if (!exp) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `Could not find experiment with name '${q.experiment_name}'`);
    return c.json({ experiment: await view(exp) });
  });

  app.get('/experiments/get', async (c) => {
    const p = requireRole(c, 'viewer');
    const q = await mlflowRequest(c, ExperimentIdSchema);
    return c.json({ experiment: await view(await experimentOf(p.organizationId, q.experiment_id)) });
  });

  app.post('/experiments/create', async (c) => {
    const p = requireRole(c, 'developer');
    const body = await mlflowRequest(c, CreateExperimentSchema);
    validateLength('name', body.name, 500);
    for (const t of body.tags) {
      validateKey(t.key, 'key');
      validateLength('value', t.value, 5000);
    }
    await ensureDefaultExperiment(db, p.organizationId, artifactRootUri(deps));
    const id = randomUUID().replace(/-/g, '');
    const created = await createExperiment(db, {
      id,
      organizationId: p.organizationId,
      name: body.name,
      // A location with a climb in it would be a root its runs' artifact paths resolve against: refused here.
      artifactLocation: body.artifact_location ? checkedLocation(body.artifact_location, { field: 'artifact_location', accept: ['absolute', 'uri'] }).text : `${artifactRootUri(deps)}/experiments/${id}`,
      tags: body.tags,
    });
    if (!created) throw new ApiError('RESOURCE_ALREADY_EXISTS', `Experiment(name=${body.name}) already exists. Error: experiment names must be unique`);
    return c.json({ experiment_id: id });
  });

  for (const method of ['get', 'post'] as const)
    app[method]('/experiments/search', async (c) => {
      const p = requireRole(c, 'viewer');
      const q = await mlflowRequest(c, SearchExperimentsSchema);
      const limit = maxResults(q.max_results, 1000, 50_000);
      const offset = decodePageToken(q.page_token);
      const filter = parseFilter(q.filter, EXPERIMENT_GRAMMAR);
      const orderBy = q.order_by.map((o) => parseOrderBy(o, EXPERIMENT_GRAMMAR));
      await ensureDefaultExperiment(db, p.organizationId, artifactRootUri(deps));
      const page = await searchExperiments(db, p.organizationId, { filter, orderBy, view: q.view_type, offset, limit });
      const tags = await experimentTagsOf(
        db,
        page.rows.map((e) => e.id),
      );
      return c.json({
        experiments: page.rows.map((e) => experimentView(e, tags.get(e.id)!)),
        ...(page.more ? { next_page_token: encodePageToken(offset + limit) } : {}),
      });
    });

  for (const [path, stage] of [
    ['/experiments/delete', 'deleted'],
    ['/experiments/restore', 'active'],
  ] as const)
    app.post(path, async (c) => {
      // Spec 000: deleting an experiment is ml-admin's; restoring one undoes no one's work.
      const p = requireRole(c, stage === 'deleted' ? 'admin' : 'developer');
      const body = await mlflowRequest(c, ExperimentIdSchema);
      if (stage === 'deleted' && body.experiment_id === '0') throw invalid("Cannot delete the default experiment '0'. This is an internally reserved experiment.");
      const exp = await experimentOf(p.organizationId, body.experiment_id);
      await updateExperiment(db, exp.id, { lifecycleStage: stage });
      return c.json({});
    });

  app.post('/experiments/update', async (c) => {
    const p = requireRole(c, 'developer');
    const body = await mlflowRequest(c, UpdateExperimentSchema);
    const exp = await experimentOf(p.organizationId, body.experiment_id);
    if (body.new_name === undefined || body.new_name === '') return c.json({});
    validateLength('name', body.new_name, 500);
    if (exp.lifecycleStage !== 'active') throw invalid(`Cannot rename a non-active experiment.`);
    if (!(await updateExperiment(db, exp.id, { name: body.new_name })))
      throw new ApiError('RESOURCE_ALREADY_EXISTS', `Experiment(name=${body.new_name}) already exists. Error: experiment names must be unique`);
    return c.json({});
  });

  app.post('/experiments/set-experiment-tag', async (c) => {
    const p = requireRole(c, 'developer');
    const body = await mlflowRequest(c, SetExperimentTagSchema);
    validateKey(body.key, 'key');
    validateLength('value', body.value, 5000);
    const exp = await experimentOf(p.organizationId, body.experiment_id);
    if (exp.lifecycleStage !== 'active') throw invalid(`The experiment ${body.experiment_id} must be in the 'active' state. Current state is ${exp.lifecycleStage}.`);
    await setExperimentTag(db, exp.id, { key: body.key, value: body.value });
    return c.json({});
  });

  app.post('/experiments/delete-experiment-tag', async (c) => {
    const p = requireRole(c, 'developer');
    const body = await mlflowRequest(c, DeleteExperimentTagSchema);
    const exp = await experimentOf(p.organizationId, body.experiment_id);
    if (exp.lifecycleStage !== 'active') throw invalid(`The experiment ${body.experiment_id} must be in the 'active' state. Current state is ${exp.lifecycleStage}.`);
    if (!(await deleteExperimentTag(db, exp.id, body.key)))
      throw new ApiError('RESOURCE_DOES_NOT_EXIST', `No tag with name: ${body.key} in experiment with id ${body.experiment_id}`);
    return c.json({});
  });
}

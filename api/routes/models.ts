// /v1/models: the model registry (versions, stages, artifacts with checksums). Registering needs the developer
// role; a stage change into or out of production needs an approver, demotes the previous production version to
// archived in the same transaction and leaves an audit row.
import { Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../deps.js';
import {
  createModel,
  getModel,
  getVersion,
  listModels,
  listVersions,
  modelVersionView,
  modelView,
  transitionStage,
} from '../../db/repo/models.js';
import { paramsOf } from '../../db/repo/params-tags.js';
import { artifactsOf } from '../../db/repo/run-artifacts.js';
import { getRun } from '../../db/repo/runs.js';
import { ApiError, invalid, notFound } from '../errors.js';
import { requireRole } from '../auth.js';
import { jsonBody } from '../validate.js';
import { EvaluateVersionSchema, ModelCreateSchema, ModelNameSchema, ModelVersionCreateSchema, StageChangeSchema, type EvaluateVersion } from '../../contracts/models.js';
import { JobSubmissionSchema } from '../../contracts/jobs.js';
import { getDataset } from '../../db/repo/datasets.js';
import type { ModelVersionRow } from '../../db/repo/models.js';
import { idempotencyKey, jobView, submitJob } from './jobs.js';
import { wireExperimentId } from './mlflow/common.js';
import { keyOfUri, rawPathAfter, wireRunArtifactUri } from './mlflow/artifact-store.js';
import { downloadFormatFile, filesOfLocation, filesPlan, registerVersion } from '../model-files.js';
import { checkedLocation } from '../input-policy.js';
import { filesUnder, type SourceFile } from '../../lib/model-artifacts.js';
import { artifactRootUri } from '../../lib/object-store.js';
import { quarantineOverride, refusingQuarantined } from '../quarantine.js';
import { notifyProductionChange } from '../production-change.js';
import { latestMetricsOf } from '../../db/repo/metrics.js';
import { modelVersionLineage } from '../../db/repo/model-lineage.js';
import type { ModelLineage } from '../../contracts/models.js';

function modelName(raw: string): string {
  const parsed = ModelNameSchema.safeParse(raw);
  if (!parsed.success) throw invalid(`invalid model name "${raw}": ${parsed.error.issues[0]!.message}`);
  return parsed.data;
}

function versionNumber(raw: string): number {
  if (!/^[1-9]\d{0,9}$/.test(raw)) throw invalid(`invalid version "${raw}": expected a positive integer`);
  return Number(raw);
}

/** The run's recorded artifacts at or under `path`, as files relative to it (a file itself: its own name). */
/**
 * A run's files at or under `path`: those the pipeline recorded (run_artifacts, which may live in the checkpoints
 * bucket) and those uploaded to the run's artifact root through the API or MLflow (listed from the store).
 */
async function artifactsUnder(deps: ApiDeps, run: { id: string; artifactUri: string }, path: string): Promise<SourceFile[]> {
  const prefix = path.replace(/\/+$/, '');
  const out = new Map<string, SourceFile>();
  for (const a of await artifactsOf(deps.db, run.id)) {
    if (prefix !== '' && a.path !== prefix && !a.path.startsWith(`${prefix}/`)) continue;
    const rel = a.path.slice(prefix.length).replace(/^\//, '') || a.path.split('/').pop()!;
    out.set(rel, { uri: a.uri, path: rel });
  }
  const key = keyOfUri(deps, [run.artifactUri.replace(/\/+$/, ''), prefix].filter(Boolean).join('/'));
  if (key !== null) for (const f of await filesUnder(deps.store, `${artifactRootUri(deps)}/${key}`)) if (!out.has(f.path)) out.set(f.path, f);
  return [...out.values()];
}

/** The dataset version an evaluation scores: the one asked for, else the one the version was trained on. */
async function evaluationDataset(deps: ApiDeps, organizationId: string, v: ModelVersionRow, body: EvaluateVersion): Promise<{ name: string; version: number | 'latest' }> {
  if (body.dataset) return body.dataset;
  const recorded = v.datasetId ? await getDataset(deps.db, organizationId, v.datasetId) : null;
  if (!recorded) throw invalid(`dataset: version ${v.version} records no dataset it was trained on; name the dataset whose test split to score ({"dataset": {"name": ..., "version": ...}}, --dataset)`);
  return { name: recorded.name, version: recorded.version };
}

export function modelRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();
  app.get('/', async (c) => {
    const principal = requireRole(c, 'viewer');
    return c.json({ models: await listModels(deps.db, principal.organizationId) });
  });

  app.post('/', async (c) => {
    const p = requireRole(c, 'developer');
    const body = await jsonBody(c, ModelCreateSchema);
    const created = await createModel(deps.db, { organizationId: p.organizationId, name: body.name, description: body.description ?? '', tags: body.tags ?? {}, actor: p.subject });
    if (!created) throw new ApiError('RESOURCE_ALREADY_EXISTS', `model "${body.name}" already exists`);
    return c.json(modelView(created), 201);
  });

  app.get('/:name/versions', async (c) => {
    const principal = requireRole(c, 'viewer');
    const name = c.req.param('name');
    const versions = await listVersions(deps.db, principal.organizationId, name);
    if (!versions) throw notFound(`model "${name}"`);
    return c.json({ versions: versions.map((v) => modelVersionView(name, v)) });
  });

  app.post('/:name/versions', async (c) => {
    const p = requireRole(c, 'developer');
    const name = modelName(c.req.param('name'));
    const body = await jsonBody(c, ModelVersionCreateSchema);
    const run = await getRun(deps.db, p.organizationId, body.run_id);
    if (!run) throw notFound(`run "${body.run_id}"`);
    const root = wireRunArtifactUri(run.artifactUri, wireExperimentId(run.experimentId, p.organizationId), run.id);
    const path = checkedLocation(body.artifact_path, { field: 'artifact_path', accept: ['relative'], allowEmpty: true }).path;
    const [metrics, params, files] = await Promise.all([latestMetricsOf(deps.db, run.id), paramsOf(deps.db, run.id), filesOfLocation('artifact_path', artifactsUnder(deps, run, path))]);
    if (!files.length) throw invalid(`run "${run.id}" has no artifacts at or under artifact_path "${path}"`);
    // The files are copied under the version's own prefix (a later overwrite of the run's artifact changes
    // nothing) by a workflow: the answer is 202 with the version pending_registration; GET it until it is ready.
    const row = await registerVersion(c, deps, {
      organizationId: p.organizationId,
      modelName: name,
      runId: run.id,
      source: path ? `${root}/${path}` : root,
      description: body.description ?? '',
      tags: body.tags ?? {},
      metrics: Object.fromEntries(Object.entries(metrics).map(([k, m]) => [k, m.value])),
      trainingConfig: { params },
      lineage: { run_id: run.id, experiment_id: run.experimentId, artifact_path: path },
      createdBy: p.subject,
    }, filesPlan(files));
    c.header('location', `/v1/models/${encodeURIComponent(name)}/versions/${row.version}`);
    return c.json(modelVersionView(name, row), row.status === 'pending_registration' ? 202 : 201);
  });

  app.get('/:name/versions/:version', async (c) => {
    const principal = requireRole(c, 'viewer');
    const name = c.req.param('name');
    const versions = await listVersions(deps.db, principal.organizationId, name);
    const v = versions?.find((x) => String(x.version) === c.req.param('version'));
    if (!v) throw notFound(`model "${name}" version ${c.req.param('version')}`);
    return c.json(modelVersionView(name, v));
  });

  // The chain behind a version, for the console's lineage graph: dataset -> pipeline/jobs -> run -> checkpoints ->
  // formats -> stages. The run is named as MLflow names it, with its page in the MLflow UI.
  app.get('/:name/versions/:version/lineage', async (c) => {
    const principal = requireRole(c, 'viewer');
    const name = modelName(c.req.param('name'));
    const version = versionNumber(c.req.param('version'));
    const stored = await modelVersionLineage(deps.db, principal.organizationId, name, version);
    if (!stored) throw notFound(`model "${name}" version ${version}`);
    const { run, ...rest } = stored;
    const experimentId = run ? wireExperimentId(run.experimentId, principal.organizationId) : null;
    const lineage: ModelLineage = {
      ...rest,
      run: run ? { id: run.id, name: run.name, status: run.status, experiment_id: experimentId!, mlflow_path: `/mlflow/#/experiments/${experimentId}/runs/${run.id}` } : null,
    };
    return c.json(lineage);
  });

  // One file of a format (manifest.json or a file it lists), streamed; `hanzo-ml model pull` verifies what it gets.
  app.get('/:name/versions/:version/artifacts/:format/*', async (c) => {
    const principal = requireRole(c, 'viewer');
    const name = modelName(c.req.param('name'));
    const version = versionNumber(c.req.param('version'));
    const format = c.req.param('format');
    const found = await getVersion(deps.db, principal.organizationId, name, version);
    if (!found) throw notFound(`model "${name}" version ${version}`);
    return downloadFormatFile(deps, { name, version: found.version, format, rawPath: rawPathAfter(c, `/artifacts/${format}/`) });
  });

  // The eval gate for a version that never met a suite (registered by hand or by a conversion job): an eval job
  // compares it with its base model and production; its decision is recorded on the version like a pipeline's.
  app.post('/:name/versions/:version/evaluate', async (c) => {
    const p = requireRole(c, 'developer');
    const name = modelName(c.req.param('name'));
    const version = versionNumber(c.req.param('version'));
    const body = await jsonBody(c, EvaluateVersionSchema);
    const found = await getVersion(deps.db, p.organizationId, name, version);
    if (!found) throw notFound(`model "${name}" version ${version}`);
    // Whoever registered the version may have it evaluated; anyone else needs ml-admin.
    if (found.version.createdBy !== p.subject) requireRole(c, 'admin');
    const parsed = JobSubmissionSchema.safeParse({
      type: 'eval',
      eval: {
        source: { model: `${name}@${version}` },
        ...(body.base_model ? { base_model: body.base_model } : {}),
        ...(body.suite ? { suite: body.suite } : {}),
        dataset: await evaluationDataset(deps, p.organizationId, found.version, body),
        record_gate: true,
      },
    });
    if (!parsed.success) throw invalid(`model "${name}" cannot be evaluated as an eval job source: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
    const { row, created } = await submitJob(c, deps, p, parsed.data, idempotencyKey(c));
    c.header('location', `/v1/jobs/${row.id}`);
    return c.json({ job: jobView(row) }, created ? 202 : 200);
  });

  app.patch('/:name/versions/:version/stage', async (c) => {
    const p = requireRole(c, 'developer');
    const name = modelName(c.req.param('name'));
    const version = versionNumber(c.req.param('version'));
    const body = await jsonBody(c, StageChangeSchema);
    if (!(await getModel(deps.db, p.organizationId, name))) throw notFound(`model "${name}"`);
    const found = await getVersion(deps.db, p.organizationId, name, version);
    if (!found) throw notFound(`model "${name}" version ${version}`);
    // Production is what gets served: moving a version into or out of it takes an approver.
    if (body.stage === 'production' || found.version.stage === 'production') requireRole(c, 'approver');
    const override = quarantineOverride(c, body.override_reason);
    const { version: row, archived } = await refusingQuarantined(() =>
      transitionStage(deps.db, {
        organizationId: p.organizationId,
        modelName: name,
        version,
        stage: body.stage,
        actor: p.subject,
        reason: body.reason ?? '',
        quarantineOverride: override,
        requireGate: deps.config.registry.require_gate_for_production,
      }),
    );
    if (row.stage === 'production' && found.version.stage !== 'production')
      await notifyProductionChange(deps, { organizationId: p.organizationId, modelName: name, version: row, replaced: archived, actor: p.subject });
    return c.json({ version: modelVersionView(name, row), archived });
  });
  return app;
}

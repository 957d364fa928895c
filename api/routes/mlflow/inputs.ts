// MLflow run inputs and outputs (log-inputs: datasets with tags and model inputs; outputs: logged models a run
// produced), the datasets the UI lists per experiment (search-datasets), and the UI's metric history for charts
// (get-history-bulk, get-history-bulk-interval).
import type { Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../../deps.js';
import { ApiError, invalid } from '../../errors.js';
import { requireRole } from '../../auth.js';
import { LogInputsSchema, LogOutputsSchema, MetricHistoryBulkIntervalSchema, SearchDatasetsSchema } from '../../../contracts/mlflow-artifacts.js';
import { datasetSummaries, logDatasetInputs, logRunModels } from '../../../db/repo/run-inputs.js';
import { loggedModelIdsOfOthers } from '../../../db/repo/logged-models.js';
import { getRun, runIdsOf, type RunRow } from '../../../db/repo/runs.js';
import { mlflowRequest, storedExperimentId, validateLength, wireDouble, wireExperimentId } from './common.js';
import { metricHistory, sampledMetricHistory } from '../../../db/repo/metrics.js';

const MAX_RUNS_BULK = 100;
const MAX_HISTORY_BULK = 25_000;
const MAX_EXPERIMENTS_DATASETS = 20;
const MAX_POINTS_PER_RUN = 2500;
const exceeds = (what: string, limit: number) => `'${what}' exceeds the maximum length of ${limit} characters`;

/** MLflow's dataset and input-tag limits (mlflow/utils/validation.py). */
function checkDatasetInput(d: { tags: { key: string; value: string }[]; dataset: Record<string, string | undefined> }): void {
  const limits: [string, number][] = [
    ['name', 500],
    ['digest', 36],
    ['source', 65535],
    ['schema', 1048575],
    ['profile', 16777215],
  ];
  for (const [field, limit] of limits) {
    const value = d.dataset[field];
    if (value !== undefined && value.length > limit) throw invalid(exceeds(field, limit));
  }
  for (const t of d.tags) {
    if (t.key.length > 255) throw invalid(exceeds('key', 255));
    validateLength('value', t.value, 500);
  }
}

export function mlflowInputRoutes(app: Hono<AppEnv>, deps: ApiDeps): void {
  const db = deps.db;

  async function activeRunOf(organizationId: string, id: string): Promise<RunRow> {
    const run = await getRun(db, organizationId, id);
    if (!run) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `Run with id=${id} not found`);
    if (run.lifecycleStage !== 'active') throw invalid(`The run ${id} must be in the 'active' state. Current state is ${run.lifecycleStage}.`);
    return run;
  }

  /**
   * MLflow links a model id to a run unchecked, and so do we for an id that names no model; another
   * organization's model is answered as a lookup of it would be (not found), before anything is written.
   */
  async function refuseOthersModels(organizationId: string, models: { model_id: string }[]): Promise<void> {
    const [other] = await loggedModelIdsOfOthers(db, organizationId, models.map((m) => m.model_id));
    if (other !== undefined) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `Logged model with ID '${other}' not found.`);
  }

  app.post('/runs/log-inputs', async (c) => {
    const p = requireRole(c, 'developer');
    const body = await mlflowRequest(c, LogInputsSchema);
    body.datasets.forEach(checkDatasetInput);
    const run = await activeRunOf(p.organizationId, body.run_id);
    await refuseOthersModels(p.organizationId, body.models);
    await logDatasetInputs(db, run.experimentId, run.id, body.datasets);
    await logRunModels(db, run.id, 'input', body.models);
    return c.json({});
  });

  app.post('/runs/outputs', async (c) => {
    const p = requireRole(c, 'developer');
    const body = await mlflowRequest(c, LogOutputsSchema);
    const run = await activeRunOf(p.organizationId, body.run_id);
    await refuseOthersModels(p.organizationId, body.models);
    await logRunModels(db, run.id, 'output', body.models);
    return c.json({});
  });

  app.get('/metrics/get-history-bulk-interval', async (c) => {
    const p = requireRole(c, 'viewer');
    const q = await mlflowRequest(c, MetricHistoryBulkIntervalSchema);
    if (q.run_ids.length > MAX_RUNS_BULK)
      throw invalid(`GetMetricHistoryBulkInterval request must specify at most ${MAX_RUNS_BULK} run_ids. Received ${q.run_ids.length} run_ids.`);
    const max = q.max_results ?? MAX_POINTS_PER_RUN;
    if (max < 1 || max > MAX_POINTS_PER_RUN) throw invalid(`max_results must be between 1 and ${MAX_POINTS_PER_RUN}.`);
    if ((q.start_step === undefined) !== (q.end_step === undefined)) throw invalid('If either start step or end step are specified, both must be specified.');
    const range: [number, number] | null = q.start_step !== undefined && q.end_step !== undefined ? [q.start_step, q.end_step] : null;
    if (range && range[0] > range[1]) throw invalid(`end_step must be greater than start_step. Found start_step=${range[0]} and end_step=${range[1]}.`);
    // Another organization's run, like an unknown one, has no points. The runs are sampled concurrently (the
    // pool bounds how many at once) and listed in the order the request named them.
    const runIds = [...new Set(q.run_ids)];
    const visible = await runIdsOf(db, p.organizationId, runIds);
    const perRun = await Promise.all(runIds.filter((id) => visible.has(id)).map(async (runId) => ({ runId, points: await sampledMetricHistory(db, runId, q.metric_key, max, range) })));
    const metrics = perRun.flatMap(({ runId, points }) =>
      points.map((pt) => ({ key: q.metric_key, value: wireDouble(pt.is_nan ? NaN : pt.value), timestamp: pt.timestamp, step: pt.step, run_id: runId })),
    );
    return c.json(metrics.length ? { metrics } : {});
  });

  /**
   * The UI's full history of one metric over several runs (ajax only in MLflow): runs by id, each run's points by
   * (timestamp, step, value), at most max_results points in all. Unknown runs, and other organizations', have none.
   */
  app.get('/metrics/get-history-bulk', async (c) => {
    const p = requireRole(c, 'viewer');
    const runIdsAsked = c.req.queries('run_id') ?? [];
    if (runIdsAsked.length === 0) throw invalid('GetMetricHistoryBulk request must specify at least one run_id.');
    if (runIdsAsked.length > MAX_RUNS_BULK)
      throw invalid(`GetMetricHistoryBulk request cannot specify more than ${MAX_RUNS_BULK} run_ids. Received ${runIdsAsked.length} run_ids.`);
    const key = c.req.query('metric_key');
    if (key === undefined) throw invalid('GetMetricHistoryBulk request must specify a metric_key.');
    const asked = c.req.query('max_results');
    const parsed = asked === undefined ? MAX_HISTORY_BULK : Number(asked);
    if (!Number.isInteger(parsed)) throw invalid(`Invalid value "${asked}" for parameter 'max_results' supplied.`);
    const max = Math.min(parsed, MAX_HISTORY_BULK);
    const runIds = [...new Set(runIdsAsked)].sort();
    const visible = await runIdsOf(db, p.organizationId, runIds);
    // Each run's first points (in key order) up to what is left of max_results, as wire JSON written by Postgres.
    const pages: string[] = [];
    let left = max;
    for (const runId of runIds.filter((id) => visible.has(id))) {
      if (left <= 0) break;
      const page = await metricHistory(db, runId, key, { after: null, limit: left, withRunId: true, byTime: true });
      if (page.count) pages.push(page.json);
      left -= page.count;
    }
    return c.body(`{"metrics":[${pages.join(',')}]}`, 200, { 'content-type': 'application/json' });
  });

  /** The UI's dataset list: each (experiment, dataset name, digest, context) that runs used, at most 1000. */
  app.post('/experiments/search-datasets', async (c) => {
    const p = requireRole(c, 'viewer');
    const body = await mlflowRequest(c, SearchDatasetsSchema);
    const ids = body.experiment_ids ?? [];
    if (ids.length === 0) throw invalid('SearchDatasets request must specify at least one experiment_id.');
    if (ids.length > MAX_EXPERIMENTS_DATASETS)
      throw invalid(`SearchDatasets request cannot specify more than ${MAX_EXPERIMENTS_DATASETS} experiment_ids. Received ${ids.length} experiment_ids.`);
    const summaries = await datasetSummaries(
      db,
      p.organizationId,
      ids.map((id) => storedExperimentId(id, p.organizationId)),
    );
    return c.json({
      dataset_summaries: summaries.map((s) => ({
        experiment_id: wireExperimentId(s.experimentId, p.organizationId),
        name: s.name,
        digest: s.digest,
        ...(s.context !== null ? { context: s.context } : {}),
      })),
    });
  });
}

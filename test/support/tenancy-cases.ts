// The tenancy probe table: for every route the API serves, how org A's viewer, researcher and admin aim it at
// org B's resources (test/tenancy-probes.test.ts runs each case as each role, checks the answer, that nothing of
// B's shows and that nothing was written). A route with neither a case nor an exemption fails the suite.
//
// Adding a route? Add one line below, in its family:
//   refused('POST /v1/things/:id/frobnicate', 'researcher', (t) => ({ path: `/v1/things/${t.b.thingId}/frobnicate`, body: {} })),
// - the first argument is the route exactly as `app.routes` lists it (method and Hono path); an MLflow RPC goes in
//   MLFLOW without its prefix (`'POST runs/frobnicate'`) and is probed under /api/2.0/mlflow and /ajax-api/2.0/mlflow;
// - the second is the least of A's roles that may do this at all in its own organization (`operator`: none of
//   them): roles below it may also answer 403;
// - the probe fills the path, query and body with B's ids (t.b; a new kind of resource is created by B's admin in
//   populateOrgB, test/support/tenancy-world.ts) or aims A's own resource at B's (t.a, with a `label`);
// - B's admin then sends the same request and must succeed (reads before the probes, changes after them, in
//   `teardown` order): where that cannot work here, say why in `control`.
// Kinds: `refused` (404 RESOURCE_DOES_NOT_EXIST, or 403 PERMISSION_DENIED below `needs`), `list` (a listing or
// search of A's own: 2xx or 404, and none of B's strings), `invalid` (a create request naming B's resource as its
// input: 400 INVALID_PARAMETER_VALUE whose message matches `message`, or 404), `graphql` (the root fields that
// address one resource answer "not found", nothing of B's shows). Routes that address no tenant's resource go in
// EXEMPT with the reason. A real leak found on main stays a case and is listed in KNOWN_LEAKS (its probe then runs
// as `it.fails`, so the line must go when the leak is fixed).
import { EVENT_TOPICS } from '../../contracts/events.js';
import { ORG_B, type OrgA, type OrgB, type ProbeRole } from './tenancy-world.js';

export type Need = ProbeRole | 'approver' | 'operator';
export type Kind = 'refused' | 'list' | 'invalid' | 'graphql';

export interface Targets {
  a: OrgA;
  b: OrgB;
  /** a cursor before B's first event, and the non-audit events of A after it */
  events: { after: number; limit: number };
}

export interface ProbeRequest {
  /** default: the route's own method */
  method?: string;
  /** path and query string */
  path: string;
  /** JSON body, or a string sent as a raw upload */
  body?: unknown;
}

export interface TenancyCase {
  /** `METHOD path` as app.routes lists it */
  route: string;
  /** tells several cases of one route apart */
  label?: string;
  needs: Need;
  kind: Kind;
  probe(t: Targets): ProbeRequest;
  /** `invalid`: what the 400's message must say */
  message?: RegExp;
  /**
   * Why B's admin cannot send this request successfully here. Every other case is also sent by B's admin, who
   * must get a 2xx (a list: showing B's data), which proves that the probe addresses a real resource of B: reads
   * before the probes, changes after them.
   */
  control?: string;
  /** where no 2xx is possible here: the refusal B's admin gets instead, which still shows the resource was found */
  ownerGets?: { status: number; code: string };
  /** changes only: controls with a higher number run later (deletions after the changes that need the resource) */
  teardown?: number;
  /** a list's control: what B's answer shows (default: any of B's strings that the request did not send) */
  shows?: RegExp;
}

export const caseId = (c: Pick<TenancyCase, 'route' | 'label'>): string => (c.label ? `${c.route} [${c.label}]` : c.route);

const make =
  (kind: Kind) =>
  (route: string, needs: Need, probe: (t: Targets) => ProbeRequest, extra: Partial<TenancyCase> = {}): TenancyCase => ({ route, needs, kind, probe, ...extra });
const refused = make('refused');
const list = make('list');
const invalid = make('invalid');
const graphql = make('graphql');
const CROSS = "aims A's own resource at B's: B's admin cannot reach A's half";
const AWAITS_NO_APPROVAL = "B's pipeline never reaches its approval step (no worker runs it)";
/** B's version stays pending_registration: no worker copies its files. */
const STILL_REGISTERING = { ownerGets: { status: 409, code: 'INVALID_STATE' } };
const NEEDS_WORKER = "B's answer includes a query of its workflow, which only a worker answers (none runs here)";

const q = (params: Record<string, string | string[]>): string => {
  const s = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) for (const one of Array.isArray(v) ? v : [v]) s.append(k, one);
  return s.toString();
};

/** Every topic a viewer may follow. */
export const NON_AUDIT_TOPICS = EVENT_TOPICS.filter((t) => t !== 'audit').join(',');

/** A pipeline request whose input is B's dataset, by name (datasets are named per organization). */
const pipelineOnB = (t: Targets) => ({ model_name: 'probe-model', base_model: 'hanzo-tiny-llama', dataset: { name: t.b.datasetName, version: 'latest' } });

/** One GraphQL document with a root field per MLflow read the UI makes, each aimed at B. */
export const GRAPHQL_PROBE = `query Probe($run: String, $exp: String, $model: String) {
  run: mlflowGetRun(input: { runId: $run }) { apiError { code } run { info { runName runUuid } data { params { key value } metrics { key value } } } }
  experiment: mlflowGetExperiment(input: { experimentId: $exp }) { apiError { code } experiment { name } }
  artifacts: mlflowListArtifacts(input: { runId: $run }) { apiError { code } files { path } }
  history: mlflowGetMetricHistoryBulkInterval(input: { runIds: [$run], metricKey: "b_secret_metric", maxResults: 10 }) { apiError { code } metrics { runId key value } }
  runs: mlflowSearchRuns(input: { experimentIds: [$exp] }) { apiError { code } runs { info { runName runUuid } } }
  versions: mlflowSearchModelVersions(input: { filter: $model }) { apiError { code } modelVersions { name version } }
}`;
/** The root fields that address one resource of B's and must each answer "not found". */
export const GRAPHQL_NOT_FOUND = ['run', 'experiment', 'artifacts'];
const graphqlVariables = (t: Targets) => ({ run: t.b.runId, exp: t.b.experimentId, model: `name='${t.b.modelName}'` });

const V1: TenancyCase[] = [
  // identity
  refused('POST /v1/organizations', 'operator', (t) => ({ path: '/v1/organizations', body: { name: `${t.b.datasetName}-org` } }), {
    control: "only an admin of the operator's organization creates organizations, and B is not it",
  }),
  list('GET /v1/tokens', 'admin', () => ({ path: '/v1/tokens' })),
  refused('DELETE /v1/tokens/:id', 'admin', (t) => ({ path: `/v1/tokens/${t.b.tokenId}` }), { teardown: 3 }),
  list('GET /v1/audit', 'admin', () => ({ path: '/v1/audit?action=dataset.create' })),
  list('GET /v1/events', 'viewer', (t) => ({ path: `/v1/events?${q({ after: String(t.events.after), limit: String(t.events.limit), topics: NON_AUDIT_TOPICS })}` }), {
    control: 'B has its own count of events after the cursor; test/tenancy-probes.test.ts reads both streams in full',
  }),
  // datasets
  list('GET /v1/datasets', 'viewer', (t) => ({ path: `/v1/datasets?name=${t.b.datasetName}` })),
  refused('GET /v1/datasets/:id', 'viewer', (t) => ({ path: `/v1/datasets/${t.b.datasetId}` })),
  refused('GET /v1/datasets/:id/preview', 'viewer', (t) => ({ path: `/v1/datasets/${t.b.datasetId}/preview?n=5` })),
  refused('GET /v1/datasets/:id/download', 'viewer', (t) => ({ path: `/v1/datasets/${t.b.datasetId}/download?split=train` })),
  refused('POST /v1/datasets/:id/derive', 'researcher', (t) => ({ path: `/v1/datasets/${t.b.datasetId}/derive`, body: { operations: [{ op: 'dedup_exact' }] } })),
  // eval suites
  invalid('POST /v1/eval-suites', 'researcher', (t) => ({ path: '/v1/eval-suites', body: { name: 'probe-suite', version: 1, test: { dataset: `${t.b.datasetName}@1`, split: 'train' }, metrics: [{ task: 'test', metric: 'exact_match', direction: 'higher', max_regression: 0.05 }] } }), {
    message: /test\.dataset: dataset version "b-secret-ds@1" does not exist in this organization/,
  }),
  list('GET /v1/eval-suites', 'viewer', (t) => ({ path: `/v1/eval-suites?name=${t.b.evalSuiteName}` }), { shows: /b-secret-ds@1/ }),
  refused('GET /v1/eval-suites/:name/:version', 'viewer', (t) => ({ path: `/v1/eval-suites/${t.b.evalSuiteName}/1` })),
  // pipelines
  invalid('POST /v1/pipelines', 'researcher', (t) => ({ path: '/v1/pipelines', body: pipelineOnB(t) }), { message: /dataset: "b-secret-ds" has no version/ }),
  list('GET /v1/pipelines', 'viewer', () => ({ path: '/v1/pipelines' })),
  // jobs
  invalid('POST /v1/jobs', 'researcher', (t) => ({ path: '/v1/jobs', body: { type: 'training', recipe: { base_model: 'hanzo-tiny-llama', method: 'full', dataset: { name: t.b.datasetName } } } }), {
    message: /recipe\.dataset: "b-secret-ds" has no version/,
  }),
  invalid('POST /v1/jobs', 'researcher', (t) => ({ path: '/v1/jobs', body: { type: 'eval', eval: { source: { model: `${t.b.modelName}@1` }, dataset: { name: 'a-own-ds' } } } }), {
    label: "an eval of B's model version",
    message: /eval\.source\.model: no registered model "b-secret-model" in this organization/,
    control: "B's version was registered from a run's files without weights: there is nothing to score",
  }),
  invalid('POST /v1/jobs', 'researcher', (t) => ({ path: '/v1/jobs', body: { type: 'conversion', conversion: { source: { job: t.b.jobId }, dataset: { name: 'a-own-ds' }, register: { model_name: 'a-converted' } } } }), {
    label: "a conversion of B's job",
    message: /conversion\.source\.job: no job "[^"]+" in this organization/,
    control: "B's job is a command job: it has no adapter to convert",
  }),
  list('GET /v1/jobs', 'viewer', () => ({ path: '/v1/jobs' })),
  list('GET /v1/jobs', 'viewer', (t) => ({ path: `/v1/jobs?parent=pipeline:${t.b.pipelineId}` }), {
    label: "B's pipeline as the parent",
    control: "B's pipeline runs no stage here (no worker runs it), so it has no stage jobs for B's admin to list",
  }),
  refused('GET /v1/jobs/:id', 'viewer', (t) => ({ path: `/v1/jobs/${t.b.jobId}` })),
  refused('GET /v1/jobs/:id/events', 'viewer', (t) => ({ path: `/v1/jobs/${t.b.jobId}/events` })),
  refused('GET /v1/jobs/:id/logs', 'viewer', (t) => ({ path: `/v1/jobs/${t.b.jobId}/logs?follow=false` })),
  refused('POST /v1/jobs/:id/pause', 'researcher', (t) => ({ path: `/v1/jobs/${t.b.jobId}/pause`, body: {} })),
  // B's job is never paused (no worker runs its workflow): B's admin is refused for its state, which shows it was found.
  refused('POST /v1/jobs/:id/resume', 'researcher', (t) => ({ path: `/v1/jobs/${t.b.jobId}/resume`, body: {} }), { ownerGets: { status: 409, code: 'INVALID_STATE' } }),
  refused('POST /v1/jobs/:id/cancel', 'researcher', (t) => ({ path: `/v1/jobs/${t.b.jobId}/cancel`, body: {} }), { teardown: 1 }),
  // OpenAI-compatible fine-tuning: files are dataset versions, fine-tuning jobs are recipe jobs
  list('GET /v1/files', 'viewer', () => ({ path: '/v1/files' })),
  refused('GET /v1/files/:id', 'viewer', (t) => ({ path: `/v1/files/${t.b.datasetId}` })),
  refused('DELETE /v1/files/:id', 'researcher', (t) => ({ path: `/v1/files/${t.b.datasetId}` }), { ownerGets: { status: 409, code: 'INVALID_STATE' } }),
  invalid('POST /v1/fine_tuning/jobs', 'researcher', (t) => ({ path: '/v1/fine_tuning/jobs', body: { model: 'hanzo-tiny-llama', training_file: t.b.datasetId } }), {
    message: /training_file: file "[^"]+" does not exist/,
  }),
  list('GET /v1/fine_tuning/jobs', 'viewer', () => ({ path: '/v1/fine_tuning/jobs' })),
  refused('GET /v1/fine_tuning/jobs/:id', 'viewer', (t) => ({ path: `/v1/fine_tuning/jobs/${t.b.fineTuningJobId}` })),
  refused('GET /v1/fine_tuning/jobs/:id/events', 'viewer', (t) => ({ path: `/v1/fine_tuning/jobs/${t.b.fineTuningJobId}/events` })),
  refused('GET /v1/fine_tuning/jobs/:id/checkpoints', 'viewer', (t) => ({ path: `/v1/fine_tuning/jobs/${t.b.fineTuningJobId}/checkpoints` })),
  refused('POST /v1/fine_tuning/jobs/:id/pause', 'researcher', (t) => ({ path: `/v1/fine_tuning/jobs/${t.b.fineTuningJobId}/pause`, body: {} })),
  // B's fine-tuning job is never paused (no worker runs its workflow): B's admin is refused for its state.
  refused('POST /v1/fine_tuning/jobs/:id/resume', 'researcher', (t) => ({ path: `/v1/fine_tuning/jobs/${t.b.fineTuningJobId}/resume`, body: {} }), { ownerGets: { status: 409, code: 'INVALID_STATE' } }),
  refused('POST /v1/fine_tuning/jobs/:id/cancel', 'researcher', (t) => ({ path: `/v1/fine_tuning/jobs/${t.b.fineTuningJobId}/cancel`, body: {} }), { teardown: 1 }),
  refused('GET /v1/fine_tuning/jobs/:id', 'viewer', (t) => ({ path: `/v1/fine_tuning/jobs/${t.b.jobId}` }), {
    label: "B's command job",
    control: 'a command job is no fine-tuning job: B itself is answered 404 here',
  }),
  // webhooks
  list('GET /v1/webhooks', 'admin', () => ({ path: '/v1/webhooks' })),
  refused('GET /v1/webhooks/:id/deliveries', 'admin', (t) => ({ path: `/v1/webhooks/${t.b.webhookId}/deliveries` })),
  refused('DELETE /v1/webhooks/:id', 'admin', (t) => ({ path: `/v1/webhooks/${t.b.webhookId}` }), { teardown: 3 }),
  refused('GET /v1/pipelines/:id', 'viewer', (t) => ({ path: `/v1/pipelines/${t.b.pipelineId}` }), { control: NEEDS_WORKER }),
  refused('POST /v1/pipelines/:id/cancel', 'researcher', (t) => ({ path: `/v1/pipelines/${t.b.pipelineId}/cancel`, body: {} }), { teardown: 1 }),
  refused('POST /v1/pipelines/:id/approve', 'approver', (t) => ({ path: `/v1/pipelines/${t.b.pipelineId}/approve`, body: { reason: 'probe' } }), { control: AWAITS_NO_APPROVAL }),
  refused('POST /v1/pipelines/:id/reject', 'approver', (t) => ({ path: `/v1/pipelines/${t.b.pipelineId}/reject`, body: { reason: 'probe' } }), { control: AWAITS_NO_APPROVAL }),
  // experiments and runs
  list('GET /v1/experiments', 'viewer', () => ({ path: '/v1/experiments' })),
  refused('GET /v1/experiments/:id', 'viewer', (t) => ({ path: `/v1/experiments/${t.b.experimentId}` })),
  refused('GET /v1/experiments/:id/runs', 'viewer', (t) => ({ path: `/v1/experiments/${t.b.experimentId}/runs` })),
  refused('POST /v1/runs', 'researcher', (t) => ({ path: '/v1/runs', body: { experiment_id: t.b.experimentId, run_name: 'probe' } })),
  refused('GET /v1/runs/:id', 'viewer', (t) => ({ path: `/v1/runs/${t.b.runId}` })),
  refused('POST /v1/runs/:id/params', 'researcher', (t) => ({ path: `/v1/runs/${t.b.runId}/params`, body: { params: { probe: '1' } } })),
  refused('PATCH /v1/runs/:id/status', 'researcher', (t) => ({ path: `/v1/runs/${t.b.runId}/status`, body: { status: 'KILLED' } })),
  refused('GET /v1/runs/:id/metrics', 'viewer', (t) => ({ path: `/v1/runs/${t.b.runId}/metrics?key=${t.b.metricKey}` })),
  refused('GET /v1/runs/:id/metrics/:key{.+}/series', 'viewer', (t) => ({ path: `/v1/runs/${t.b.runId}/metrics/${t.b.metricKey}/series` })),
  refused('POST /v1/runs/series', 'viewer', (t) => ({ path: '/v1/runs/series', body: { run_ids: [t.b.runId], keys: [t.b.metricKey] } })),
  refused('GET /v1/stream', 'viewer', (t) => ({ path: `/v1/stream?topics=job:${t.b.jobId},run:${t.b.runId}:metrics` }), {
    control: "B's own page stream stays open (SSE): test/console-api.test.ts reads one and its cross-organization 404",
  }),
  refused('POST /v1/runs/:id/metrics', 'researcher', (t) => ({ path: `/v1/runs/${t.b.runId}/metrics`, body: { metrics: [{ key: 'probe', value: 1 }] } })),
  refused('POST /v1/runs/:id/artifacts', 'researcher', (t) => ({ path: `/v1/runs/${t.b.runId}/artifacts?path=${t.b.artifactPath}`, body: 'overwritten by A' })),
  refused('GET /v1/runs/:id/artifacts', 'viewer', (t) => ({ path: `/v1/runs/${t.b.runId}/artifacts` })),
  refused('GET /v1/runs/:id/artifacts/*', 'viewer', (t) => ({ path: `/v1/runs/${t.b.runId}/artifacts/${t.b.artifactPath}` })),
  // model registry
  list('GET /v1/models', 'viewer', () => ({ path: '/v1/models' })),
  refused('GET /v1/models/:name/versions', 'viewer', (t) => ({ path: `/v1/models/${t.b.modelName}/versions` })),
  refused('POST /v1/models/:name/versions', 'researcher', (t) => ({ path: `/v1/models/${t.b.modelName}/versions`, body: { run_id: t.b.runId, artifact_path: 'b-secret-dir' } }), { label: "B's model" }),
  refused('POST /v1/models/:name/versions', 'researcher', (t) => ({ path: `/v1/models/${t.a.modelName}/versions`, body: { run_id: t.b.runId, artifact_path: 'b-secret-dir' } }), { label: "A's model from B's run", control: CROSS }),
  refused('GET /v1/models/:name/versions/:version', 'viewer', (t) => ({ path: `/v1/models/${t.b.modelName}/versions/${t.b.version}` })),
  refused('GET /v1/models/:name/versions/:version/lineage', 'viewer', (t) => ({ path: `/v1/models/${t.b.modelName}/versions/${t.b.version}/lineage` })),
  refused('GET /v1/models/:name/versions/:version/artifacts/:format/*', 'viewer', (t) => ({ path: `/v1/models/${t.b.modelName}/versions/${t.b.version}/artifacts/hf/manifest.json` }), {
    control: "B's version stays pending_registration (no worker copies its files), so its files cannot be read here",
  }),
  refused('POST /v1/models/:name/versions/:version/evaluate', 'researcher', (t) => ({ path: `/v1/models/${t.b.modelName}/versions/${t.b.version}/evaluate`, body: { dataset: { name: 'b-secret-ds' } } }), {
    // B's version stays pending_registration: its eval job is refused, naming the version it found.
    ownerGets: { status: 400, code: 'INVALID_PARAMETER_VALUE' },
  }),
  refused('PATCH /v1/models/:name/versions/:version/stage', 'researcher', (t) => ({ path: `/v1/models/${t.b.modelName}/versions/${t.b.version}/stage`, body: { stage: 'staging' } }), STILL_REGISTERING),
  // schedules
  invalid('POST /v1/schedules', 'researcher', (t) => ({ path: '/v1/schedules', body: { name: 'probe-schedule', every: '1d', paused: true, pipeline: pipelineOnB(t) } }), {
    message: /dataset: "b-secret-ds" has no version/,
  }),
  list('GET /v1/schedules', 'viewer', () => ({ path: '/v1/schedules' })),
  refused('GET /v1/schedules/:id', 'viewer', (t) => ({ path: `/v1/schedules/${t.b.scheduleId}` })),
  refused('GET /v1/schedules/:id', 'viewer', (t) => ({ path: `/v1/schedules/${t.b.scheduleName}` }), { label: 'by name' }),
  refused('POST /v1/schedules/:id/pause', 'researcher', (t) => ({ path: `/v1/schedules/${t.b.scheduleId}/pause`, body: {} })),
  refused('POST /v1/schedules/:id/unpause', 'researcher', (t) => ({ path: `/v1/schedules/${t.b.scheduleId}/unpause`, body: {} })),
  refused('DELETE /v1/schedules/:id', 'admin', (t) => ({ path: `/v1/schedules/${t.b.scheduleId}` }), { teardown: 3 }),
  // HPO
  invalid(
    'POST /v1/hpo',
    'researcher',
    (t) => ({
      path: '/v1/hpo',
      body: {
        experiment: 'probe-sweep',
        base_config: { method: 'lora', model: 'hanzo-tiny-llama', dataset: t.b.datasetName, max_steps: 2, eval_steps: 1 },
        search_space: { learning_rate: { type: 'log_uniform', min: 1e-5, max: 1e-3 } },
        objective: { metric: 'eval/loss', direction: 'minimize' },
        max_trials: 1,
      },
    }),
    { message: /b-secret-ds/ },
  ),
  list('GET /v1/hpo', 'viewer', () => ({ path: '/v1/hpo' })),
  refused('GET /v1/hpo/:id', 'viewer', (t) => ({ path: `/v1/hpo/${t.b.sweepId}` }), { control: NEEDS_WORKER }),
  refused('GET /v1/hpo/:id/trials', 'viewer', (t) => ({ path: `/v1/hpo/${t.b.sweepId}/trials` })),
  refused('GET /v1/hpo/:id/trial-points', 'viewer', (t) => ({ path: `/v1/hpo/${t.b.sweepId}/trial-points` })),
  refused('GET /v1/hpo/:id/lineage', 'viewer', (t) => ({ path: `/v1/hpo/${t.b.sweepId}/lineage` })),
  refused('POST /v1/hpo/:id/cancel', 'researcher', (t) => ({ path: `/v1/hpo/${t.b.sweepId}/cancel`, body: {} }), { teardown: 1 }),
  // queues
  list('GET /v1/queues', 'viewer', () => ({ path: '/v1/queues' })),
  // usage
  list('GET /v1/usage', 'viewer', () => ({ path: '/v1/usage' })),
  refused('GET /v1/usage', 'viewer', () => ({ path: `/v1/usage?organization=${ORG_B}` }), { label: "B's organization named" }),
];

/** MLflow RPCs, written without their prefix: each runs under /api/2.0/mlflow and /ajax-api/2.0/mlflow. */
const MLFLOW: TenancyCase[] = [
  // experiments
  refused('GET experiments/get-by-name', 'viewer', (t) => ({ path: `experiments/get-by-name?experiment_name=${t.b.experimentName}` })),
  refused('GET experiments/get', 'viewer', (t) => ({ path: `experiments/get?experiment_id=${t.b.experimentId}` })),
  list('GET experiments/search', 'viewer', () => ({ path: `experiments/search?${q({ max_results: '1000', view_type: 'ALL' })}` })),
  list('POST experiments/search', 'viewer', () => ({ path: 'experiments/search', body: { max_results: 1000, view_type: 'ALL' } })),
  refused('POST experiments/delete', 'admin', (t) => ({ path: 'experiments/delete', body: { experiment_id: t.b.experimentId } }), { teardown: 6 }),
  refused('POST experiments/restore', 'admin', (t) => ({ path: 'experiments/restore', body: { experiment_id: t.b.experimentId } }), { teardown: 7 }),
  refused('POST experiments/update', 'researcher', (t) => ({ path: 'experiments/update', body: { experiment_id: t.b.experimentId, new_name: 'renamed-by-a' } })),
  refused('POST experiments/set-experiment-tag', 'researcher', (t) => ({ path: 'experiments/set-experiment-tag', body: { experiment_id: t.b.experimentId, key: 'probe', value: 'a' } })),
  refused('POST experiments/delete-experiment-tag', 'researcher', (t) => ({ path: 'experiments/delete-experiment-tag', body: { experiment_id: t.b.experimentId, key: t.b.tagKey } }), { teardown: 2 }),
  list('POST experiments/search-datasets', 'viewer', (t) => ({ path: 'experiments/search-datasets', body: { experiment_ids: [t.b.experimentId] } })),
  // runs
  refused('POST runs/create', 'researcher', (t) => ({ path: 'runs/create', body: { experiment_id: t.b.experimentId, run_name: 'probe' } })),
  refused('GET runs/get', 'viewer', (t) => ({ path: `runs/get?run_id=${t.b.runId}` })),
  refused('POST runs/update', 'researcher', (t) => ({ path: 'runs/update', body: { run_id: t.b.runId, status: 'KILLED' } })),
  refused('POST runs/delete', 'admin', (t) => ({ path: 'runs/delete', body: { run_id: t.b.runId } }), { teardown: 4 }),
  refused('POST runs/restore', 'admin', (t) => ({ path: 'runs/restore', body: { run_id: t.b.runId } }), { teardown: 5 }),
  refused('POST runs/log-metric', 'researcher', (t) => ({ path: 'runs/log-metric', body: { run_id: t.b.runId, key: 'probe', value: 1, timestamp: 1, step: 0 } })),
  refused('POST runs/log-parameter', 'researcher', (t) => ({ path: 'runs/log-parameter', body: { run_id: t.b.runId, key: 'probe', value: '1' } })),
  refused('POST runs/set-tag', 'researcher', (t) => ({ path: 'runs/set-tag', body: { run_id: t.b.runId, key: 'probe', value: '1' } })),
  refused('POST runs/delete-tag', 'researcher', (t) => ({ path: 'runs/delete-tag', body: { run_id: t.b.runId, key: t.b.tagKey } }), { teardown: 2 }),
  refused('POST runs/log-batch', 'researcher', (t) => ({ path: 'runs/log-batch', body: { run_id: t.b.runId, metrics: [{ key: 'probe', value: 1, timestamp: 1, step: 0 }] } })),
  list('GET runs/search', 'viewer', (t) => ({ path: `runs/search?${q({ experiment_ids: [t.b.experimentId] })}` })),
  list('POST runs/search', 'viewer', (t) => ({ path: 'runs/search', body: { experiment_ids: [t.b.experimentId] } })),
  refused('POST runs/log-inputs', 'researcher', (t) => ({ path: 'runs/log-inputs', body: { run_id: t.b.runId, datasets: [{ tags: [], dataset: { name: 'probe', digest: 'p', source_type: 'local', source: '{}' } }] } })),
  refused('POST runs/log-inputs', 'researcher', (t) => ({ path: 'runs/log-inputs', body: { run_id: t.a.runId, models: [{ model_id: t.b.loggedModelId }] } }), { label: "A's run, B's logged model", control: CROSS }),
  refused('POST runs/outputs', 'researcher', (t) => ({ path: 'runs/outputs', body: { run_id: t.b.runId, models: [{ model_id: t.b.loggedModelId, step: 0 }] } })),
  refused('POST runs/outputs', 'researcher', (t) => ({ path: 'runs/outputs', body: { run_id: t.a.runId, models: [{ model_id: t.b.loggedModelId, step: 0 }] } }), { label: "A's run, B's logged model", control: CROSS }),
  // metrics
  refused('GET metrics/get-history', 'viewer', (t) => ({ path: `metrics/get-history?${q({ run_id: t.b.runId, metric_key: t.b.metricKey })}` })),
  // Bulk reads answer the points of the runs among those asked that the caller may read (none of B's).
  list('GET metrics/get-history-bulk', 'viewer', (t) => ({ path: `metrics/get-history-bulk?${q({ run_id: t.b.runId, metric_key: t.b.metricKey })}` }), { shows: /"value":0\.5/ }),
  list('GET metrics/get-history-bulk-interval', 'viewer', (t) => ({ path: `metrics/get-history-bulk-interval?${q({ run_ids: t.b.runId, metric_key: t.b.metricKey })}` }), { shows: /"value":0\.5/ }),
  // registered models
  refused('GET registered-models/get', 'viewer', (t) => ({ path: `registered-models/get?name=${t.b.modelName}` })),
  refused('POST registered-models/rename', 'researcher', (t) => ({ path: 'registered-models/rename', body: { name: t.b.modelName, new_name: 'renamed-by-a' } }), {
    control: "B's model is gone by then: registered-models/delete's control deletes it, and the other controls need its name",
  }),
  refused('PATCH registered-models/update', 'researcher', (t) => ({ path: 'registered-models/update', body: { name: t.b.modelName, description: 'a' } })),
  refused('POST registered-models/update', 'researcher', (t) => ({ path: 'registered-models/update', body: { name: t.b.modelName, description: 'a' } })),
  refused('DELETE registered-models/delete', 'admin', (t) => ({ path: 'registered-models/delete', body: { name: t.b.modelName } }), { teardown: 8 }),
  list('GET registered-models/search', 'viewer', (t) => ({ path: `registered-models/search?${q({ filter: `name='${t.b.modelName}'` })}` })),
  list('POST registered-models/search', 'viewer', () => ({ path: 'registered-models/search', body: { max_results: 1000 } })),
  refused('GET registered-models/get-latest-versions', 'viewer', (t) => ({ path: `registered-models/get-latest-versions?name=${t.b.modelName}` })),
  refused('POST registered-models/get-latest-versions', 'viewer', (t) => ({ path: 'registered-models/get-latest-versions', body: { name: t.b.modelName } })),
  refused('POST registered-models/set-tag', 'researcher', (t) => ({ path: 'registered-models/set-tag', body: { name: t.b.modelName, key: 'probe', value: 'a' } })),
  refused('DELETE registered-models/delete-tag', 'researcher', (t) => ({ path: 'registered-models/delete-tag', body: { name: t.b.modelName, key: t.b.tagKey } }), { teardown: 2 }),
  refused('POST registered-models/alias', 'admin', (t) => ({ path: 'registered-models/alias', body: { name: t.b.modelName, alias: 'probe', version: t.b.version } })),
  refused('DELETE registered-models/alias', 'admin', (t) => ({ path: 'registered-models/alias', body: { name: t.b.modelName, alias: t.b.alias } }), { teardown: 2 }),
  refused('GET registered-models/alias', 'viewer', (t) => ({ path: `registered-models/alias?${q({ name: t.b.modelName, alias: t.b.alias })}` })),
  // model versions
  refused('POST model-versions/create', 'researcher', (t) => ({ path: 'model-versions/create', body: { name: t.b.modelName, source: `runs:/${t.b.runId}/b-secret-dir`, run_id: t.b.runId } }), { label: "B's model" }),
  refused('POST model-versions/create', 'researcher', (t) => ({ path: 'model-versions/create', body: { name: t.a.modelName, source: `runs:/${t.b.runId}/b-secret-dir`, run_id: t.b.runId } }), {
    label: "A's model from B's run",
    control: CROSS,
  }),
  invalid('POST model-versions/create', 'researcher', (t) => ({ path: 'model-versions/create', body: { name: t.a.modelName, source: `mlflow-artifacts:/${t.b.proxyPath}`, run_id: t.a.runId } }), {
    label: "A's model from B's proxied files",
    message: /Invalid model version source/,
    control: CROSS,
  }),
  refused('POST model-versions/create', 'researcher', (t) => ({ path: 'model-versions/create', body: { name: t.a.modelName, source: `models:/${t.b.modelName}/${t.b.version}` } }), {
    label: "A's model copied from B's version",
    control: CROSS,
  }),
  refused('GET model-versions/get', 'viewer', (t) => ({ path: `model-versions/get?${q({ name: t.b.modelName, version: t.b.version })}` })),
  refused('PATCH model-versions/update', 'researcher', (t) => ({ path: 'model-versions/update', body: { name: t.b.modelName, version: t.b.version, description: 'a' } })),
  refused('POST model-versions/update', 'researcher', (t) => ({ path: 'model-versions/update', body: { name: t.b.modelName, version: t.b.version, description: 'a' } })),
  refused('DELETE model-versions/delete', 'admin', (t) => ({ path: 'model-versions/delete', body: { name: t.b.modelName, version: t.b.version } }), { teardown: 3 }),
  refused('POST model-versions/transition-stage', 'researcher', (t) => ({ path: 'model-versions/transition-stage', body: { name: t.b.modelName, version: t.b.version, stage: 'Staging', archive_existing_versions: false } }), STILL_REGISTERING),
  refused('POST model-versions/set-tag', 'researcher', (t) => ({ path: 'model-versions/set-tag', body: { name: t.b.modelName, version: t.b.version, key: 'probe', value: 'a' } })),
  refused('DELETE model-versions/delete-tag', 'researcher', (t) => ({ path: 'model-versions/delete-tag', body: { name: t.b.modelName, version: t.b.version, key: 'probe' } }), { teardown: 2 }),
  refused('GET model-versions/get-download-uri', 'viewer', (t) => ({ path: `model-versions/get-download-uri?${q({ name: t.b.modelName, version: t.b.version })}` })),
  list('GET model-versions/search', 'viewer', (t) => ({ path: `model-versions/search?${q({ filter: `name='${t.b.modelName}'` })}` })),
  list('POST model-versions/search', 'viewer', (t) => ({ path: 'model-versions/search', body: { filter: `run_id='${t.b.runId}'` } })),
  // run artifacts
  refused('POST upload-artifact', 'researcher', (t) => ({ path: `upload-artifact?${q({ run_uuid: t.b.runId, path: t.b.artifactPath })}`, body: 'overwritten by A' })),
  refused('GET artifacts/list', 'viewer', (t) => ({ path: `artifacts/list?run_id=${t.b.runId}` })),
  // logged models
  refused('POST logged-models', 'researcher', (t) => ({ path: 'logged-models', body: { experiment_id: t.b.experimentId, name: 'probe' } })),
  refused('POST logged-models', 'researcher', (t) => ({ path: 'logged-models', body: { experiment_id: '0', name: 'probe', source_run_id: t.b.runId } }), { label: "A's experiment, B's run as source", control: CROSS }),
  list('GET logged-models/search', 'viewer', (t) => ({ path: `logged-models/search?${q({ experiment_ids: t.b.experimentId })}` })),
  list('POST logged-models/search', 'viewer', (t) => ({ path: 'logged-models/search', body: { experiment_ids: [t.b.experimentId] } })),
  refused('GET logged-models/:id', 'viewer', (t) => ({ path: `logged-models/${t.b.loggedModelId}` })),
  refused('PATCH logged-models/:id', 'researcher', (t) => ({ path: `logged-models/${t.b.loggedModelId}`, body: { model_id: t.b.loggedModelId, status: 'LOGGED_MODEL_UPLOAD_FAILED' } })),
  refused('DELETE logged-models/:id', 'admin', (t) => ({ path: `logged-models/${t.b.loggedModelId}` }), { teardown: 3 }),
  refused('PATCH logged-models/:id/tags', 'researcher', (t) => ({ path: `logged-models/${t.b.loggedModelId}/tags`, body: { tags: [{ key: 'probe', value: 'a' }] } })),
  refused('DELETE logged-models/:id/tags/:key', 'researcher', (t) => ({ path: `logged-models/${t.b.loggedModelId}/tags/probe` }), { teardown: 2 }),
  refused('POST logged-models/:id/params', 'researcher', (t) => ({ path: `logged-models/${t.b.loggedModelId}/params`, body: { params: [{ key: 'probe', value: 'a' }] } })),
  refused('GET logged-models/:id/artifacts/directories', 'viewer', (t) => ({ path: `logged-models/${t.b.loggedModelId}/artifacts/directories` })),
  refused('GET logged-models/:id/artifacts/files', 'viewer', (t) => ({ path: `logged-models/${t.b.loggedModelId}/artifacts/files?artifact_file_path=MLmodel` }), {
    control: 'B logged no files under its logged model, so B itself is answered "no such artifact"',
  }),
];

/** The artifact proxy, written without its prefix: each runs under /api/2.0/mlflow-artifacts and /ajax-api/2.0/mlflow-artifacts. */
const MLFLOW_ARTIFACTS: TenancyCase[] = [
  list('GET artifacts', 'viewer', (t) => ({ path: `artifacts?path=${t.b.experimentId}/${t.b.runId}/artifacts` })),
  refused('GET artifacts/*', 'viewer', (t) => ({ path: `artifacts/${t.b.proxyPath}` })),
  refused('PUT artifacts/*', 'researcher', (t) => ({ path: `artifacts/${t.b.proxyPath}`, body: 'overwritten by A' })),
  refused('DELETE artifacts/*', 'admin', (t) => ({ path: `artifacts/${t.b.proxyPath}` }), { teardown: 3 }),
  list('GET artifacts', 'viewer', () => ({ path: 'artifacts?path=b-secret-free' }), { label: 'outside experiments', shows: /b-secret\.txt/ }),
  refused('GET artifacts/*', 'viewer', (t) => ({ path: `artifacts/${t.b.freeProxyPath}` }), { label: 'outside experiments' }),
  refused('PUT artifacts/*', 'researcher', (t) => ({ path: `artifacts/${t.b.freeProxyPath}`, body: 'overwritten by A' }), { label: 'outside experiments' }),
  refused('DELETE artifacts/*', 'admin', (t) => ({ path: `artifacts/${t.b.freeProxyPath}` }), { label: 'outside experiments', teardown: 3 }),
];

const TOP_LEVEL: TenancyCase[] = [
  refused('GET /get-artifact', 'viewer', (t) => ({ path: `/get-artifact?${q({ run_uuid: t.b.runId, path: t.b.artifactPath })}` })),
  graphql('POST /graphql', 'viewer', (t) => ({ path: '/graphql', body: { query: GRAPHQL_PROBE, variables: graphqlVariables(t) } })),
  graphql('GET /graphql', 'viewer', (t) => ({ path: `/graphql?${q({ query: GRAPHQL_PROBE, variables: JSON.stringify(graphqlVariables(t)) })}` })),
  // The MLflow UI's API calls, answered by the app under /mlflow/ (reads only).
  refused('ALL /mlflow/ajax-api/*', 'viewer', (t) => ({ method: 'GET', path: `/mlflow/ajax-api/2.0/mlflow/runs/get?run_id=${t.b.runId}` })),
  refused('ALL /mlflow/api/*', 'viewer', (t) => ({ method: 'GET', path: `/mlflow/api/2.0/mlflow/experiments/get?experiment_id=${t.b.experimentId}` })),
  refused('ALL /mlflow/get-artifact', 'viewer', (t) => ({ method: 'GET', path: `/mlflow/get-artifact?${q({ run_uuid: t.b.runId, path: t.b.artifactPath })}` })),
  graphql('ALL /mlflow/graphql', 'viewer', (t) => ({ method: 'POST', path: '/mlflow/graphql', body: { query: GRAPHQL_PROBE, variables: graphqlVariables(t) } })),
];

const prefixed = (prefixes: string[], cases: TenancyCase[]): TenancyCase[] =>
  prefixes.flatMap((prefix) =>
    cases.map((c) => {
      const [method, rpc] = c.route.split(' ') as [string, string];
      return { ...c, route: `${method} ${prefix}/${rpc}`, probe: (t: Targets) => ({ ...c.probe(t), path: `${prefix}/${c.probe(t).path}` }) };
    }),
  );

export const CASES: TenancyCase[] = [
  ...V1,
  ...prefixed(['/api/2.0/mlflow', '/ajax-api/2.0/mlflow'], MLFLOW),
  ...prefixed(['/api/2.0/mlflow-artifacts', '/ajax-api/2.0/mlflow-artifacts'], MLFLOW_ARTIFACTS),
  ...TOP_LEVEL,
];

/** Routes that address no tenant's resource, each with the reason. */
export const EXEMPT: Record<string, string> = {
  'GET /alive': 'liveness probe: no data',
  'GET /ready': 'readiness probe: reports the catalogue and Temporal reachable, no tenant data',
  'GET /openapi.json': 'the API description, the same for everyone',
  'GET /health': "MLflow client's probe: a constant",
  'GET /version': "MLflow client's probe: a constant",
  'GET /api/3.0/mlflow/server-info': "MLflow client's capability check: constants",
  'GET /ajax-api/3.0/mlflow/server-info': "MLflow client's capability check: constants",
  'GET /mlflow': 'redirect to the UI page',
  'GET /mlflow/': "the UI's static page, the same for everyone",
  'GET /mlflow/static-files/*': "the UI's static build, the same for everyone",
  'POST /v1/session': "signs the caller in with their own token (a console session cookie); names no resource",
  'GET /v1/session': "the caller's own console session: who they are and its CSRF token",
  'DELETE /v1/session': "signs the caller's own console session out",
  'GET /v1/session/options': 'how the console signs in (token, or the IAM): the same for everyone',
  'GET /assets/*': "the console's static build, the same for everyone",
  'POST /v1/estimates/memory': 'sizes a fine-tune of an allowed base model on a GPU; reads no tenant data and writes nothing',
  'POST /v1/tokens': "creates a token in the caller's own organization; the body names no organization (strict schema)",
  'GET /downloads/datasets/:id/:split': 'no bearer token: the HMAC over the version, split and expiry is the credential (test/datasets-read.test.ts refuses a changed or expired URL)',
  'POST /v1/datasets': "creates a version in the caller's own organization; its only location input (?tokenizer=) is the path checks' concern",
  'POST /v1/files': "creates a dataset version in the caller's own organization from the uploaded form; it names no other resource",
  'POST /v1/webhooks': "creates an endpoint in the caller's own organization; its URL names no tenant's resource (private addresses are refused at send time)",
  'POST /v1/experiments': "creates an experiment in the caller's own organization (names are per organization)",
  'POST /v1/models': "creates a model in the caller's own organization (names are per organization)",
  ...Object.fromEntries(
    ['/api/2.0/mlflow', '/ajax-api/2.0/mlflow'].flatMap((p) => [
      [`POST ${p}/experiments/create`, "creates an experiment in the caller's own organization (names are per organization)"],
      [`POST ${p}/registered-models/create`, "creates a model in the caller's own organization (names are per organization)"],
    ]),
  ),
  ...Object.fromEntries(
    ['/api/2.0/mlflow-artifacts', '/ajax-api/2.0/mlflow-artifacts'].flatMap((p) => [
      ...['create', 'complete', 'abort'].map((op) => [`POST ${p}/mpu/${op}`, 'multipart upload: not implemented (501) for anyone']),
      [`GET ${p}/presigned/*`, 'presigned upload: not implemented (501) for anyone'],
    ]),
  ),
};

/**
 * Real leaks on main, by `caseId|role`, each with one line on what leaks. Their probes run as `it.fails`: when a
 * fix lands they fail until the line is removed here.
 */
export const KNOWN_LEAKS: Record<string, string> = {};

export interface RouteEntry {
  method: string;
  path: string;
}

/** Routes of the table with neither a case nor an exemption (`METHOD path`). */
export function uncoveredRoutes(routes: RouteEntry[], cases: Pick<TenancyCase, 'route'>[] = CASES, exempt: Record<string, string> = EXEMPT): string[] {
  const covered = new Set([...cases.map((c) => c.route), ...Object.keys(exempt)]);
  return [...new Set(routes.map((r) => `${r.method} ${r.path}`))].filter((r) => !covered.has(r));
}

/** Cases and exemptions naming a route the table does not have (a renamed or removed route). */
export function staleEntries(routes: RouteEntry[], cases: Pick<TenancyCase, 'route'>[] = CASES, exempt: Record<string, string> = EXEMPT): string[] {
  const served = new Set(routes.map((r) => `${r.method} ${r.path}`));
  return [...new Set([...cases.map((c) => c.route), ...Object.keys(exempt)])].filter((r) => !served.has(r));
}

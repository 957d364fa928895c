// OpenAPI 3.1 document generated from the app's own route table and the contracts (zod -> JSON Schema); served
// at /openapi.json. Every registered route is in it: its paths come from the router, so a new route cannot be
// missing; what a route takes and answers comes from its contract schemas (the /v1 operations below, and the
// MLflow request schemas by RPC path).
import { z } from 'zod';
import * as mlflow from '../contracts/mlflow.js';
import * as mlflowArtifacts from '../contracts/mlflow-artifacts.js';
import * as registry from '../contracts/models.js';
import { PipelineInputSchema, PipelineProgressSchema, PipelineResultSchema, ScheduleCreateSchema, ApprovalRequestSchema } from '../contracts/pipeline.js';
import { DatasetSchema, DatasetCreateQuerySchema, DatasetDownloadQuerySchema, DatasetDownloadSchema, DatasetListQuerySchema, DatasetPreviewQuerySchema, DeriveAcceptedSchema } from '../contracts/datasets.js';
import { DeriveRequestSchema } from '../contracts/data-prep.js';
import { EvalSuiteViewSchema } from '../contracts/eval-suite.js';
import { RunCreateSchema, RunParamsSchema, RunSchema, RunStatusUpdateSchema } from '../contracts/runs.js';
import { ModelCreateSchema, ModelVersionCreateSchema, ModelVersionSchema, RegisteredModelSchema, StageChangeResultSchema, StageChangeSchema, EvaluateVersionSchema, ModelLineageSchema } from '../contracts/models.js';
import { ErrorBodySchema } from './errors.js';
import { SessionLoginSchema, SessionViewSchema } from '../contracts/console-session.js';
import {
  CreateLoggedModelSchema,
  ListArtifactsSchema,
  LogInputsSchema,
  LogOutputsSchema,
  ProxyListSchema,
  RunArtifactListQuerySchema,
  RunArtifactListSchema,
  RunArtifactSchema,
  RunArtifactUploadQuerySchema,
  SearchLoggedModelsSchema,
} from '../contracts/mlflow-artifacts.js';
import { DryRunQuerySchema, UsageQuerySchema, UsageReportSchema } from '../contracts/cost.js';
import { HpoStartResponseSchema, SweepConfigSchema, TrialPointsSchema, TrialsQuerySchema } from '../contracts/hpo.js';
import { CursorListQuerySchema, FileListQuerySchema, FineTuningJobCreateSchema, FineTuningListQuerySchema, WebhookEndpointCreateSchema } from '../contracts/openai.js';
import { JobDetailSchema, JobDryRunSchema, JobListItemSchema, JobListQuerySchema, JobSubmissionSchema, JobViewSchema, ResumeRequestSchema } from '../contracts/jobs.js';
import { JobEventsQuerySchema, JobLogsQuerySchema } from './routes/job-streams.js';
import { MemoryEstimateRequestSchema, MemoryEstimateSchema, RunsPageQuerySchema, RunsPageSchema, SeriesBatchRequestSchema, SeriesBatchSchema, SeriesQuerySchema, SeriesSchema, StreamQuerySchema } from '../contracts/console.js';

interface Operation {
  method: 'get' | 'post' | 'put' | 'delete' | 'patch';
  path: string;
  summary: string;
  body?: z.ZodType;
  rawBody?: string;
  query?: z.ZodObject;
  response?: z.ZodType;
}

const js = (s: z.ZodType) => z.toJSONSchema(s, { io: 'input', unrepresentable: 'any' });

const OPERATIONS: Operation[] = [
  { method: 'post', path: '/v1/session', summary: "Sign in to the console with a token: sets the HttpOnly session cookie and the CSRF cookie (writes by cookie repeat it in x-csrf-token)", body: SessionLoginSchema, response: SessionViewSchema },
  { method: 'get', path: '/v1/session', summary: 'Who the caller is, by cookie or token, and the CSRF token of a cookie session', response: SessionViewSchema },
  { method: 'delete', path: '/v1/session', summary: 'Sign out of the console: clears its cookies' },
  { method: 'get', path: '/v1/session/options', summary: 'How the console signs in: {oidc: true} with auth.iam_url and auth.console_client_id' },
  { method: 'get', path: '/v1/session/oidc/start', summary: "Starts the console's IAM login (OIDC authorization code with PKCE): a redirect to the IAM" },
  { method: 'get', path: '/v1/session/oidc/callback', summary: "The IAM's redirect back: checks state and nonce, exchanges the code with the PKCE verifier, sets the session cookies" },
  { method: 'post', path: '/v1/datasets', summary: 'Upload a dataset file (JSONL, CSV, Parquet, Arrow or text body, optionally .gz/.zst) as a new immutable version, prepared by a job (wait=false, the default: 201 preparing with its job_id; wait=true: waits for the job); 400 names each bad record', rawBody: 'application/octet-stream', query: DatasetCreateQuerySchema, response: DatasetSchema },
  { method: 'get', path: '/v1/datasets', summary: 'List dataset versions, by name and by any of some tags', query: DatasetListQuerySchema, response: z.object({ datasets: z.array(DatasetSchema) }) },
  { method: 'get', path: '/v1/datasets/{id}', summary: 'Get a dataset version (a version being derived: 404 until it is stored)', response: DatasetSchema },
  { method: 'post', path: '/v1/datasets/{id}/derive', summary: 'Derive a new version by prepare-dataset operations, as a job (202: the job id and the id the version will have)', body: DeriveRequestSchema, response: DeriveAcceptedSchema },
  { method: 'get', path: '/v1/datasets/{id}/preview', summary: "The first n (at most 100) records of a split", query: DatasetPreviewQuerySchema, response: z.object({ id: z.string(), split: z.string(), records: z.array(z.unknown()) }) },
  { method: 'get', path: '/v1/datasets/{id}/download', summary: "An expiring URL of a split's JSONL file (pre-signed S3, or signed by the API for the file store)", query: DatasetDownloadQuerySchema, response: DatasetDownloadSchema },
  { method: 'get', path: '/downloads/datasets/{id}/{split}', summary: 'A split file by a signed URL from GET /v1/datasets/{id}/download (no token; an expired or changed URL is refused)' },
  { method: 'post', path: '/v1/eval-suites', summary: "Register an eval suite of the caller's organization (JSON, or YAML with content-type application/yaml); 409 for a version that exists", rawBody: 'application/json', response: EvalSuiteViewSchema },
  { method: 'get', path: '/v1/eval-suites', summary: "List the organization's own eval suites and the bundled ones", response: z.object({ eval_suites: z.array(EvalSuiteViewSchema) }) },
  { method: 'get', path: '/v1/eval-suites/{name}/{version}', summary: "Get an eval suite: the organization's own first, else the bundled one", response: EvalSuiteViewSchema },
  {
    method: 'post',
    path: '/v1/pipelines',
    summary: 'Start a fine-tuning pipeline (402 when its estimate exceeds what is left of the monthly budget); ?dry_run=true answers its cost estimate (PipelineDryRun) and starts nothing',
    body: PipelineInputSchema,
    query: DryRunQuerySchema,
    response: z.object({ id: z.string(), workflow_id: z.string(), temporal_ui_url: z.string().nullable() }),
  },
  { method: 'get', path: '/v1/usage', summary: "Device-hours, dollars and jobs of the month's finished train jobs, per organization", query: UsageQuerySchema, response: UsageReportSchema },
  { method: 'get', path: '/v1/pipelines', summary: 'List pipelines' },
  {
    method: 'get',
    path: '/v1/pipelines/{id}',
    summary: 'Pipeline status, progress (stage, step, latest metrics) and result',
    response: z.object({ id: z.string(), status: z.string(), progress: PipelineProgressSchema, result: PipelineResultSchema.nullable() }),
  },
  { method: 'post', path: '/v1/pipelines/{id}/approve', summary: 'Approve promotion to production', body: ApprovalRequestSchema },
  { method: 'post', path: '/v1/pipelines/{id}/reject', summary: 'Reject promotion', body: ApprovalRequestSchema },
  { method: 'post', path: '/v1/jobs', summary: 'Submit a job (spec 000 Job Submission, JSON or YAML with content-type application/yaml); Idempotency-Key header: a retried submit returns the same job; 402 when its estimate exceeds what is left of the monthly budget; ?dry_run=true answers its cost estimate (JobDryRun) and queues nothing', body: JobSubmissionSchema, query: DryRunQuerySchema, response: z.union([JobViewSchema, JobDryRunSchema]) },
  { method: 'get', path: '/v1/jobs', summary: "The organization's jobs, newest first", query: JobListQuerySchema, response: z.object({ jobs: z.array(JobListItemSchema), next_cursor: z.string().nullable() }) },
  { method: 'get', path: '/v1/jobs/{id}', summary: 'A job: status, queue place, segments, attempts, preemptions, checkpoints with their metrics, progress and ETA, GPU-hours and cost so far', response: JobDetailSchema },
  {
    method: 'get',
    path: '/v1/jobs/{id}/events',
    summary: "A job's events, oldest first: a JSON page ({data, has_more, next_cursor}); with Accept: text/event-stream a stream (event id: the event's id) resuming after Last-Event-ID, until the job ends",
    query: JobEventsQuerySchema,
  },
  {
    method: 'get',
    path: '/v1/jobs/{id}/logs',
    summary: "A job's output as server-sent events from a byte offset ({\"text\"} of whole lines, id: the offset after them), following while it runs, ending with an `end` event carrying its outcome",
    query: JobLogsQuerySchema,
  },
  { method: 'post', path: '/v1/jobs/{id}/cancel', summary: 'Cancel a job (an ml-researcher: only their own); it ends cancelled' },
  { method: 'post', path: '/v1/jobs/{id}/pause', summary: 'Pause a validating, queued or running job (an ml-researcher: only their own): it checkpoints, stops and frees its GPUs; 409 in any other state' },
  { method: 'post', path: '/v1/jobs/{id}/resume', summary: 'Resume a paused job from its newest checkpoint or from_checkpoint (a step or URI of its checkpoints; another is a 400)', body: ResumeRequestSchema },
  { method: 'post', path: '/v1/files', summary: 'OpenAI Files API: upload a JSONL training file (multipart: file, purpose "fine-tune") as a dataset version, prepared by a job the request waits for (up to 240 s: processed, else uploaded); its id is the file id', rawBody: 'multipart/form-data' },
  { method: 'get', path: '/v1/files', summary: "OpenAI Files API: the organization's dataset versions as files (after, limit, order)", query: FileListQuerySchema },
  { method: 'get', path: '/v1/files/{id}', summary: 'OpenAI Files API: a file (a dataset version)' },
  { method: 'delete', path: '/v1/files/{id}', summary: 'Always 409: dataset versions are immutable lineage' },
  { method: 'post', path: '/v1/fine_tuning/jobs', summary: 'OpenAI fine-tuning: create a recipe job (model, training_file, method, hyperparameters, suffix, seed, metadata)', body: FineTuningJobCreateSchema },
  { method: 'get', path: '/v1/fine_tuning/jobs', summary: "OpenAI fine-tuning: the organization's recipe jobs, newest first (after, limit)", query: FineTuningListQuerySchema },
  { method: 'get', path: '/v1/fine_tuning/jobs/{id}', summary: 'OpenAI fine-tuning: a job' },
  { method: 'post', path: '/v1/fine_tuning/jobs/{id}/cancel', summary: 'OpenAI fine-tuning: cancel (as POST /v1/jobs/{id}/cancel)' },
  { method: 'post', path: '/v1/fine_tuning/jobs/{id}/pause', summary: 'OpenAI fine-tuning: pause (as POST /v1/jobs/{id}/pause)' },
  { method: 'post', path: '/v1/fine_tuning/jobs/{id}/resume', summary: 'OpenAI fine-tuning: resume from the newest checkpoint (as POST /v1/jobs/{id}/resume)' },
  { method: 'get', path: '/v1/fine_tuning/jobs/{id}/events', summary: 'OpenAI fine-tuning: events, ascending after the event id `after`', query: CursorListQuerySchema },
  { method: 'get', path: '/v1/fine_tuning/jobs/{id}/checkpoints', summary: "OpenAI fine-tuning: the job's complete checkpoints, newest first", query: CursorListQuerySchema },
  { method: 'post', path: '/v1/webhooks', summary: 'Register a webhook endpoint (admins): url, events; the whsec_ signing secret is in this answer only', body: WebhookEndpointCreateSchema },
  { method: 'get', path: '/v1/webhooks', summary: "The organization's webhook endpoints (admins)" },
  { method: 'get', path: '/v1/webhooks/{id}/deliveries', summary: "An endpoint's latest deliveries: state, attempts, last error (admins)" },
  { method: 'delete', path: '/v1/webhooks/{id}', summary: 'Delete a webhook endpoint; its pending deliveries are dropped (admins)' },
  { method: 'get', path: '/v1/experiments', summary: 'List experiments' },
  { method: 'post', path: '/v1/experiments', summary: 'Create an experiment' },
  { method: 'get', path: '/v1/experiments/{id}', summary: 'Get an experiment' },
  {
    method: 'get',
    path: '/v1/experiments/{id}/runs',
    summary: "A page of an experiment's runs: sorted (order_by) and filtered (filter) on the server, paged by cursor (stable while runs are added), with the total and only the columns asked for",
    query: RunsPageQuerySchema,
    response: RunsPageSchema,
  },
  {
    method: 'get',
    path: '/v1/runs/{id}/metrics/{key}/series',
    summary: "One metric of a run downsampled to at most `points` buckets of {step_first, step_last, min, max, last} (spikes kept); zoom: a narrower from_step..to_step",
    query: SeriesQuerySchema,
    response: SeriesSchema,
  },
  { method: 'post', path: '/v1/runs/series', summary: 'Downsampled series of up to 100 runs x 50 keys in one call (a compare page)', body: SeriesBatchRequestSchema, response: SeriesBatchSchema },
  {
    method: 'get',
    path: '/v1/stream',
    summary: "One server-sent-events stream of a page's subjects (job:<id>, job:<id>:logs, pipeline:<id>, run:<id>:metrics), counted as one stream; resume with Last-Event-ID",
    query: StreamQuerySchema,
  },
  { method: 'post', path: '/v1/estimates/memory', summary: "A fine-tune's memory per GPU by the trainer's own estimator, and whether it fits the chosen GPU", body: MemoryEstimateRequestSchema, response: MemoryEstimateSchema },
  { method: 'post', path: '/v1/runs', summary: 'Create a run (in an experiment by id or by name, created when absent)', body: RunCreateSchema, response: RunSchema },
  { method: 'get', path: '/v1/runs/{id}', summary: 'Run with config, params, tags, latest metrics and artifacts', response: RunSchema },
  { method: 'post', path: '/v1/runs/{id}/params', summary: 'Log parameters (batch; immutable: the same value again is a no-op, another value a 400)', body: RunParamsSchema },
  { method: 'patch', path: '/v1/runs/{id}/status', summary: 'Set the run status (RUNNING, FINISHED, FAILED, KILLED) and end time', body: RunStatusUpdateSchema, response: RunSchema },
  { method: 'get', path: '/v1/runs/{id}/metrics', summary: 'Metric history of one key, paged by cursor' },
  { method: 'post', path: '/v1/runs/{id}/metrics', summary: 'Log metrics (batch)' },
  {
    method: 'post',
    path: '/v1/runs/{id}/artifacts',
    summary: 'Upload one artifact file (raw body, streamed) at ?path= under the run artifact root; answers 201 with its size and sha256 checksum',
    rawBody: 'application/octet-stream',
    query: RunArtifactUploadQuerySchema,
    response: RunArtifactSchema,
  },
  { method: 'get', path: '/v1/runs/{id}/artifacts', summary: 'List one directory (?path=, default the root) of the run artifacts', query: RunArtifactListQuerySchema, response: RunArtifactListSchema },
  { method: 'get', path: '/v1/runs/{id}/artifacts/{path}', summary: 'Download one artifact file (streamed); {path} may contain slashes' },
  { method: 'get', path: '/v1/models', summary: 'List registered models' },
  { method: 'get', path: '/v1/models/{name}/versions', summary: 'List versions of a model' },
  { method: 'get', path: '/v1/models/{name}/versions/{version}', summary: 'Get a model version (status, formats, each format\'s prefix and manifest checksum)', response: ModelVersionSchema },
  {
    method: 'get',
    path: '/v1/models/{name}/versions/{version}/lineage',
    summary: "A version's lineage: dataset version and its parents, pipeline and jobs, run, checkpoints, formats, stage history",
    response: ModelLineageSchema,
  },
  {
    method: 'get',
    path: '/v1/models/{name}/versions/{version}/artifacts/{format}/{path}',
    summary: "Download one file of a format (streamed, audited): manifest.json, or a file it lists; verify it against the manifest, and the manifest against the format's checksum",
  },
  { method: 'post', path: '/v1/models', summary: 'Register a model', body: ModelCreateSchema, response: RegisteredModelSchema },
  {
    method: 'post',
    path: '/v1/models/{name}/versions',
    summary:
      "Register a version from a run's artifact (creates the model if absent): answers 202 with the version pending_registration and a Location; its files are then copied under the version's own prefix with a manifest, and GET shows it ready (or failed_registration with a status_message); its source is the run's artifact location + artifact_path",
    body: ModelVersionCreateSchema,
    response: ModelVersionSchema,
  },
  {
    method: 'patch',
    path: '/v1/models/{name}/versions/{version}/stage',
    summary: 'Move a version to a stage (production needs the approver role and archives the previous production version)',
    body: StageChangeSchema,
    response: StageChangeResultSchema,
  },
  {
    method: 'post',
    path: '/v1/models/{name}/versions/{version}/evaluate',
    summary:
      "Run the eval gate on a version (the version's registrant or ml-admin): an eval job compares it with its base model and the production version; its decision is recorded on the version (pass: it may go to production; block: quarantined; inconclusive: held). Answers 202 with the job",
    body: EvaluateVersionSchema,
  },
  { method: 'post', path: '/v1/schedules', summary: 'Create a retraining schedule', body: ScheduleCreateSchema },
  { method: 'get', path: '/v1/schedules', summary: 'List retraining schedules' },
  { method: 'post', path: '/v1/schedules/{id}/pause', summary: 'Pause a schedule' },
  { method: 'post', path: '/v1/schedules/{id}/unpause', summary: 'Unpause a schedule' },
  { method: 'delete', path: '/v1/schedules/{id}', summary: 'Delete a schedule' },
  { method: 'post', path: '/v1/hpo', summary: 'Start a hyperparameter optimization sweep', body: SweepConfigSchema, response: HpoStartResponseSchema },
  { method: 'get', path: '/v1/hpo', summary: 'List sweeps' },
  { method: 'get', path: '/v1/hpo/{id}', summary: 'Sweep status, best trial (or Pareto front), trial counts, GPU hours and trial-steps saved' },
  { method: 'get', path: '/v1/hpo/{id}/trials', summary: 'Trials of a sweep, best first (or by number): all, or a page at offset with the total', query: TrialsQuerySchema },
  { method: 'get', path: '/v1/hpo/{id}/trial-points', summary: "What a sweep's charts draw of every trial: number, status, parameters, objectives, end", response: TrialPointsSchema },
  { method: 'get', path: '/v1/hpo/{id}/lineage', summary: 'Population-based training: each member\'s rounds, exploit sources and hyperparameters' },
  { method: 'post', path: '/v1/hpo/{id}/cancel', summary: 'Cancel a sweep: its running trials and their jobs stop' },
  { method: 'post', path: '/api/2.0/mlflow/runs/log-batch', summary: 'MLflow: log a batch of metrics, params and tags' },
  { method: 'put', path: '/api/2.0/mlflow-artifacts/artifacts/{path}', summary: 'MLflow artifact proxy: upload a file (raw body) at <experiment id>/...', rawBody: 'application/octet-stream' },
  { method: 'get', path: '/api/2.0/mlflow-artifacts/artifacts/{path}', summary: 'MLflow artifact proxy: download a file' },
  { method: 'delete', path: '/api/2.0/mlflow-artifacts/artifacts/{path}', summary: 'MLflow artifact proxy: delete a file or directory' },
  { method: 'get', path: '/api/2.0/mlflow-artifacts/artifacts', summary: 'MLflow artifact proxy: list a directory (?path=)', query: ProxyListSchema },
  { method: 'get', path: '/api/2.0/mlflow/artifacts/list', summary: 'MLflow: list a directory of run artifacts', query: ListArtifactsSchema },
  { method: 'post', path: '/api/2.0/mlflow/logged-models', summary: 'MLflow: create a logged model', body: CreateLoggedModelSchema },
  { method: 'post', path: '/api/2.0/mlflow/logged-models/search', summary: 'MLflow: search logged models', body: SearchLoggedModelsSchema },
  { method: 'post', path: '/api/2.0/mlflow/runs/log-inputs', summary: 'MLflow: log dataset and model inputs of a run', body: LogInputsSchema },
  { method: 'post', path: '/api/2.0/mlflow/runs/outputs', summary: 'MLflow: log the models a run produced', body: LogOutputsSchema },
  { method: 'post', path: '/graphql', summary: "MLflow's GraphQL endpoint (the UI's run page and charts): {query, variables, operationName}", body: z.object({ query: z.string(), variables: z.record(z.string(), z.unknown()).optional(), operationName: z.string().optional() }) },
  { method: 'get', path: '/graphql', summary: "MLflow's GraphQL endpoint, the request in the query string (?query=&variables=&operationName=)" },
  { method: 'get', path: '/health', summary: 'MLflow health probe: OK' },
  { method: 'get', path: '/version', summary: 'The MLflow protocol version this server speaks' },
  { method: 'get', path: '/ready', summary: 'Readiness: catalogue and Temporal reachable' },
  { method: 'get', path: '/alive', summary: 'Liveness' },
];

/** The request schema of each MLflow RPC (under /api/2.0/mlflow and /ajax-api/2.0/mlflow), from the contracts. */
const MLFLOW_REQUESTS: Record<string, z.ZodType> = {
  'experiments/get-by-name': mlflow.ExperimentByNameSchema,
  'experiments/create': mlflow.CreateExperimentSchema,
  'experiments/get': mlflow.ExperimentIdSchema,
  'experiments/search': mlflow.SearchExperimentsSchema,
  'experiments/delete': mlflow.ExperimentIdSchema,
  'experiments/restore': mlflow.ExperimentIdSchema,
  'experiments/update': mlflow.UpdateExperimentSchema,
  'experiments/set-experiment-tag': mlflow.SetExperimentTagSchema,
  'experiments/delete-experiment-tag': mlflow.DeleteExperimentTagSchema,
  'experiments/search-datasets': mlflowArtifacts.SearchDatasetsSchema,
  'runs/create': mlflow.CreateRunSchema,
  'runs/get': mlflow.RunIdSchema,
  'runs/update': mlflow.UpdateRunSchema,
  'runs/delete': mlflow.RunIdSchema,
  'runs/restore': mlflow.RunIdSchema,
  'runs/log-metric': mlflow.LogMetricSchema,
  'runs/log-parameter': mlflow.LogParamSchema,
  'runs/set-tag': mlflow.SetTagSchema,
  'runs/delete-tag': mlflow.DeleteTagSchema,
  'runs/log-batch': mlflow.LogBatchSchema,
  'runs/search': mlflow.SearchRunsSchema,
  'runs/log-inputs': mlflowArtifacts.LogInputsSchema,
  'runs/outputs': mlflowArtifacts.LogOutputsSchema,
  'metrics/get-history': mlflow.GetMetricHistorySchema,
  'metrics/get-history-bulk-interval': mlflowArtifacts.MetricHistoryBulkIntervalSchema,
  'artifacts/list': mlflowArtifacts.ListArtifactsSchema,
  'logged-models': mlflowArtifacts.CreateLoggedModelSchema,
  'logged-models/search': mlflowArtifacts.SearchLoggedModelsSchema,
  'logged-models/{id}': mlflowArtifacts.FinalizeLoggedModelSchema,
  'logged-models/{id}/tags': mlflowArtifacts.LoggedModelTagsSchema,
  'logged-models/{id}/params': mlflowArtifacts.LoggedModelParamsSchema,
  'logged-models/{id}/artifacts/directories': mlflowArtifacts.ListLoggedModelArtifactsSchema,
  'registered-models/create': registry.MlflowCreateModelSchema,
  'registered-models/get': registry.MlflowModelNameSchema,
  'registered-models/rename': registry.MlflowRenameModelSchema,
  'registered-models/update': registry.MlflowUpdateModelSchema,
  'registered-models/delete': registry.MlflowModelNameSchema,
  'registered-models/search': registry.MlflowSearchSchema,
  'registered-models/get-latest-versions': registry.MlflowLatestVersionsSchema,
  'registered-models/set-tag': registry.MlflowModelTagSchema,
  'registered-models/delete-tag': registry.MlflowModelTagKeySchema,
  'registered-models/alias': registry.MlflowAliasRefSchema,
  'model-versions/create': registry.MlflowCreateVersionSchema,
  'model-versions/get': registry.MlflowVersionRefSchema,
  'model-versions/update': registry.MlflowUpdateVersionSchema,
  'model-versions/delete': registry.MlflowVersionRefSchema,
  'model-versions/transition-stage': registry.MlflowTransitionSchema,
  'model-versions/set-tag': registry.MlflowVersionTagSchema,
  'model-versions/delete-tag': registry.MlflowVersionTagKeySchema,
  'model-versions/get-download-uri': registry.MlflowVersionRefSchema,
  'model-versions/search': registry.MlflowSearchSchema,
};

/** A route as the router lists it (Hono's `app.routes`). */
export interface RouteEntry {
  method: string;
  path: string;
}

const METHODS = new Set(['get', 'post', 'put', 'delete', 'patch']);
/** `/v1/runs/:id/artifacts/*` -> `/v1/runs/{id}/artifacts/{path}`. */
export const openApiPath = (honoPath: string): string => honoPath.replace(/:(\w+)(\{[^}]*\})?/g, '{$1}').replace(/\/\*$/, '/{path}');

/** The documented operation of one route: its contract entry, or its MLflow request schema, or the bare route. */
function operationOf(method: Operation['method'], path: string): Operation {
  const known = OPERATIONS.find((o) => o.method === method && o.path === path);
  if (known) return known;
  const rpc = /^\/(?:ajax-)?api\/2\.0\/mlflow\/(.+)$/.exec(path)?.[1];
  const schema = rpc ? MLFLOW_REQUESTS[rpc] : undefined;
  const summary = rpc ? `MLflow: ${rpc}` : `${method.toUpperCase()} ${path}`;
  if (!schema) return { method, path, summary };
  if (method !== 'get') return { method, path, summary, body: schema };
  return schema instanceof z.ZodObject ? { method, path, summary, query: schema } : { method, path, summary };
}

export function openApiDocument(routes: RouteEntry[]): Record<string, unknown> {
  const seen = new Set<string>();
  const operations: Operation[] = [];
  for (const r of routes) {
    const method = r.method.toLowerCase();
    if (!METHODS.has(method)) continue; // middleware (ALL)
    const path = openApiPath(r.path);
    if (seen.has(`${method} ${path}`)) continue;
    seen.add(`${method} ${path}`);
    operations.push(operationOf(method as Operation['method'], path));
  }
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of operations) {
    const params = [...op.path.matchAll(/\{(\w+)\}/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }));
    const query = op.query
      ? Object.entries(op.query.shape).map(([name, s]) => ({ name, in: 'query', required: !(s as z.ZodType).safeParse(undefined).success, schema: js(s as z.ZodType) }))
      : [];
    paths[op.path] ??= {};
    paths[op.path]![op.method] = {
      summary: op.summary,
      parameters: [...params, ...query],
      ...(op.body ? { requestBody: { required: true, content: { 'application/json': { schema: js(op.body) } } } } : {}),
      ...(op.rawBody ? { requestBody: { required: true, content: { [op.rawBody]: { schema: { type: 'string', format: 'binary' } } } } } : {}),
      responses: {
        '200': { description: 'OK', ...(op.response ? { content: { 'application/json': { schema: js(op.response) } } } : {}) },
        '4XX': { description: 'Client error', content: { 'application/json': { schema: js(ErrorBodySchema) } } },
      },
      security: op.path.startsWith('/v1') || op.path.startsWith('/api') ? [{ bearer: [] }] : [],
    };
  }
  return {
    openapi: '3.1.0',
    info: { title: 'hanzo-ml API', version: '0.1.0', description: 'HIP-57 ML pipeline control plane' },
    components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
    paths,
  };
}

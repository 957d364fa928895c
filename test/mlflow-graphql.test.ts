// MLflow's GraphQL endpoint as the UI calls it (/graphql and /mlflow/graphql): the UI's own GetRun and
// GetMetricHistoryBulkInterval documents answer from the REST RPCs with camelCase fields, int64 as strings and
// NaN as null; aliases, fragments and @skip work; RPC refusals arrive in apiError; malformed documents, unknown
// fields and missing variables are request errors naming the problem; tenancy is the RPCs'.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from './support/stack.js';
import { auth } from './support/config.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { parseDocument } from '../api/graphql/parse.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
let stack: TestStack;
let experimentId = '';
let runId = '';

const GET_RUN = `query GetRun($data: MlflowGetRunInput!) @component(name: "MLflow.ExperimentRunTracking") {
  mlflowGetRun(input: $data) {
    apiError { helpUrl code message __typename }
    run {
      info { runName status runUuid experimentId startTime endTime __typename }
      experiment { experimentId name __typename }
      modelVersions { name version status __typename }
      data { metrics { key value step timestamp __typename } params { key value __typename } __typename }
      __typename
    }
    __typename
  }
}`;
const HISTORY = `query GetMetricHistoryBulkInterval($data: MlflowGetMetricHistoryBulkIntervalInput!) {
  mlflowGetMetricHistoryBulkInterval(input: $data) { __typename metrics { timestamp step runId key value } apiError { code message } }
}`;

async function graphql(body: Json, headers: Record<string, string> = auth, path = '/graphql'): Promise<{ status: number; body: Json }> {
  const res = await stack.runtime.app.request(path, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as Json };
}
async function rest(path: string, body: Json): Promise<Json> {
  const res = await stack.runtime.app.request(`/api/2.0/mlflow/${path}`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  expect(res.status).toBe(200);
  return (await res.json()) as Json;
}

describe('MLflow GraphQL endpoint', () => {
  beforeAll(async () => {
    stack = await startTestStack({}, { worker: false });
    await seedDevOrganization(stack.runtime.catalogue.db, 'other-org', 'token-of-another-org');
    experimentId = (await rest('experiments/create', { name: 'graphql-exp' })).experiment_id as string;
    runId = (await rest('runs/create', { experiment_id: experimentId, run_name: 'graphql-run', start_time: 1_700_000_000_000, tags: [] })).run.info.run_id as string;
    const metrics = Array.from({ length: 30 }, (_, step) => ({ key: 'loss', value: 1 / (step + 1), timestamp: 1_700_000_000_000 + step, step }));
    metrics.push({ key: 'odd', value: 'NaN' as unknown as number, timestamp: 1_700_000_000_000, step: 0 });
    await rest('runs/log-batch', { run_id: runId, metrics, params: [{ key: 'lr', value: '0.01' }], tags: [] });
    await rest('registered-models/create', { name: 'graphql-model' });
    await rest('model-versions/create', { name: 'graphql-model', source: `runs:/${runId}/model`, run_id: runId });
  });
  afterAll(async () => stack?.stop());

  it("answers the UI's GetRun with the run, its experiment and model versions, int64 as strings and NaN as null", async () => {
    const res = await graphql({ operationName: 'GetRun', query: GET_RUN, variables: { data: { runId } } });
    expect(res.status).toBe(200);
    expect(res.body.errors).toBeNull();
    const r = res.body.data.mlflowGetRun;
    expect(r.__typename).toBe('MlflowGetRunResponse');
    expect(r.apiError).toBeNull();
    expect(r.run.info).toMatchObject({ runName: 'graphql-run', status: 'RUNNING', runUuid: runId, experimentId, startTime: '1700000000000', endTime: '0', __typename: 'MlflowRunInfo' });
    expect(r.run.experiment).toMatchObject({ experimentId, name: 'graphql-exp' });
    expect(r.run.modelVersions).toEqual([{ name: 'graphql-model', version: '1', status: 'READY', __typename: 'MlflowModelVersion' }]);
    const metrics = Object.fromEntries((r.run.data.metrics as Json[]).map((m) => [m.key, m]));
    expect(metrics.loss).toMatchObject({ value: 1 / 30, step: '29', timestamp: '1700000000029' });
    expect(metrics.odd.value).toBeNull();
    expect(r.run.data.params).toEqual([{ key: 'lr', value: '0.01', __typename: 'MlflowParam' }]);
  });

  it('samples metric history for the charts, the same points as the REST RPC', async () => {
    const res = await graphql({ query: HISTORY, variables: { data: { runIds: [runId], metricKey: 'loss', maxResults: 10 } } }, auth, '/mlflow/graphql');
    const points = res.body.data.mlflowGetMetricHistoryBulkInterval.metrics as Json[];
    const restPoints = await stack.runtime.app.request(`/api/2.0/mlflow/metrics/get-history-bulk-interval?run_ids=${runId}&metric_key=loss&max_results=10`, { headers: auth });
    const expected = ((await restPoints.json()) as Json).metrics as Json[];
    expect(points.length).toBe(expected.length);
    expect(points.map((p) => Number(p.step))).toEqual(expected.map((p) => p.step));
    expect(points[points.length - 1]).toEqual({ timestamp: '1700000000029', step: '29', runId, key: 'loss', value: 1 / 30 });
  });

  it('puts RPC refusals in apiError, and keeps other organizations out', async () => {
    const missing = await graphql({ query: GET_RUN, variables: { data: { runId: 'f'.repeat(32) } } });
    expect(missing.body.data.mlflowGetRun.run).toBeNull();
    expect(missing.body.data.mlflowGetRun.apiError).toMatchObject({ code: 'RESOURCE_DOES_NOT_EXIST' });
    const other = await graphql({ query: GET_RUN, variables: { data: { runId } } }, { authorization: 'Bearer token-of-another-org' });
    expect(other.body.data.mlflowGetRun.apiError.code).toBe('RESOURCE_DOES_NOT_EXIST');
    const anonymous = await stack.runtime.app.request('/graphql', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ query: GET_RUN }) });
    expect(anonymous.status).toBe(401);
  });

  it('executes aliases, named and inline fragments, @skip and @include, and the search mutation', async () => {
    const query = `mutation Search($ids: [String], $skipData: Boolean!) {
      first: mlflowSearchRuns(input: { experimentIds: $ids, maxResults: 1 }) { runs { ...Info data @skip(if: $skipData) { params { key } } } }
      again: mlflowSearchRuns(input: { experimentIds: $ids }) { runs { ... on MlflowRunExtension { info { runName } } outputs @include(if: false) { modelOutputs { modelId } } } }
    }
    fragment Info on MlflowRunExtension { info { runId } }`;
    const res = await graphql({ query, variables: { ids: [experimentId], skipData: true } });
    expect(res.body.errors).toBeNull();
    expect(res.body.data.first.runs).toEqual([{ info: { runId } }]);
    expect(res.body.data.again.runs).toEqual([{ info: { runName: 'graphql-run' } }]);
  });

  it('refuses malformed documents, unknown fields, unknown input fields and missing variables with a message that names them', async () => {
    const cases: [Json, string][] = [
      [{ query: 'query { mlflowGetRun(input: {runId: "x"}) { run { info { runName } }' }, 'Syntax Error: Expected Name, found <EOF> at line 1'],
      [{ query: 'query { mlflowGetRun(input: {runId: "x"}) { run { info { color } } } }' }, 'Cannot query field "color" on type "MlflowRunInfo".'],
      [{ query: 'query { mlflowGetRun(input: {runID: "x"}) { run { info { runName } } } }' }, 'field "runID" is not defined by type "MlflowGetRunInput"'],
      [{ query: 'query { mlflowGetRun(input: {runId: "x"}) { run } }' }, 'Field "run" of type "MlflowRunExtension" must have a selection of subfields.'],
      [{ query: GET_RUN }, 'Variable "$data" of required type "MlflowGetRunInput!" was not provided.'],
      [{ query: GET_RUN, operationName: 'Other' }, 'Unknown operation named "Other".'],
      [{}, 'Must provide query string.'],
      [{ query: `{ ${Array.from({ length: 11 }, (_, i) => `t${i}: test(inputString: "x") { output }`).join(' ')} }` }, 'GraphQL queries should have at most 10 root fields, got 11 root fields.'],
      [{ query: `{ mlflowGetExperiment(input: {}) { ${Array.from({ length: 11 }, (_, i) => `e${i}: experiment { name }`).join(' ')} } }` }, 'GraphQL queries should have at most 10 aliases, got 11 aliases.'],
      [{ query: `{ a ${'{ a '.repeat(10)}${'}'.repeat(11)}` }, 'Query exceeds maximum depth of 10'],
    ];
    for (const [body, message] of cases) {
      const res = await graphql(body);
      expect(res.status).toBe(200);
      expect(res.body.data).toBeNull();
      expect(res.body.errors[0]).toContain(message);
    }
    const notJson = await stack.runtime.app.request('/graphql', { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: '[1]' });
    expect(notJson.status).toBe(400);
  });

  it('parses string escapes, block strings, comments and commas as the grammar says', () => {
    const doc = parseDocument('# comment\n{ a(s: "x\\n\\u0041", b: """raw "quoted" text""", l: [1, 2.5e3, true, null, ENUM],) }');
    const field = doc.operations[0]!.selections[0]!;
    expect(field.kind === 'Field' && field.args).toEqual({
      s: { kind: 'String', value: 'x\nA' },
      b: { kind: 'String', value: 'raw "quoted" text' },
      l: { kind: 'List', values: [{ kind: 'Int', value: '1' }, { kind: 'Float', value: '2.5e3' }, { kind: 'Boolean', value: true }, { kind: 'Null' }, { kind: 'Enum', value: 'ENUM' }] },
    });
  });
});

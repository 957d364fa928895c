// The GraphQL endpoint's load limits, on the MLflow schema the endpoint serves: a query deeper than
// limits.graphql_max_depth, or one whose worst-case internal calls exceed limits.graphql_max_cost, is refused
// before any call is made; repeated fields and fragment spreads run once; the MLflow UI's own queries (copied from
// the pinned UI build's bundle) pass the defaults. The app's REST RPCs are stood in for by a counting function
// (the endpoint's RPCs themselves are exercised in mlflow-graphql.test.ts).
import { describe, expect, it } from 'vitest';
import { ConfigSchema } from '../contracts/config.js';
import { DEFAULT_GRAPHQL_LIMITS, estimateCost, executeGraphQL, type GraphQLRequest } from '../api/graphql/execute.js';
import { parseDocument } from '../api/graphql/parse.js';
import { graphqlLimits, mlflowGraphqlSchema } from '../api/routes/mlflow/graphql.js';

const RUN = { info: { run_id: 'r1', experiment_id: '1', run_name: 'r' }, data: { metrics: [], params: [], tags: [] } };

/** A stand-in for the app's RPCs that counts the calls made and answers a page of `runs` runs of experiment 1. */
function countingRpc(runs = 3) {
  const calls: string[] = [];
  const rpc = async (_method: 'GET' | 'POST', path: string, input: Record<string, unknown>): Promise<Record<string, unknown>> => {
    calls.push(path);
    if (path === 'runs/search') return { runs: Array.from({ length: Math.min(runs, Number(input.max_results ?? 1000)) }, (_, i) => ({ ...RUN, info: { ...RUN.info, run_id: `r${i}` } })) };
    if (path === 'runs/get') return { run: RUN };
    if (path === 'experiments/get') return { experiment: { experiment_id: '1', name: 'exp' } };
    if (path === 'model-versions/search') return { model_versions: [] };
    return {};
  };
  return { calls, rpc };
}

const run = (request: GraphQLRequest, limits = DEFAULT_GRAPHQL_LIMITS, runs = 3) => {
  const counter = countingRpc(runs);
  return executeGraphQL(mlflowGraphqlSchema, request, { rpc: counter.rpc }, limits).then((result) => ({ ...result, calls: counter.calls }));
};

// The MLflow UI's documents, as its bundle (mlflow 3.17.2's static build) sends them.
const RUN_FIELDS = `
  info { runName status runUuid experimentId artifactUri endTime lifecycleStage startTime userId }
  experiment { experimentId name tags { key value } artifactLocation lifecycleStage lastUpdateTime }
  data { metrics { key value step timestamp } params { key value } tags { key value } }
  inputs { datasetInputs { dataset { digest name profile schema source sourceType } tags { key value } } modelInputs { modelId } }
  outputs { modelOutputs { modelId step } }`;
const UI_QUERIES: Record<string, { query: string; variables: Record<string, unknown>; cost: number }> = {
  GetRun: {
    query: `query GetRun($data: MlflowGetRunInput!) @component(name: "MLflow.ExperimentRunTracking") {
      mlflowGetRun(input: $data) { apiError { helpUrl code message } run { ${RUN_FIELDS} modelVersions { status version name source } } } }`,
    variables: { data: { runId: 'r1' } },
    cost: 3,
  },
  SearchRuns: {
    query: `query SearchRuns($data: MlflowSearchRunsInput!) {
      mlflowSearchRuns(input: $data) { apiError { helpUrl code message } runs { ${RUN_FIELDS} modelVersions { version name creationTimestamp status source } } } }`,
    variables: { data: { filter: "attributes.run_name = 'r'", experimentIds: ['1'] } },
    cost: 2001,
  },
  MlflowGetExperimentQuery: {
    query: `query MlflowGetExperimentQuery($input: MlflowGetExperimentInput!) @component(name: "MLflow.ExperimentRunTracking") {
      mlflowGetExperiment(input: $input) { apiError { code message } experiment { artifactLocation creationTime effectiveTraceArchivalRetention experimentId lastUpdateTime lifecycleStage name tags { key value } } } }`,
    variables: { input: { experimentId: '1' } },
    cost: 1,
  },
  GetMetricHistoryBulkInterval: {
    query: `query GetMetricHistoryBulkInterval($data: MlflowGetMetricHistoryBulkIntervalInput!) @component(name: "MLflow.ExperimentRunTracking") {
      mlflowGetMetricHistoryBulkInterval(input: $data) { __typename metrics { timestamp step runId key value } apiError { code message } } }`,
    variables: { data: { runIds: Array.from({ length: 100 }, (_, i) => `r${i}`), metricKey: 'loss' } },
    cost: 1,
  },
};

describe('GraphQL load limits', () => {
  it("passes each of the MLflow UI's queries under the default limits, at the cost the model gives it", async () => {
    for (const [name, q] of Object.entries(UI_QUERIES)) {
      const doc = parseDocument(q.query);
      expect(estimateCost(mlflowGraphqlSchema, doc, 'Query', doc.operations[0]!.selections, q.variables), name).toBe(q.cost);
      const res = await run({ query: q.query, variables: q.variables, operationName: name });
      expect(res.errors, name).toBeNull();
      expect(res.calls.length, name).toBeGreaterThan(0);
    }
  });

  it('refuses a query deeper than limits.graphql_max_depth before making any call', async () => {
    const limits = graphqlLimits(ConfigSchema.parse({ limits: { graphql_max_depth: 4 } }).limits);
    const res = await run({ query: UI_QUERIES.GetRun!.query, variables: UI_QUERIES.GetRun!.variables }, limits);
    expect(res).toMatchObject({ data: null, errors: ['Query exceeds maximum depth of 4 (limits.graphql_max_depth)'] });
    expect(res.calls).toEqual([]);
    // The same document within the default depth runs.
    expect((await run({ query: UI_QUERIES.GetRun!.query, variables: UI_QUERIES.GetRun!.variables })).errors).toBeNull();
  });

  it('refuses a page of runs that would fan out into more internal calls than limits.graphql_max_cost, before making any', async () => {
    const query = 'query($n: Int) { mlflowSearchRuns(input: { maxResults: $n }) { runs { experiment { name } modelVersions { name } } } }';
    const over = await run({ query, variables: { n: 1250 } });
    expect(over.data).toBeNull();
    expect(over.errors![0]).toBe('Query exceeds maximum cost of 2500 (limits.graphql_max_cost): it can make 2501 internal calls. Ask for a smaller maxResults or fewer fields that fetch per item.');
    expect(over.calls).toEqual([]);
    // Within the limit it runs: one search, then per run its experiment and model versions.
    const at = await run({ query, variables: { n: 1249 } });
    expect(at.errors).toBeNull();
    expect(at.calls.sort()).toEqual([...Array(3).fill('experiments/get'), ...Array(3).fill('model-versions/search'), 'runs/search']);
    // A configured cost applies the same way.
    const tight = graphqlLimits(ConfigSchema.parse({ limits: { graphql_max_cost: 100 } }).limits);
    expect((await run({ query, variables: { n: 50 } }, tight)).errors![0]).toContain('maximum cost of 100 (limits.graphql_max_cost): it can make 101 internal calls');
  });

  it('counts aliased repetition of a per-run field, and root fields, in the cost', async () => {
    const aliased = `{ mlflowSearchRuns(input: {}) { runs { a: experiment { name } b: experiment { name } c: experiment { name } } } }`;
    const res = await run({ query: aliased });
    expect(res.errors![0]).toContain('it can make 3001 internal calls');
    expect(res.calls).toEqual([]);
    const roots = `{ ${Array.from({ length: 3 }, (_, i) => `s${i}: mlflowSearchRuns(input: { maxResults: 1000 }) { runs { modelVersions { name } } }`).join(' ')} }`;
    expect((await run({ query: roots })).errors![0]).toContain('it can make 3003 internal calls');
  });

  it('runs a field repeated under one name, or a fragment spread many times, once', async () => {
    const fragment = `fragment F on Query { mlflowGetRun(input: { runId: "r1" }) { run { info { runId } } } }`;
    const repeated = await run({ query: `{ ${'...F '.repeat(50)} mlflowGetRun(input: { runId: "r1" }) { run { info { runName } } } } ${fragment}` });
    expect(repeated.errors).toBeNull();
    expect(repeated.data).toEqual({ mlflowGetRun: { run: { info: { runId: 'r1', runName: 'r' } } } });
    expect(repeated.calls).toEqual(['runs/get']);
    const conflict = await run({ query: '{ x: mlflowGetRun(input: { runId: "a" }) { run { info { runId } } } x: mlflowGetRun(input: { runId: "b" }) { run { info { runId } } } }' });
    expect(conflict.errors![0]).toContain('Fields "x" conflict because they have differing names or arguments');
    expect(conflict.calls).toEqual([]);
  });

  it('refuses limit settings that cannot work, naming the setting', () => {
    expect(ConfigSchema.parse({}).limits).toMatchObject({ graphql_max_depth: 10, graphql_max_cost: 2500, event_streams_per_token: 8 });
    const bad = ConfigSchema.safeParse({ limits: { graphql_max_depth: 1, graphql_max_cost: 0, event_streams_per_token: -1 } });
    expect(bad.success).toBe(false);
    expect(bad.error!.issues.map((i) => i.path.join('.')).sort()).toEqual(['limits.event_streams_per_token', 'limits.graphql_max_cost', 'limits.graphql_max_depth']);
  });
});

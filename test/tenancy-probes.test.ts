// Tenancy probes, generated from the route table: every route the API serves, as org A's viewer, researcher and
// admin, aimed at org B's resources (test/support/tenancy-cases.ts), answers "not found" (or "permission denied"
// for a role that may not do it at all), shows nothing of B's, and writes nothing: the catalogue's tables and
// the object store are compared before and after each probe. The one write allowed is to A's own audit trail
// (its rows and their `audit` events: every denial is recorded). A route with neither a case nor an exemption
// fails. B's admin sends each probe's request too and is answered, so no probe passes by addressing nothing.
// Known leaks of main are listed in the case table and run as `it.fails`.
import { inspectRoutes } from 'hono/dev';
import { and, count, eq, gt, min, ne } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { outbox } from '../db/schema/index.js';
import { CASES, EXEMPT, GRAPHQL_NOT_FOUND, KNOWN_LEAKS, caseId, staleEntries, uncoveredRoutes, type Need, type RouteEntry, type Targets, type TenancyCase } from './support/tenancy-cases.js';
import { changes, ORG_A, ORG_B, PROBE_ROLES, snapshot, startTenancyWorld, type ProbeRole, type Snapshot, type TenancyWorld } from './support/tenancy-world.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

let world: TenancyWorld;
let targets: Targets;
let last: Snapshot | null = null;

const RANK: Record<Need, number> = { viewer: 0, researcher: 1, approver: 2, admin: 3, operator: 4 };

/** The route table as Hono lists it, handlers only (middleware registered with `use` is not a route). */
const routeTable = (): RouteEntry[] => inspectRoutes(world.app).filter((r) => !r.isMiddleware);

beforeAll(async () => {
  world = await startTenancyWorld();
  const db = world.catalogue.db;
  const [first] = await db.select({ id: min(outbox.id) }).from(outbox).where(eq(outbox.organizationId, ORG_B));
  const after = first!.id! - 1;
  const [ofA] = await db.select({ n: count() }).from(outbox).where(and(eq(outbox.organizationId, ORG_A), gt(outbox.id, after), ne(outbox.topic, 'audit')));
  targets = { a: world.a, b: world.b, events: { after, limit: ofA!.n } };
});

afterAll(async () => {
  await world?.stop();
});

/** The request as the text a leak check subtracts: B's strings A itself sent are not a leak when echoed. */
const requestText = (path: string, body: unknown): string => decodeURIComponent(path.replaceAll('+', ' ')) + (body === undefined ? '' : JSON.stringify(body));

const methodOf = (c: TenancyCase, override?: string): string => override ?? c.route.split(' ')[0]!;

/** What is wrong with an answer of A's, or null when it is one the case allows. */
function verdict(c: TenancyCase, role: ProbeRole, res: { status: number; json: Json | null; text: string }): string | null {
  const code = res.json?.error_code as string | undefined;
  const said = `answered ${res.status} ${res.text.slice(0, 300)}`;
  if (RANK[role] < RANK[c.needs] && res.status === 403 && code === 'PERMISSION_DENIED') return null;
  const notFound = res.status === 404 && code === 'RESOURCE_DOES_NOT_EXIST' && !/^no route for/.test(String(res.json?.message));
  switch (c.kind) {
    case 'refused':
      return notFound ? null : said;
    case 'list':
      return notFound || (res.status >= 200 && res.status < 300) ? null : said;
    case 'invalid':
      return notFound || (res.status === 400 && code === 'INVALID_PARAMETER_VALUE' && c.message!.test(String(res.json?.message))) ? null : said;
    case 'graphql': {
      if (res.status !== 200 || res.json?.errors) return said;
      const wrong = GRAPHQL_NOT_FOUND.filter((f) => res.json?.data?.[f]?.apiError?.code !== 'RESOURCE_DOES_NOT_EXIST');
      return wrong.length ? `fields ${wrong.join(', ')} did not answer RESOURCE_DOES_NOT_EXIST: ${res.text.slice(0, 300)}` : null;
    }
  }
}

async function probe(c: TenancyCase, role: ProbeRole): Promise<void> {
  last ??= await snapshot(world);
  const req = c.probe(targets);
  const res = await world.request(methodOf(c, req.method), req.path, world.tokenOf[role], req.body);
  const after = await snapshot(world);
  const written = changes(last, after);
  last = after;
  const sent = requestText(req.path, req.body);
  const leaked = world.secrets.filter((s) => res.text.includes(s) && !sent.includes(s));
  expect({ answer: verdict(c, role, res), written, leaked }).toEqual({ answer: null, written: [], leaked: [] });
}

describe('the probe table', () => {
  it('has a case or an exemption for every route the API serves', () => {
    expect(uncoveredRoutes(routeTable())).toEqual([]);
  });

  it('fails for a route added without a case', () => {
    const table = [...routeTable(), { method: 'GET', path: '/v1/widgets/:id' }, { method: 'POST', path: '/api/2.0/mlflow/widgets/delete' }];
    expect(uncoveredRoutes(table)).toEqual(['GET /v1/widgets/:id', 'POST /api/2.0/mlflow/widgets/delete']);
  });

  it('names only routes the API serves', () => {
    expect(staleEntries(routeTable())).toEqual([]);
  });

  it('gives every exemption a reason and never both exempts and probes a route', () => {
    expect(Object.entries(EXEMPT).filter(([, why]) => why.length < 10)).toEqual([]);
    expect(CASES.map((c) => c.route).filter((r) => r in EXEMPT)).toEqual([]);
    expect(Object.keys(KNOWN_LEAKS).filter((k) => !CASES.some((c) => PROBE_ROLES.some((r) => `${caseId(c)}|${r}` === k)))).toEqual([]);
  });
});

/** A request that only reads (the UI's routes under /mlflow/ forward reads only): B's admin may send it first. */
const reads = (c: TenancyCase): boolean => c.kind === 'list' || c.kind === 'graphql' || /^(GET|ALL) /.test(c.route);

/** B's admin sends the probe's request: a 2xx (a list: showing B's data) proves it addresses B's resource. */
async function control(c: TenancyCase): Promise<void> {
  const req = c.probe(targets);
  const res = await world.request(methodOf(c, req.method), req.path, world.bAdmin, req.body);
  if (c.ownerGets) return expect({ status: res.status, code: res.json?.error_code }).toEqual(c.ownerGets);
  expect(res.status, res.text.slice(0, 300)).toBeLessThan(300);
  if (c.shows) expect(res.text).toMatch(c.shows);
  else if (c.kind === 'list' || c.kind === 'graphql') {
    const sent = requestText(req.path, req.body);
    expect(world.secrets.filter((s) => res.text.includes(s) && !sent.includes(s)), res.text.slice(0, 300)).not.toEqual([]);
  }
}

describe("B's admin reading what the probes address (before them)", () => {
  for (const c of CASES.filter((x) => !x.control && reads(x))) it(`${caseId(c)} answers B's admin with B's data`, () => control(c));
});

// Before the probes: A's own audit events of its refused probes name B's ids in the paths A sent.
describe("org A's event stream", () => {
  it("carries A's events after a cursor placed before B's first event, and none of B's", async () => {
    expect(targets.events.limit).toBeGreaterThan(0);
    const db = world.catalogue.db;
    const [ofA] = await db.select({ n: count() }).from(outbox).where(and(eq(outbox.organizationId, ORG_A), gt(outbox.id, targets.events.after)));
    const res = await world.request('GET', `/v1/events?after=${targets.events.after}&limit=${ofA!.n}`, world.tokenOf.admin);
    expect(res.status).toBe(200);
    const envelopes = res.text
      .split('\n')
      .filter((l) => l.startsWith('data:'))
      .map((l) => JSON.parse(l.slice(5)) as Json);
    expect(envelopes).toHaveLength(ofA!.n);
    expect(envelopes.filter((e) => e.organization_id !== ORG_A)).toEqual([]);
    expect(world.secrets.filter((s) => res.text.includes(s))).toEqual([]);
    // B's own stream from the same cursor does carry B's events: the cursor is before them.
    const [ofB] = await db.select({ n: count() }).from(outbox).where(and(eq(outbox.organizationId, ORG_B), gt(outbox.id, targets.events.after)));
    const own = await world.request('GET', `/v1/events?after=${targets.events.after}&limit=${ofB!.n}`, world.bAdmin);
    expect(own.text).toContain(world.b.runId);
  });
});

describe("org A's roles aimed at org B's resources are refused, see nothing of B's and write nothing", () => {
  // Known leaks run last: what they write (a version of A's model from B's run, say) must not show up in the
  // listings that other probes read.
  const probes = CASES.flatMap((c) => PROBE_ROLES.map((role) => ({ c, role, leak: KNOWN_LEAKS[`${caseId(c)}|${role}`] })));
  for (const { c, role, leak } of [...probes.filter((p) => !p.leak), ...probes.filter((p) => p.leak)]) {
    const name = `${caseId(c)} as A's ${role}${leak ? ` (known leak: ${leak})` : ''}`;
    (leak ? it.fails : it)(name, () => probe(c, role));
  }
});

// After the probes (it adds A's own resources): the create routes exempted above take names per organization, so
// a name B uses is free in A, and taking it neither reaches nor reveals B's resource.
describe("names are per organization", () => {
  it("lets A take the names of B's experiment, model and dataset, as new resources of A's, leaving B's as they were", async () => {
    const { b } = world;
    const asA = (method: string, path: string, body?: unknown) => world.request(method, path, world.tokenOf.researcher, body);
    const exp = await asA('POST', '/api/2.0/mlflow/experiments/create', { name: b.experimentName });
    expect(exp.status, exp.text).toBe(200);
    expect(exp.json!.experiment_id).not.toBe(b.experimentId);
    expect((await asA('POST', '/v1/models', { name: b.modelName })).status).toBe(201);
    const ds = await asA('POST', `/v1/datasets?name=${b.datasetName}&format=jsonl`, JSON.stringify({ messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: 'a' }] }));
    expect(ds.status, ds.text).toBe(201);
    expect(ds.json).toMatchObject({ name: b.datasetName, version: 1 });
    expect(ds.json!.id).not.toBe(b.datasetId);
    // B still finds its own, by the same names.
    const own = await world.request('GET', `/api/2.0/mlflow/experiments/get-by-name?experiment_name=${b.experimentName}`, world.bAdmin);
    expect(own.json!.experiment.experiment_id).toBe(b.experimentId);
    const versions = await world.request('GET', `/v1/models/${b.modelName}/versions`, world.bAdmin);
    expect(versions.text).toContain(b.runId);
    const datasets = await world.request('GET', `/v1/datasets?name=${b.datasetName}`, world.bAdmin);
    expect((datasets.json!.datasets as Json[]).map((d) => d.id)).toEqual([b.datasetId]);
  });
});

// After the probes, in teardown order: these change (and at the end delete) B's resources. An /ajax-api RPC is
// the same handler as its /api twin, whose control runs.
describe("B's admin changing what the probes address (after them)", () => {
  const writes = CASES.filter((x) => !x.control && !reads(x) && !x.route.includes(' /ajax-api/')).sort((x, y) => (x.teardown ?? 0) - (y.teardown ?? 0));
  for (const c of writes) it(`${caseId(c)} is accepted from B's admin`, () => control(c));
});

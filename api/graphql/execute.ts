// Validation and execution of a parsed GraphQL document against a small typed schema: object types whose fields
// either read a property of their parent or call a resolver, scalars with output coercion, and input types whose
// field names are checked. Enough for a read-only API; no interfaces, unions or introspection (a client that
// needs introspection asks a server with graphql-js).
import { GraphQLSyntaxError, parseDocument, type Directive, type Document, type Operation, type Selection, type Value } from './parse.js';

export interface FieldDef<C> {
  /** `String`, `MlflowRun`, `[MlflowRunTag!]`, …; `!` is allowed and ignored on output. */
  type: string;
  args?: Record<string, string>;
  /** Reads `source[property]` when there is no resolver; the property defaults to the field name. */
  property?: string;
  /** The value when the property is absent (undefined; an explicit null stays null). */
  absent?: unknown;
  resolve?: (source: Record<string, unknown>, args: Record<string, unknown>, ctx: C) => unknown;
  /** Internal calls one resolution of this field makes (its share of the query's cost); default 0. */
  cost?: number;
  /** At most how many items any list in this field's answer holds: multiplies the cost of every field beneath. */
  fanOut?: (args: Record<string, unknown>) => number;
}
export interface Schema<C> {
  query: string;
  mutation?: string;
  objects: Record<string, Record<string, FieldDef<C>>>;
  /** Output coercion of each scalar and enum type. */
  scalars: Record<string, (value: unknown) => unknown>;
  /** Each input object type's fields and their types. */
  inputs: Record<string, Record<string, string>>;
}
export interface GraphQLRequest {
  query?: unknown;
  variables?: unknown;
  operationName?: unknown;
}
/** As MLflow's server answers (handlers._graphql): `errors` is a list of messages, null when there are none. */
export interface GraphQLResult {
  data: Record<string, unknown> | null;
  errors: string[] | null;
}

/**
 * Limits on a query, checked before anything runs. Depth, root fields, aliases and selections are MLflow's
 * (graphql_no_batching.py and its environment defaults); the cost bounds what the shape alone cannot: one root
 * field over a page of runs whose every run asks for more internal calls.
 */
export interface GraphQLLimits {
  maxDepth: number;
  /** the most internal calls the query may make, counted worst case before it runs (see estimateCost) */
  maxCost: number;
  maxRootFields: number;
  maxAliases: number;
  maxSelections: number;
}
export const DEFAULT_GRAPHQL_LIMITS: GraphQLLimits = { maxDepth: 10, maxCost: 2500, maxRootFields: 10, maxAliases: 10, maxSelections: 1000 };

class GraphQLRequestError extends Error {}

const named = (type: string): string => type.replace(/[[\]!]/g, '');
const isList = (type: string): boolean => type.replace(/!$/, '').startsWith('[');
const itemOf = (type: string): string => type.replace(/!$/, '').slice(1, -1);

function included(directives: Directive[], vars: Record<string, unknown>): boolean {
  for (const d of directives) {
    const on = d.args.if ? valueOf(d.args.if, vars) : undefined;
    if (d.name === 'skip' && on === true) return false;
    if (d.name === 'include' && on === false) return false;
  }
  return true;
}

function valueOf(v: Value, vars: Record<string, unknown>): unknown {
  switch (v.kind) {
    case 'Variable':
      return vars[v.name] ?? null;
    case 'Int':
    case 'Float':
      return Number(v.value);
    case 'String':
    case 'Enum':
    case 'Boolean':
      return v.value;
    case 'Null':
      return null;
    case 'List':
      return v.values.map((x) => valueOf(x, vars));
    case 'Object':
      return Object.fromEntries(Object.entries(v.fields).map(([k, x]) => [k, valueOf(x, vars)]));
  }
}

type Field = Extract<Selection, { kind: 'Field' }>;

/**
 * The fields a selection set asks of an object type, fragments and @skip/@include applied, in order, as the spec's
 * CollectFields: each fragment spread once, and fields of one response key merged into one (their sub-selections
 * joined), so repeating a field or a spread repeats no work. Fields of one key must agree on name and arguments.
 */
function collectFields(doc: Document, typeName: string, selections: Selection[], vars: Record<string, unknown>): Field[] {
  const byKey = new Map<string, Field>();
  const visited = new Set<string>();
  const walk = (list: Selection[], spreading: string[]): void => {
    for (const s of list) {
      if (!included(s.directives, vars)) continue;
      if (s.kind === 'Field') merge(byKey, s);
      else if (s.kind === 'InlineFragment') {
        if (!s.typeCondition || s.typeCondition === typeName) walk(s.selections, spreading);
      } else {
        const f = doc.fragments.get(s.name);
        if (!f) throw new GraphQLRequestError(`Unknown fragment "${s.name}".`);
        if (spreading.includes(s.name)) throw new GraphQLRequestError(`Cannot spread fragment "${s.name}" within itself.`);
        if (visited.has(s.name)) continue;
        visited.add(s.name);
        if (f.typeCondition === typeName) walk(f.selections, [...spreading, s.name]);
      }
    }
  };
  walk(selections, []);
  return [...byKey.values()];
}

function merge(byKey: Map<string, Field>, f: Field): void {
  const key = f.alias ?? f.name;
  const prev = byKey.get(key);
  if (!prev) return void byKey.set(key, f);
  if (prev.name !== f.name || JSON.stringify(prev.args) !== JSON.stringify(f.args))
    throw new GraphQLRequestError(`Fields "${key}" conflict because they have differing names or arguments. Use different aliases on the fields to fetch both if this was intentional.`);
  const selections = prev.selections || f.selections ? [...(prev.selections ?? []), ...(f.selections ?? [])] : undefined;
  byKey.set(key, { ...prev, ...(selections ? { selections } : {}) });
}

const argsOf = (f: Field, vars: Record<string, unknown>): Record<string, unknown> => Object.fromEntries(Object.entries(f.args).map(([k, v]) => [k, valueOf(v, vars)]));

/** Checks input object field names against the input type, recursively, before anything runs. */
function checkInput<C>(schema: Schema<C>, type: string, value: unknown, where: string): void {
  const fields = schema.inputs[named(type)];
  if (value === null || value === undefined || !fields) return;
  if (isList(type)) {
    if (Array.isArray(value)) value.forEach((v, i) => checkInput(schema, itemOf(type), v, `${where}[${i}]`));
    return;
  }
  if (typeof value !== 'object' || Array.isArray(value)) throw new GraphQLRequestError(`${where}: expected an object of type "${named(type)}".`);
  for (const [k, v] of Object.entries(value)) {
    const t = fields[k];
    if (!t) throw new GraphQLRequestError(`${where}: field "${k}" is not defined by type "${named(type)}".`);
    checkInput(schema, t, v, `${where}.${k}`);
  }
}

/** The fields of one level, fragments merged in whatever their type, each fragment once: MLflow's scan_query. */
function levelFields(doc: Document, selections: Selection[], visited: Set<string>): Extract<Selection, { kind: 'Field' }>[] {
  const out: Extract<Selection, { kind: 'Field' }>[] = [];
  const queue = [...selections];
  for (let s = queue.shift(); s; s = queue.shift()) {
    if (s.kind === 'Field') out.push(s);
    else if (s.kind === 'InlineFragment') queue.push(...s.selections);
    else if (!visited.has(s.name)) {
      visited.add(s.name);
      queue.push(...(doc.fragments.get(s.name)?.selections ?? []));
    }
  }
  return out;
}

/** The shape limits, on the document alone (before the schema is consulted), with MLflow's messages. */
function checkShape(doc: Document, limits: GraphQLLimits): void {
  let roots = 0;
  let aliases = 0;
  let total = 0;
  for (const op of doc.operations) {
    const stack: [Selection[], number, Set<string>][] = [[op.selections, 1, new Set()]];
    for (let top = stack.pop(); top; top = stack.pop()) {
      const [selections, depth, visited] = top;
      if (depth > limits.maxDepth) throw new GraphQLRequestError(`Query exceeds maximum depth of ${limits.maxDepth} (limits.graphql_max_depth)`);
      const fields = levelFields(doc, selections, new Set(visited));
      for (const f of fields) {
        if (depth === 1) roots++;
        if (f.selections) stack.push([f.selections, depth + 1, visited]);
        if (++total > limits.maxSelections) throw new GraphQLRequestError(`Query exceeds maximum total selections of ${limits.maxSelections}`);
      }
      aliases = Math.max(aliases, fields.filter((f) => f.alias).length);
    }
  }
  if (roots > limits.maxRootFields) throw new GraphQLRequestError(`GraphQL queries should have at most ${limits.maxRootFields} root fields, got ${roots} root fields.`);
  if (aliases > limits.maxAliases) throw new GraphQLRequestError(`GraphQL queries should have at most ${limits.maxAliases} aliases, got ${aliases} aliases.`);
}

/** The static checks graphql-js runs before execution: every field exists, objects have selections, scalars none. */
function validate<C>(schema: Schema<C>, doc: Document, typeName: string, selections: Selection[], vars: Record<string, unknown>): void {
  for (const f of collectFields(doc, typeName, selections, vars)) {
    if (f.name === '__typename') continue;
    const def = schema.objects[typeName]![f.name];
    if (!def) throw new GraphQLRequestError(`Cannot query field "${f.name}" on type "${typeName}".`);
    for (const [arg, v] of Object.entries(f.args)) {
      const argType = def.args?.[arg];
      if (!argType) throw new GraphQLRequestError(`Unknown argument "${arg}" on field "${typeName}.${f.name}".`);
      checkInput(schema, argType, valueOf(v, vars), `Argument "${arg}" of "${typeName}.${f.name}"`);
    }
    const target = named(def.type);
    if (schema.objects[target]) {
      if (!f.selections) throw new GraphQLRequestError(`Field "${f.name}" of type "${def.type}" must have a selection of subfields.`);
      validate(schema, doc, target, f.selections, vars);
    } else if (f.selections) throw new GraphQLRequestError(`Field "${f.name}" must not have a selection since type "${def.type}" has no subfields.`);
  }
}

/**
 * The query's cost: the internal calls it can make, worst case, before any is made. A field costs its `cost`
 * times the items of every list above it, a list's items being its field's `fanOut` (a page of runs: the
 * maxResults asked, else the RPC's default page). Lists of data already fetched (a run's metrics, params, tags)
 * cost nothing more to read; the selections limit bounds how many fields a query names.
 */
export function estimateCost<C>(schema: Schema<C>, doc: Document, typeName: string, selections: Selection[], vars: Record<string, unknown>, items = 1): number {
  let cost = 0;
  for (const f of collectFields(doc, typeName, selections, vars)) {
    if (f.name === '__typename') continue;
    const def = schema.objects[typeName]![f.name]!;
    cost += items * (def.cost ?? 0);
    const target = named(def.type);
    if (schema.objects[target] && f.selections) cost += estimateCost(schema, doc, target, f.selections, vars, items * (def.fanOut?.(argsOf(f, vars)) ?? 1));
  }
  return cost;
}

async function complete<C>(schema: Schema<C>, doc: Document, type: string, value: unknown, selections: Selection[] | undefined, vars: Record<string, unknown>, ctx: C): Promise<unknown> {
  if (value === null || value === undefined) return null;
  if (isList(type)) return Promise.all((value as unknown[]).map((v) => complete(schema, doc, itemOf(type), v, selections, vars, ctx)));
  const name = named(type);
  if (schema.objects[name]) return executeSelections(schema, doc, name, value as Record<string, unknown>, selections!, vars, ctx);
  return (schema.scalars[name] ?? ((v: unknown) => v))(value);
}

async function executeSelections<C>(schema: Schema<C>, doc: Document, typeName: string, source: Record<string, unknown>, selections: Selection[], vars: Record<string, unknown>, ctx: C): Promise<Record<string, unknown>> {
  const fields = collectFields(doc, typeName, selections, vars);
  const values = await Promise.all(
    fields.map(async (f) => {
      if (f.name === '__typename') return typeName;
      const def = schema.objects[typeName]![f.name]!;
      const raw = def.resolve ? await def.resolve(source, argsOf(f, vars), ctx) : (source[def.property ?? f.name] ?? (source[def.property ?? f.name] === null ? null : def.absent));
      return complete(schema, doc, def.type, raw, f.selections, vars, ctx);
    }),
  );
  const out: Record<string, unknown> = {};
  fields.forEach((f, i) => (out[f.alias ?? f.name] = values[i]));
  return out;
}

function pickOperation(doc: Document, operationName: unknown): Operation {
  if (typeof operationName === 'string' && operationName) {
    const op = doc.operations.find((o) => o.name === operationName);
    if (!op) throw new GraphQLRequestError(`Unknown operation named "${operationName}".`);
    return op;
  }
  if (doc.operations.length !== 1) throw new GraphQLRequestError('Must provide operation name if query contains multiple operations.');
  return doc.operations[0]!;
}

function variablesOf<C>(schema: Schema<C>, op: Operation, given: unknown): Record<string, unknown> {
  if (given !== undefined && given !== null && (typeof given !== 'object' || Array.isArray(given))) throw new GraphQLRequestError('Variables must be provided as an object.');
  const supplied = (given ?? {}) as Record<string, unknown>;
  const vars: Record<string, unknown> = {};
  for (const def of op.variables) {
    const value = def.name in supplied ? supplied[def.name] : def.defaultValue ? valueOf(def.defaultValue, {}) : undefined;
    if ((value === undefined || value === null) && def.type.endsWith('!')) throw new GraphQLRequestError(`Variable "$${def.name}" of required type "${def.type}" was not provided.`);
    checkInput(schema, def.type, value, `Variable "$${def.name}"`);
    vars[def.name] = value;
  }
  return vars;
}

/**
 * Runs one GraphQL request. Request errors (syntax, shape limits, unknown fields, missing variables) answer
 * `data: null` with the message, as MLflow's server does; resolvers report their own failures in the data they
 * return.
 */
export async function executeGraphQL<C>(schema: Schema<C>, request: GraphQLRequest, ctx: C, limits: GraphQLLimits = DEFAULT_GRAPHQL_LIMITS): Promise<GraphQLResult> {
  try {
    if (typeof request.query !== 'string' || !request.query.trim()) throw new GraphQLRequestError('Must provide query string.');
    const doc = parseDocument(request.query);
    checkShape(doc, limits);
    const op = pickOperation(doc, request.operationName);
    const root = op.operation === 'query' ? schema.query : op.operation === 'mutation' ? schema.mutation : undefined;
    if (!root) throw new GraphQLRequestError(`Schema is not configured to execute ${op.operation} operation.`);
    const vars = variablesOf(schema, op, request.variables);
    validate(schema, doc, root, op.selections, vars);
    const cost = estimateCost(schema, doc, root, op.selections, vars);
    if (cost > limits.maxCost)
      throw new GraphQLRequestError(`Query exceeds maximum cost of ${limits.maxCost} (limits.graphql_max_cost): it can make ${cost} internal calls. Ask for a smaller maxResults or fewer fields that fetch per item.`);
    return { data: await executeSelections(schema, doc, root, {}, op.selections, vars, ctx), errors: null };
  } catch (e) {
    if (e instanceof GraphQLRequestError || e instanceof GraphQLSyntaxError) return { data: null, errors: [e.message] };
    throw e;
  }
}

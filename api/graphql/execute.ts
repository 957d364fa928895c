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

// MLflow's limits on a query's shape (graphql_no_batching.py and its environment defaults), checked before anything
// else: a query cannot fan out into many RPCs or recurse deeply.
const MAX_DEPTH = 10;
const MAX_SELECTIONS = 1000;
const MAX_ROOT_FIELDS = 10;
const MAX_ALIASES = 10;

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

/** The fields a selection set asks of an object type, fragments and @skip/@include applied, in order. */
function collectFields(doc: Document, typeName: string, selections: Selection[], vars: Record<string, unknown>, out: Extract<Selection, { kind: 'Field' }>[] = [], seen = new Set<string>()): typeof out {
  for (const s of selections) {
    if (!included(s.directives, vars)) continue;
    if (s.kind === 'Field') out.push(s);
    else if (s.kind === 'InlineFragment') {
      if (!s.typeCondition || s.typeCondition === typeName) collectFields(doc, typeName, s.selections, vars, out, seen);
    } else {
      const f = doc.fragments.get(s.name);
      if (!f) throw new GraphQLRequestError(`Unknown fragment "${s.name}".`);
      if (seen.has(s.name)) throw new GraphQLRequestError(`Cannot spread fragment "${s.name}" within itself.`);
      if (f.typeCondition === typeName) collectFields(doc, typeName, f.selections, vars, out, new Set([...seen, s.name]));
    }
  }
  return out;
}

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
function checkShape(doc: Document): void {
  let roots = 0;
  let aliases = 0;
  let total = 0;
  for (const op of doc.operations) {
    const stack: [Selection[], number, Set<string>][] = [[op.selections, 1, new Set()]];
    for (let top = stack.pop(); top; top = stack.pop()) {
      const [selections, depth, visited] = top;
      if (depth > MAX_DEPTH) throw new GraphQLRequestError(`Query exceeds maximum depth of ${MAX_DEPTH}`);
      const fields = levelFields(doc, selections, new Set(visited));
      for (const f of fields) {
        if (depth === 1) roots++;
        if (f.selections) stack.push([f.selections, depth + 1, visited]);
        if (++total > MAX_SELECTIONS) throw new GraphQLRequestError(`Query exceeds maximum total selections of ${MAX_SELECTIONS}`);
      }
      aliases = Math.max(aliases, fields.filter((f) => f.alias).length);
    }
  }
  if (roots > MAX_ROOT_FIELDS) throw new GraphQLRequestError(`GraphQL queries should have at most ${MAX_ROOT_FIELDS} root fields, got ${roots} root fields.`);
  if (aliases > MAX_ALIASES) throw new GraphQLRequestError(`GraphQL queries should have at most ${MAX_ALIASES} aliases, got ${aliases} aliases.`);
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
      const args = Object.fromEntries(Object.entries(f.args).map(([k, v]) => [k, valueOf(v, vars)]));
      const raw = def.resolve ? await def.resolve(source, args, ctx) : (source[def.property ?? f.name] ?? (source[def.property ?? f.name] === null ? null : def.absent));
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
export async function executeGraphQL<C>(schema: Schema<C>, request: GraphQLRequest, ctx: C): Promise<GraphQLResult> {
  try {
    if (typeof request.query !== 'string' || !request.query.trim()) throw new GraphQLRequestError('Must provide query string.');
    const doc = parseDocument(request.query);
    checkShape(doc);
    const op = pickOperation(doc, request.operationName);
    const root = op.operation === 'query' ? schema.query : op.operation === 'mutation' ? schema.mutation : undefined;
    if (!root) throw new GraphQLRequestError(`Schema is not configured to execute ${op.operation} operation.`);
    const vars = variablesOf(schema, op, request.variables);
    validate(schema, doc, root, op.selections, vars);
    return { data: await executeSelections(schema, doc, root, {}, op.selections, vars, ctx), errors: null };
  } catch (e) {
    if (e instanceof GraphQLRequestError || e instanceof GraphQLSyntaxError) return { data: null, errors: [e.message] };
    throw e;
  }
}

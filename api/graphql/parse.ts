// A parser for GraphQL executable documents (operations and fragments, per the October 2021 spec's grammar), for
// the MLflow UI's GraphQL endpoint. graphql-js is the usual choice; it is not among this project's dependencies,
// and the endpoint needs only the read side of the language (no schema definition language, no subscriptions).
// Errors name the line and column, as graphql-js's do.

export type Value =
  | { kind: 'Variable'; name: string }
  | { kind: 'Int' | 'Float' | 'String' | 'Enum'; value: string }
  | { kind: 'Boolean'; value: boolean }
  | { kind: 'Null' }
  | { kind: 'List'; values: Value[] }
  | { kind: 'Object'; fields: Record<string, Value> };

export interface Directive {
  name: string;
  args: Record<string, Value>;
}
export type Selection =
  | { kind: 'Field'; alias?: string; name: string; args: Record<string, Value>; directives: Directive[]; selections?: Selection[] }
  | { kind: 'FragmentSpread'; name: string; directives: Directive[] }
  | { kind: 'InlineFragment'; typeCondition?: string; directives: Directive[]; selections: Selection[] };
export interface VariableDefinition {
  name: string;
  type: string;
  defaultValue?: Value;
}
export interface Operation {
  kind: 'Operation';
  operation: 'query' | 'mutation' | 'subscription';
  name?: string;
  variables: VariableDefinition[];
  directives: Directive[];
  selections: Selection[];
}
export interface Fragment {
  kind: 'Fragment';
  name: string;
  typeCondition: string;
  selections: Selection[];
}
export interface Document {
  operations: Operation[];
  fragments: Map<string, Fragment>;
}

export class GraphQLSyntaxError extends Error {}

interface Token {
  kind: 'punct' | 'name' | 'int' | 'float' | 'string' | 'eof';
  value: string;
  at: number;
}

const PUNCT = new Set(['!', '$', '&', '(', ')', ':', '=', '@', '[', ']', '{', '|', '}']);
const NAME = /[_A-Za-z][_0-9A-Za-z]*/y;
const NUMBER = /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;
const IGNORED = /(?:[\s,\uFEFF]|#[^\n\r]*)*/y;

function position(source: string, at: number): string {
  const before = source.slice(0, at).split(/\r\n|\n|\r/);
  return `line ${before.length}, column ${before[before.length - 1]!.length + 1}`;
}

function readString(source: string, at: number): [string, number] {
  if (source.startsWith('"""', at)) {
    const end = source.indexOf('"""', at + 3);
    if (end < 0) throw new GraphQLSyntaxError(`Syntax Error: Unterminated string at ${position(source, at)}.`);
    return [source.slice(at + 3, end).replace(/\\"""/g, '"""'), end + 3];
  }
  let i = at + 1;
  let out = '';
  const escapes: Record<string, string> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
  while (i < source.length && source[i] !== '"' && source[i] !== '\n') {
    if (source[i] === '\\') {
      const c = source[i + 1]!;
      if (c === 'u') {
        out += String.fromCharCode(parseInt(source.slice(i + 2, i + 6), 16));
        i += 6;
        continue;
      }
      if (!(c in escapes)) throw new GraphQLSyntaxError(`Syntax Error: Invalid character escape sequence at ${position(source, i)}.`);
      out += escapes[c];
      i += 2;
      continue;
    }
    out += source[i++];
  }
  if (source[i] !== '"') throw new GraphQLSyntaxError(`Syntax Error: Unterminated string at ${position(source, at)}.`);
  return [out, i + 1];
}

function tokenize(source: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  for (;;) {
    IGNORED.lastIndex = i;
    i += IGNORED.exec(source)![0].length;
    if (i >= source.length) break;
    const c = source[i]!;
    if (source.startsWith('...', i)) {
      tokens.push({ kind: 'punct', value: '...', at: i });
      i += 3;
    } else if (PUNCT.has(c)) {
      tokens.push({ kind: 'punct', value: c, at: i++ });
    } else if (c === '"') {
      const [value, end] = readString(source, i);
      tokens.push({ kind: 'string', value, at: i });
      i = end;
    } else {
      NAME.lastIndex = i;
      NUMBER.lastIndex = i;
      const name = NAME.exec(source);
      const num = name ? null : NUMBER.exec(source);
      const text = name?.[0] ?? num?.[0];
      if (!text) throw new GraphQLSyntaxError(`Syntax Error: Unexpected character ${JSON.stringify(c)} at ${position(source, i)}.`);
      tokens.push({ kind: name ? 'name' : num![2] || num![3] ? 'float' : 'int', value: text, at: i });
      i += text.length;
    }
  }
  tokens.push({ kind: 'eof', value: '<EOF>', at: source.length });
  return tokens;
}

/** Recursive descent over the token list; each method reads one production of the grammar. */
class Parser {
  private i = 0;
  constructor(
    private readonly source: string,
    private readonly tokens: Token[],
  ) {}

  private peek(value?: string): boolean {
    const t = this.tokens[this.i]!;
    return value === undefined ? true : (t.kind === 'punct' || t.kind === 'name') && t.value === value;
  }
  private fail(expected: string): never {
    const t = this.tokens[this.i]!;
    throw new GraphQLSyntaxError(`Syntax Error: Expected ${expected}, found ${t.kind === 'eof' ? '<EOF>' : JSON.stringify(t.value)} at ${position(this.source, t.at)}.`);
  }
  private expect(value: string): void {
    if (!this.peek(value)) this.fail(JSON.stringify(value));
    this.i++;
  }
  private skip(value: string): boolean {
    if (!this.peek(value)) return false;
    this.i++;
    return true;
  }
  private name(): string {
    const t = this.tokens[this.i]!;
    if (t.kind !== 'name') this.fail('Name');
    this.i++;
    return t.value;
  }

  document(): Document {
    const doc: Document = { operations: [], fragments: new Map() };
    do {
      if (this.peek('fragment')) {
        const f = this.fragment();
        if (doc.fragments.has(f.name)) throw new GraphQLSyntaxError(`There can be only one fragment named "${f.name}".`);
        doc.fragments.set(f.name, f);
      } else doc.operations.push(this.operation());
    } while (this.tokens[this.i]!.kind !== 'eof');
    return doc;
  }

  private operation(): Operation {
    if (this.peek('{')) return { kind: 'Operation', operation: 'query', variables: [], directives: [], selections: this.selectionSet() };
    const op = this.name();
    if (op !== 'query' && op !== 'mutation' && op !== 'subscription') {
      this.i--;
      this.fail('"query", "mutation", "subscription", "fragment" or "{"');
    }
    const name = this.tokens[this.i]!.kind === 'name' ? this.name() : undefined;
    const variables: VariableDefinition[] = [];
    if (this.skip('(')) {
      while (!this.skip(')')) {
        this.expect('$');
        const variable = this.name();
        this.expect(':');
        const type = this.type();
        const defaultValue = this.skip('=') ? this.value(true) : undefined;
        this.directives();
        variables.push({ name: variable, type, ...(defaultValue ? { defaultValue } : {}) });
      }
    }
    return { kind: 'Operation', operation: op, ...(name ? { name } : {}), variables, directives: this.directives(), selections: this.selectionSet() };
  }

  private fragment(): Fragment {
    this.expect('fragment');
    const name = this.name();
    if (name === 'on') this.fail('fragment name');
    this.expect('on');
    const typeCondition = this.name();
    this.directives();
    return { kind: 'Fragment', name, typeCondition, selections: this.selectionSet() };
  }

  private type(): string {
    let t: string;
    if (this.skip('[')) {
      t = `[${this.type()}]`;
      this.expect(']');
    } else t = this.name();
    return this.skip('!') ? `${t}!` : t;
  }

  private selectionSet(): Selection[] {
    this.expect('{');
    const selections: Selection[] = [];
    do selections.push(this.selection());
    while (!this.skip('}'));
    return selections;
  }

  private selection(): Selection {
    if (this.skip('...')) {
      if (this.tokens[this.i]!.kind === 'name' && !this.peek('on')) return { kind: 'FragmentSpread', name: this.name(), directives: this.directives() };
      const typeCondition = this.skip('on') ? this.name() : undefined;
      return { kind: 'InlineFragment', ...(typeCondition ? { typeCondition } : {}), directives: this.directives(), selections: this.selectionSet() };
    }
    let name = this.name();
    let alias: string | undefined;
    if (this.skip(':')) {
      alias = name;
      name = this.name();
    }
    const args = this.arguments(false);
    const directives = this.directives();
    const selections = this.peek('{') ? this.selectionSet() : undefined;
    return { kind: 'Field', ...(alias ? { alias } : {}), name, args, directives, ...(selections ? { selections } : {}) };
  }

  private arguments(constant: boolean): Record<string, Value> {
    const args: Record<string, Value> = {};
    if (!this.skip('(')) return args;
    do {
      const name = this.name();
      this.expect(':');
      args[name] = this.value(constant);
    } while (!this.skip(')'));
    return args;
  }

  private directives(): Directive[] {
    const out: Directive[] = [];
    while (this.skip('@')) out.push({ name: this.name(), args: this.arguments(false) });
    return out;
  }

  private value(constant: boolean): Value {
    const t = this.tokens[this.i]!;
    if (t.kind === 'punct' && t.value === '$' && !constant) {
      this.i++;
      return { kind: 'Variable', name: this.name() };
    }
    if (t.kind === 'int' || t.kind === 'float' || t.kind === 'string') {
      this.i++;
      return { kind: t.kind === 'int' ? 'Int' : t.kind === 'float' ? 'Float' : 'String', value: t.value };
    }
    if (t.kind === 'name') {
      this.i++;
      if (t.value === 'true' || t.value === 'false') return { kind: 'Boolean', value: t.value === 'true' };
      return t.value === 'null' ? { kind: 'Null' } : { kind: 'Enum', value: t.value };
    }
    if (this.skip('[')) {
      const values: Value[] = [];
      while (!this.skip(']')) values.push(this.value(constant));
      return { kind: 'List', values };
    }
    if (this.skip('{')) {
      const fields: Record<string, Value> = {};
      while (!this.skip('}')) {
        const name = this.name();
        this.expect(':');
        fields[name] = this.value(constant);
      }
      return { kind: 'Object', fields };
    }
    return this.fail('a value');
  }
}

/** Parses a GraphQL executable document; throws GraphQLSyntaxError naming the line and column of the problem. */
export function parseDocument(source: string): Document {
  return new Parser(source, tokenize(source)).document();
}

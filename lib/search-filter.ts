// MLflow's search grammar: `metrics.acc > 0.9 AND params.lr = '0.1' AND tags."mlflow.user" LIKE 'a%'`
// and order-by clauses like `metrics.acc DESC`. It sits below the API and the store: the API parses a request's
// filter with it, the store turns the parsed comparisons into SQL. A bad expression is a SearchFilterError naming
// what was wrong (the API answers it as INVALID_PARAMETER_VALUE).

export class SearchFilterError extends Error {}
const invalid = (message: string): SearchFilterError => new SearchFilterError(message);

export type Entity = 'metric' | 'param' | 'tag' | 'attribute';
export type Comparator = '=' | '!=' | '<' | '<=' | '>' | '>=' | 'LIKE' | 'ILIKE' | 'IN' | 'NOT IN' | 'IS NULL' | 'IS NOT NULL';
export interface Comparison {
  entity: Entity;
  key: string;
  op: Comparator;
  value: string | number | string[];
}
export interface OrderClause {
  entity: Entity;
  key: string;
  ascending: boolean;
}

/** The attributes a filter may name, with their kind: run search and experiment search differ. */
export interface Grammar {
  what: string;
  attributes: Record<string, 'string' | 'number'>;
  entities: Entity[];
}

export const RUN_GRAMMAR: Grammar = {
  what: 'run',
  attributes: {
    run_id: 'string',
    run_name: 'string',
    status: 'string',
    user_id: 'string',
    artifact_uri: 'string',
    lifecycle_stage: 'string',
    start_time: 'number',
    end_time: 'number',
    created: 'number',
  },
  entities: ['metric', 'param', 'tag', 'attribute'],
};

export const EXPERIMENT_GRAMMAR: Grammar = {
  what: 'experiment',
  attributes: { name: 'string', experiment_id: 'string', creation_time: 'number', last_update_time: 'number' },
  entities: ['tag', 'attribute'],
};

const PREFIXES: Record<string, Entity> = {
  metric: 'metric',
  metrics: 'metric',
  param: 'param',
  params: 'param',
  parameter: 'param',
  parameters: 'param',
  tag: 'tag',
  tags: 'tag',
  attribute: 'attribute',
  attributes: 'attribute',
  attr: 'attribute',
  run: 'attribute',
};

type Token = { kind: 'word' | 'string' | 'number' | 'op' | 'punct'; text: string; quoted?: boolean };

function tokenize(input: string): Token[] {
  const tokens: Token[] = [];
  const re = /\s*(?:(`[^`]*`|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.]))|(!=|<=|>=|=|<|>)|([(),])|([A-Za-z_][\w.]*))/y;
  let pos = 0;
  while (pos < input.length) {
    if (/^\s*$/.test(input.slice(pos))) break;
    re.lastIndex = pos;
    const m = re.exec(input);
    if (!m) throw invalid(`Invalid filter '${input}': unexpected character at position ${pos}: '${input.slice(pos).trim().slice(0, 20)}'`);
    pos = re.lastIndex;
    if (m[1]) tokens.push({ kind: 'string', text: m[1].slice(1, -1).replace(/\\(.)/g, '$1'), quoted: m[1].startsWith('`') || m[1].startsWith('"') });
    else if (m[2]) tokens.push({ kind: 'number', text: m[2] });
    else if (m[3]) tokens.push({ kind: 'op', text: m[3] });
    else if (m[4]) tokens.push({ kind: 'punct', text: m[4] });
    else tokens.push({ kind: 'word', text: m[5]! });
  }
  return tokens;
}

class Cursor {
  i = 0;
  constructor(
    readonly tokens: Token[],
    readonly input: string,
  ) {}
  peek(): Token | undefined {
    return this.tokens[this.i];
  }
  next(expected: string): Token {
    const t = this.tokens[this.i++];
    if (!t) throw invalid(`Invalid filter '${this.input}': expected ${expected} but the expression ended`);
    return t;
  }
  isWord(w: string): boolean {
    const t = this.peek();
    return t?.kind === 'word' && t.text.toUpperCase() === w;
  }
}

/** An identifier: `metrics.acc`, `tags."a key"`, `params.\`lr\``, or a bare attribute such as `status`. */
function identifier(cur: Cursor, grammar: Grammar): { entity: Entity; key: string } {
  const t = cur.next('an identifier');
  let prefix: string | undefined;
  let key: string;
  if (t.kind === 'word') {
    const dot = t.text.indexOf('.');
    if (dot < 0) key = t.text;
    else {
      prefix = t.text.slice(0, dot);
      key = t.text.slice(dot + 1);
      if (key === '') {
        const q = cur.next('a quoted key');
        if (q.kind !== 'string') throw invalid(`Invalid identifier '${t.text}${q.text}': expected a quoted key after '${t.text}'`);
        key = q.text;
      }
    }
  } else if (t.kind === 'string' && t.quoted) key = t.text;
  else throw invalid(`Invalid filter '${cur.input}': expected an identifier but found '${t.text}'`);
  const entity = prefix === undefined ? 'attribute' : PREFIXES[prefix.toLowerCase()];
  if (!entity || !grammar.entities.includes(entity))
    throw invalid(`Invalid entity type '${prefix}'. Valid values are ${grammar.entities.map((e) => `'${e}s'`).join(', ')}`);
  if (entity === 'attribute' && !(key in grammar.attributes))
    throw invalid(`Invalid attribute key '${key}' specified. Valid keys are '${Object.keys(grammar.attributes).join("', '")}'`);
  return { entity, key };
}

function comparator(cur: Cursor): Comparator {
  const t = cur.next('a comparison operator');
  if (t.kind === 'op') return t.text as Comparator;
  const w = t.kind === 'word' ? t.text.toUpperCase() : '';
  if (w === 'LIKE' || w === 'ILIKE' || w === 'IN') return w;
  if (w === 'NOT' && cur.isWord('IN')) {
    cur.i++;
    return 'NOT IN';
  }
  // `tags.x IS NULL` / `IS NOT NULL`: whether the tag is absent (the MLflow UI filters experiments this way).
  if (w === 'IS') {
    const not = cur.isWord('NOT');
    if (not) cur.i++;
    if (cur.isWord('NULL')) {
      cur.i++;
      return not ? 'IS NOT NULL' : 'IS NULL';
    }
  }
  throw invalid(`Invalid comparator '${t.text}' in filter '${cur.input}'`);
}

function literal(cur: Cursor, op: Comparator): string | number | string[] {
  if (op === 'IS NULL' || op === 'IS NOT NULL') return '';
  if (op === 'IN' || op === 'NOT IN') {
    const open = cur.next("'('");
    if (open.text !== '(') throw invalid(`Invalid filter '${cur.input}': expected '(' after ${op}`);
    const items: string[] = [];
    for (;;) {
      const v = cur.next('a string value');
      if (v.kind !== 'string' || v.quoted) throw invalid(`Invalid filter '${cur.input}': ${op} takes a list of single-quoted strings`);
      items.push(v.text);
      const sep = cur.next("',' or ')'");
      if (sep.text === ')') return items;
      if (sep.text !== ',') throw invalid(`Invalid filter '${cur.input}': expected ',' or ')' in the ${op} list`);
    }
  }
  const t = cur.next('a value');
  if (t.kind === 'number') return Number(t.text);
  if (t.kind === 'string') return t.text;
  throw invalid(`Invalid filter '${cur.input}': expected a quoted string or a number but found '${t.text}'`);
}

function check(c: Comparison, grammar: Grammar): void {
  if (c.op === 'IS NULL' || c.op === 'IS NOT NULL') {
    if (c.entity !== 'tag') throw invalid(`${c.op} is only supported for tags, not ${c.entity === 'attribute' ? c.key : `${c.entity}s.${c.key}`}`);
    return;
  }
  const numeric = c.entity === 'metric' || (c.entity === 'attribute' && grammar.attributes[c.key] === 'number');
  const name = c.entity === 'attribute' ? c.key : `${c.entity}s.${c.key}`;
  if (numeric) {
    if (typeof c.value !== 'number')
      throw invalid(c.entity === 'metric' ? `Expected numeric value type for metric. Found '${String(c.value)}'` : `Expected numeric value type for numeric attribute: ${c.key}. Found '${String(c.value)}'`);
    if (!['=', '!=', '<', '<=', '>', '>='].includes(c.op)) throw invalid(`Invalid comparator '${c.op}' for ${name}: use one of =, !=, <, <=, >, >=`);
  } else {
    if (['<', '<=', '>', '>='].includes(c.op)) throw invalid(`Invalid comparator '${c.op}' for ${name}: use one of =, !=, LIKE, ILIKE, IN, NOT IN`);
    if ((c.op === 'IN' || c.op === 'NOT IN') && c.entity !== 'attribute') throw invalid(`${c.op} is only supported for attributes, not ${name}`);
    if (typeof c.value === 'number') throw invalid(`Expected a quoted string value for ${name} but got ${c.value}`);
  }
}

/** Parses a filter of comparisons joined by AND. An empty filter matches everything. */
export function parseFilter(input: string | undefined, grammar: Grammar = RUN_GRAMMAR): Comparison[] {
  if (!input || input.trim() === '') return [];
  const cur = new Cursor(tokenize(input), input);
  const out: Comparison[] = [];
  for (;;) {
    const { entity, key } = identifier(cur, grammar);
    const op = comparator(cur);
    const c = { entity, key, op, value: literal(cur, op) };
    check(c, grammar);
    out.push(c);
    if (!cur.peek()) return out;
    if (cur.isWord('OR')) throw invalid(`Invalid filter '${input}': OR is not supported; combine comparisons with AND`);
    if (!cur.isWord('AND')) throw invalid(`Invalid filter '${input}': expected AND but found '${cur.peek()!.text}'`);
    cur.i++;
  }
}

/** Parses one order-by clause: `<identifier> [ASC|DESC]`. */
export function parseOrderBy(input: string, grammar: Grammar = RUN_GRAMMAR): OrderClause {
  const cur = new Cursor(tokenize(input), input);
  if (!cur.peek()) throw invalid(`Invalid order_by clause '${input}': it is empty`);
  const { entity, key } = identifier(cur, grammar);
  let ascending = true;
  if (cur.isWord('ASC') || cur.isWord('DESC')) ascending = cur.next('ASC or DESC').text.toUpperCase() === 'ASC';
  if (cur.peek()) throw invalid(`Invalid order_by clause '${input}': expected ASC or DESC but found '${cur.peek()!.text}'`);
  return { entity, key, ascending };
}

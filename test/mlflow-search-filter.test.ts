// The MLflow search grammar: filters of AND-joined comparisons and order-by clauses, good and bad.
import { describe, expect, it } from 'vitest';
import { EXPERIMENT_GRAMMAR, parseFilter, parseOrderBy } from '../api/routes/mlflow/search-filter.js';

describe('parseFilter', () => {
  it('reads metrics, params, tags and attributes joined by AND', () => {
    expect(parseFilter(`metrics.acc >= 0.9 AND params.lr = '0.1' and tags."mlflow.user" LIKE 'al%' AND attributes.status != 'FAILED'`)).toEqual([
      { entity: 'metric', key: 'acc', op: '>=', value: 0.9 },
      { entity: 'param', key: 'lr', op: '=', value: '0.1' },
      { entity: 'tag', key: 'mlflow.user', op: 'LIKE', value: 'al%' },
      { entity: 'attribute', key: 'status', op: '!=', value: 'FAILED' },
    ]);
  });

  it('accepts backticked keys, singular prefixes, bare attributes, negative numbers and IN lists', () => {
    expect(parseFilter('metric.`val loss` < -1.5e-3 AND run_name ILIKE "%x%" AND start_time > 100 AND run_id IN (\'a\', \'b\')')).toEqual([
      { entity: 'metric', key: 'val loss', op: '<', value: -0.0015 },
      { entity: 'attribute', key: 'run_name', op: 'ILIKE', value: '%x%' },
      { entity: 'attribute', key: 'start_time', op: '>', value: 100 },
      { entity: 'attribute', key: 'run_id', op: 'IN', value: ['a', 'b'] },
    ]);
    expect(parseFilter('tags.a.b.c = \'it\\\'s\'')).toEqual([{ entity: 'tag', key: 'a.b.c', op: '=', value: "it's" }]);
  });

  it('treats an empty or blank filter as matching everything', () => {
    expect(parseFilter(undefined)).toEqual([]);
    expect(parseFilter('   ')).toEqual([]);
  });

  it.each([
    ['metrics.acc > 0.9 OR metrics.acc < 0.1', /OR is not supported/],
    ['metrics.acc LIKE 1', /Invalid comparator 'LIKE' for metrics.acc/],
    ["metrics.acc > 'high'", /Expected numeric value type for metric. Found 'high'/],
    ['params.lr > \'1\'', /Invalid comparator '>' for params.lr/],
    ['params.lr = 1', /Expected a quoted string value for params.lr/],
    ['foo.bar = \'x\'', /Invalid entity type 'foo'/],
    ['colour = \'red\'', /Invalid attribute key 'colour'/],
    ['metrics.acc >', /expected a value but the expression ended/],
    ['metrics.acc 0.9', /Invalid comparator '0.9'/],
    ['metrics.acc > 0.9 metrics.b > 1', /expected AND but found 'metrics.b'/],
    ["params.lr = 'unterminated", /unexpected character/],
    ["params.lr IN ('a')", /IN is only supported for attributes/],
  ])('rejects %s', (filter, message) => {
    expect(() => parseFilter(filter)).toThrow(message);
  });

  it('limits experiment filters to name, times and tags', () => {
    expect(parseFilter("name LIKE 'exp-%' AND tags.team = 'ml'", EXPERIMENT_GRAMMAR)).toHaveLength(2);
    expect(() => parseFilter('metrics.acc > 1', EXPERIMENT_GRAMMAR)).toThrow(/Invalid entity type 'metrics'/);
    expect(() => parseFilter("status = 'RUNNING'", EXPERIMENT_GRAMMAR)).toThrow(/Invalid attribute key 'status'/);
  });
});

describe('parseOrderBy', () => {
  it('reads an identifier with an optional direction, ascending by default', () => {
    expect(parseOrderBy('metrics.acc DESC')).toEqual({ entity: 'metric', key: 'acc', ascending: false });
    expect(parseOrderBy('params.`lr`')).toEqual({ entity: 'param', key: 'lr', ascending: true });
    expect(parseOrderBy('attributes.start_time asc')).toEqual({ entity: 'attribute', key: 'start_time', ascending: true });
  });

  it('rejects empty clauses, unknown attributes and trailing words', () => {
    expect(() => parseOrderBy('')).toThrow(/empty/);
    expect(() => parseOrderBy('attributes.colour')).toThrow(/Invalid attribute key/);
    expect(() => parseOrderBy('metrics.acc DOWN')).toThrow(/expected ASC or DESC but found 'DOWN'/);
  });
});

// The search grammar (lib/search-filter.ts) as the MLflow routes use it: a bad filter or order-by clause is
// INVALID_PARAMETER_VALUE with the grammar's message.
import { invalid } from '../../errors.js';
import * as grammar from '../../../lib/search-filter.js';

export { EXPERIMENT_GRAMMAR, RUN_GRAMMAR, type Comparison, type Grammar, type OrderClause } from '../../../lib/search-filter.js';

function asInvalid<T>(parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    if (err instanceof grammar.SearchFilterError) throw invalid(err.message);
    throw err;
  }
}

export const parseFilter = (input: string | undefined, g?: grammar.Grammar): grammar.Comparison[] => asInvalid(() => grammar.parseFilter(input, g));
export const parseOrderBy = (input: string, g?: grammar.Grammar): grammar.OrderClause => asInvalid(() => grammar.parseOrderBy(input, g));

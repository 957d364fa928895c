// How the console writes numbers (console/src/format.ts): a chart's axis labels stay short and readable from a
// learning rate of 2e-4 to a token count of 3.2M, and a table's values group their thousands.
import { describe, expect, it } from 'vitest';
import { axisNum, num } from '../console/src/format.js';

describe('chart axis labels', () => {
  it('writes thousands with a separator below 10,000, then with k, M, B and T', () => {
    expect([1000, 2500, 9999, 12_500, 99_950, 250_000, 3_200_000, 4e9, 1.5e12].map(axisNum)).toEqual(['1,000', '2,500', '9,999', '12.5k', '100k', '250k', '3.2M', '4B', '1.5T']);
  });

  it('moves to the next unit up rather than writing 1000k', () => {
    expect(axisNum(999_950)).toBe('1M');
    expect(axisNum(999_999_999)).toBe('1B');
  });

  it('writes ordinary values with at most three significant digits and no trailing zeros', () => {
    expect([0, 0.25, 0.5, 1, 2.5, 12.25, 100, 0.001, 0.00125].map(axisNum)).toEqual(['0', '0.25', '0.5', '1', '2.5', '12.3', '100', '0.001', '0.00125']);
  });

  it('writes values below 0.001 as a short exponent, as a learning rate reads', () => {
    expect([2e-4, 1.5e-5, 1e-6].map(axisNum)).toEqual(['2e-4', '1.5e-5', '1e-6']);
  });

  it('keeps the sign, and writes nothing for a missing value', () => {
    expect([-12_500, -0.5, -2e-4].map(axisNum)).toEqual(['-12.5k', '-0.5', '-2e-4']);
    expect([null, undefined, Number.NaN, Infinity].map(axisNum)).toEqual(['', '', '', '']);
  });
});

describe('values in tables and legends', () => {
  it('groups thousands instead of switching to an exponent', () => {
    expect([1234, 12_345.67, 3_200_000].map((v) => num(v))).toEqual(['1,234', '12,345.7', '3,200,000']);
    expect([0.1234567, 2e-4, 0, null].map((v) => num(v))).toEqual(['0.1235', '2.0e-4', '0', '—']);
  });
});

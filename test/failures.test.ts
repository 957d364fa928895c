// Failure types are one contract enum (contracts/failures.ts): activities and the run loop throw its members,
// workflows list its members as non-retryable, and no source spells a type as a string of its own.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { FailureType, FailureTypeSchema, nonRetryable, retryable } from '../contracts/failures.js';

const DIRS = ['activities', 'jobs', 'workflows', 'api', 'datasets', 'events', 'runtime'];

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
}

/** `file: code` for each failure built or matched with a type written as a string literal. */
function literalTypes(file: string, text: string): string[] {
  const patterns = [
    /ApplicationFailure\.(?:nonRetryable|retryable|create)\([^;]*/g,
    /nonRetryableErrorTypes:\s*\[[^\]]*'[^\]]*\]/g,
    new RegExp(`\\.type\\s*[!=]==\\s*'(?:${FailureTypeSchema.options.join('|')})'`, 'g'),
  ];
  return patterns.flatMap((re) => [...text.matchAll(re)].map((m) => `${file}: ${m[0].slice(0, 80)}`));
}

/** The types thrown: each `nonRetryable(FailureType.X` / `retryable(FailureType.X`, and the fault types. */
function thrownTypes(text: string): string[] {
  const thrown = [...text.matchAll(/(?:nonRetryable|retryable)\(FailureType\.(\w+)/g)].map((m) => m[1]!);
  const chosen = [...text.matchAll(/failureType = [^;]*/g)].flatMap((m) => [...m[0].matchAll(/FailureType\.(\w+)/g)].map((t) => t[1]!));
  return [...thrown, ...chosen];
}

describe('failure types', () => {
  it('builds a failure for good, and a retried one, of the given type with its details', () => {
    const bad = nonRetryable(FailureType.BadInput, 'train_path: no such dataset', { field: 'train_path' });
    expect(bad).toBeInstanceOf(ApplicationFailure);
    expect(bad).toMatchObject({ type: 'BadInput', nonRetryable: true, message: 'train_path: no such dataset', details: [{ field: 'train_path' }] });
    expect(retryable(FailureType.JobFailed, 'exited with code 1')).toMatchObject({ type: 'JobFailed', nonRetryable: false });
  });

  it('is spelt nowhere as a string of its own: every failure is built and matched through the enum', () => {
    expect(DIRS.flatMap((d) => sources(d).flatMap((f) => literalTypes(f, readFileSync(f, 'utf8'))))).toEqual([]);
    // The check reads code as written: a string literal type would be named.
    expect(literalTypes('x.ts', "throw ApplicationFailure.nonRetryable('no', 'BadInput');")).toHaveLength(1);
    expect(literalTypes('x.ts', "retry: { nonRetryableErrorTypes: ['BadInput'] }")).toHaveLength(1);
    expect(literalTypes('x.ts', "if (err.type === 'JobFailed') return;")).toHaveLength(1);
    expect(literalTypes('x.ts', "c.type === 'PodScheduled'")).toEqual([]);
  });

  it('has no member that nothing throws', () => {
    const thrown = new Set(DIRS.flatMap((d) => sources(d).flatMap((f) => thrownTypes(readFileSync(f, 'utf8')))));
    expect(FailureTypeSchema.options.filter((t) => !thrown.has(t))).toEqual([]);
  });
});

// What every MLflow handler shares: reading a request from the query string (GET) or JSON body, MLflow's key
// and length validation with its exact messages, opaque offset page tokens, and the experiment id "0".
import type { Context } from 'hono';
import type { z } from 'zod';
import type { AppEnv } from '../../deps.js';
import { ApiError, invalid } from '../../errors.js';
import { LIST_FIELDS } from '../../../contracts/mlflow.js';
import { defaultExperimentId } from '../../../db/repo/experiments.js';

const NUL_MESSAGE = 'Malformed request: strings may not contain NUL (\\u0000) characters';

/** Parses an MLflow request: GET from the query string (repeated keys are lists), other methods from JSON. */
export async function mlflowRequest<S extends z.ZodType>(c: Context<AppEnv>, schema: S): Promise<z.infer<S>> {
  let raw: unknown;
  let text = '';
  if (c.req.method === 'GET') {
    const q = c.req.queries();
    if (Object.entries(q).some(([k, v]) => k.includes('\0') || v.some((x) => x.includes('\0')))) throw invalid(NUL_MESSAGE);
    raw = Object.fromEntries(Object.entries(q).map(([k, v]) => [k, LIST_FIELDS.has(k) ? v : v[v.length - 1]]));
  } else {
    text = await c.req.text();
    try {
      raw = text.trim() === '' ? {} : JSON.parse(text);
    } catch {
      throw invalid('Malformed request: the body is not valid JSON');
    }
    // Postgres text cannot hold NUL, so refuse it here rather than fail in the database.
    if (text.includes('\\u0000')) throw invalid(NUL_MESSAGE);
  }
  const parsed = schema.safeParse(raw, { reportInput: true });
  if (!parsed.success) throw invalid(mlflowValidationMessage(parsed.error.issues[0]!, text));
  return parsed.data;
}

/** `metrics[0].timestamp`: the parameter path as MLflow's messages spell it. */
const parameterPath = (path: readonly PropertyKey[]): string =>
  path.map((p, i) => (typeof p === 'number' ? `[${p}]` : i === 0 ? String(p) : `.${String(p)}`)).join('');

/**
 * MLflow's wording for the first problem of a request, which clients and the UI show to users: a missing field is
 * "Missing value for required parameter", a wrong type "Invalid value <v> for parameter", and a rule of our own keeps
 * its own message. A number is quoted as the client wrote it (9.0 stays 9.0), read back from the raw body.
 */
function mlflowValidationMessage(issue: z.core.$ZodIssue, body: string): string {
  const path = parameterPath(issue.path);
  if (issue.input === undefined || issue.input === null) return `Missing value for required parameter '${path}'.`;
  if (issue.code !== 'invalid_type' && issue.code !== 'invalid_union' && issue.code !== 'invalid_value') return issue.message;
  let shown = JSON.stringify(issue.input);
  const top = issue.path.length === 1 ? String(issue.path[0]) : null;
  if (typeof issue.input === 'number' && top) {
    const literal = new RegExp(`"${top.replace(/\W/g, '\\$&')}"\\s*:\\s*(-?[0-9][0-9.eE+-]*)`).exec(body);
    if (literal?.[1]) shown = literal[1];
  }
  return `Invalid value ${shown} for parameter '${path}' supplied.`;
}

const jsonValue = (v: unknown): string => JSON.stringify(v);
export const invalidValue = (path: string, value: unknown, message?: string): ApiError =>
  invalid(message ? `Invalid value ${jsonValue(value)} for parameter '${path}' supplied: ${message}` : `Invalid value ${jsonValue(value)} for parameter '${path}' supplied.`);

const KEY_CHARS = /^[/\w.\- :]*$/;

/** MLflow's rule for metric, param and tag keys: safe characters, <= 250 long, and a clean relative path. */
export function validateKey(key: string, path: string): void {
  if (!KEY_CHARS.test(key))
    throw invalidValue(path, key, 'Names may only contain alphanumerics, underscores (_), dashes (-), periods (.), spaces ( ), colon(:) and slashes (/).');
  if (pathNotUnique(key))
    throw invalidValue(path, key, `Names may be treated as files in certain cases, and must not resolve to other names when treated as such. This name would resolve to '${normalize(key)}'`);
  if (key.length > 250) throw invalid(`'${path}' exceeds the maximum length of 250 characters`);
}

export function validateLength(what: string, value: string, limit: number): void {
  if (value.length > limit) throw invalid(`'${what}' exceeds the maximum length of ${limit} characters`);
}

/** posixpath.normpath, which MLflow uses to refuse keys like "a/../b", "./a" or "/a". */
function normalize(p: string): string {
  if (p === '') return '.';
  const abs = p.startsWith('/');
  const out: string[] = [];
  for (const part of p.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..' && out.length && out[out.length - 1] !== '..') out.pop();
    else if (part !== '..' || !abs) out.push(part);
  }
  const joined = (abs ? '/' : '') + out.join('/');
  return joined || (abs ? '/' : '.');
}

function pathNotUnique(key: string): boolean {
  const norm = normalize(key);
  return norm !== key || norm === '.' || norm.startsWith('..') || norm.startsWith('/');
}

export const encodePageToken = (offset: number): string => Buffer.from(JSON.stringify({ offset })).toString('base64url');
export function decodePageToken(token: string | undefined): number {
  if (!token) return 0;
  try {
    const { offset } = JSON.parse(Buffer.from(token, 'base64url').toString()) as { offset: unknown };
    if (typeof offset === 'number' && Number.isInteger(offset) && offset >= 0) return offset;
  } catch {
    // fall through to the error below
  }
  throw invalid(`Invalid page token: '${token}' is not a token this server issued`);
}

export function maxResults(value: number | undefined, fallback: number, limit: number): number {
  const n = value ?? fallback;
  if (n < 1 || n > limit) throw invalidValue('max_results', n, `It must be at most ${limit} and at least 1.`);
  return n;
}

/** Experiment ids on the wire: the organization's default experiment is "0". */
export const wireExperimentId = (id: string, organizationId: string): string => (id === defaultExperimentId(organizationId) ? '0' : id);
export const storedExperimentId = (id: string, organizationId: string): string => (id === '0' ? defaultExperimentId(organizationId) : id);


/** MLflow's number rendering: NaN and infinities as strings. */
export const wireDouble = (v: number): number | string => (Number.isNaN(v) ? 'NaN' : v === Infinity ? 'Infinity' : v === -Infinity ? '-Infinity' : v);

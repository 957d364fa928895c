import type { Context } from 'hono';
import type { z } from 'zod';
import { ApiError, describeZodError } from './errors.js';

/** Parses a JSON body with a contract schema; a malformed body is a 400 naming the field, never a 500. */
export async function jsonBody<S extends z.ZodType>(c: Context, schema: S): Promise<z.infer<S>> {
  let raw: unknown;
  try {
    raw = await c.req.json();
  } catch {
    throw new ApiError('BAD_REQUEST', 'request body is not valid JSON');
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new ApiError('INVALID_PARAMETER_VALUE', describeZodError(parsed.error));
  return parsed.data;
}

export function queryParams<S extends z.ZodType>(c: Context, schema: S): z.infer<S> {
  const parsed = schema.safeParse(c.req.query());
  if (!parsed.success) throw new ApiError('INVALID_PARAMETER_VALUE', describeZodError(parsed.error, 'query parameters'));
  return parsed.data;
}

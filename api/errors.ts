// One error shape at the API boundary: { error_code, message, request_id } with MLflow's codes.
import type { Context } from 'hono';
import { z } from 'zod';

export const ERROR_STATUS = {
  INVALID_PARAMETER_VALUE: 400,
  BAD_REQUEST: 400,
  UNAUTHENTICATED: 401,
  PAYMENT_REQUIRED: 402,
  PERMISSION_DENIED: 403,
  RESOURCE_DOES_NOT_EXIST: 404,
  RESOURCE_ALREADY_EXISTS: 400,
  INVALID_STATE: 409,
  REQUEST_LIMIT_EXCEEDED: 413,
  TEMPORARILY_UNAVAILABLE: 503,
  INTERNAL_ERROR: 500,
} as const;
export type ErrorCode = keyof typeof ERROR_STATUS;

export const ErrorBodySchema = z.object({ error_code: z.string(), message: z.string(), request_id: z.string() });

export class ApiError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export const notFound = (what: string): ApiError => new ApiError('RESOURCE_DOES_NOT_EXIST', `${what} does not exist`);
export const invalid = (message: string): ApiError => new ApiError('INVALID_PARAMETER_VALUE', message);

/** zod issues as one readable line per field: `hyperparameters.learning_rate: Too small: expected number to be >0`. */
export function describeZodError(error: z.ZodError, where = 'request body'): string {
  return `invalid ${where}: ` + error.issues.map((i) => `${i.path.length ? i.path.join('.') : '(root)'}: ${i.message}`).join('; ');
}

export function errorResponse(c: Context, code: ErrorCode, message: string): Response {
  return c.json({ error_code: code, message, request_id: c.get('requestId') as string }, ERROR_STATUS[code]);
}

// Request body limits counted on the bytes as they stream in: a chunked body has no Content-Length to trust,
// and an upload must not be buffered whole to be measured. Past the limit the stream errors, whatever the
// handler made of that is replaced by one 413.
import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from './deps.js';
import { ApiError, errorResponse } from './errors.js';

export interface BodyLimit {
  bytes: number;
  /** the refusal, given the size seen (declared, or counted so far) */
  refuse(size: number): ApiError;
}

export function streamingBodyLimit(limitFor: (path: string) => BodyLimit): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const body = c.req.raw.body;
    if (!body) return next();
    const { bytes, refuse } = limitFor(c.req.path);
    const declared = Number(c.req.header('content-length') ?? NaN);
    if (Number.isFinite(declared) && declared > bytes) throw refuse(declared);
    let seen = 0;
    let exceeded = false;
    const counted = body.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, ctl) {
          seen += chunk.byteLength;
          if (seen > bytes) {
            exceeded = true;
            ctl.error(refuse(seen));
            return;
          }
          ctl.enqueue(chunk);
        },
      }),
    );
    c.req.raw = new Request(c.req.raw, { body: counted, duplex: 'half' } as RequestInit);
    await next();
    if (exceeded) {
      const err = refuse(seen);
      c.res = errorResponse(c, err.code, err.message);
    }
  };
}

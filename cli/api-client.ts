// The CLI's HTTP client for the API: bearer token, JSON, and the API's error shape turned into one line.
export class ApiClientError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export interface ApiClient {
  get<T = unknown>(path: string): Promise<T>;
  post<T = unknown>(path: string, body?: unknown, opts?: { raw?: RequestInit["body"]; headers?: Record<string, string> }): Promise<T>;
  patch<T = unknown>(path: string, body: unknown): Promise<T>;
  del<T = unknown>(path: string): Promise<T>;
  /** A GET whose body is read as a stream (a file download, server-sent events); a non-2xx answer is thrown as ApiClientError. */
  stream(path: string, headers?: Record<string, string>): Promise<Response>;
  url: string;
}

export function createApiClient(url: string, token: string): ApiClient {
  async function send(method: string, path: string, body?: unknown, opts: { raw?: RequestInit['body']; headers?: Record<string, string> } = {}): Promise<Response> {
    try {
      return await fetch(url + path, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...opts.headers },
        body: opts.raw ?? (body !== undefined ? JSON.stringify(body) : undefined),
        ...(opts.raw ? { duplex: 'half' } : {}),
      } as RequestInit);
    } catch (err) {
      throw new ApiClientError(0, 'UNAVAILABLE', `cannot reach the hanzo-ml API at ${url} (${(err as Error).cause ?? (err as Error).message}); is \`hanzo-ml dev\` running?`);
    }
  }
  async function failure(res: Response): Promise<ApiClientError> {
    const text = await res.text();
    const json = (() => {
      try {
        return JSON.parse(text) as Record<string, unknown>;
      } catch {
        return {} as Record<string, unknown>;
      }
    })();
    return new ApiClientError(res.status, String(json.error_code ?? res.status), String(json.message ?? text));
  }
  async function call<T>(method: string, path: string, body?: unknown, opts: { raw?: RequestInit["body"]; headers?: Record<string, string> } = {}): Promise<T> {
    const res = await send(method, path, body, opts);
    if (!res.ok) throw await failure(res);
    const text = await res.text();
    return (text ? JSON.parse(text) : {}) as T;
  }
  return {
    url,
    get: (p) => call('GET', p),
    post: (p, b, o) => call('POST', p, b, o),
    patch: (p, b) => call('PATCH', p, b),
    del: (p) => call('DELETE', p),
    stream: async (p, headers) => {
      const res = await send('GET', p, undefined, headers ? { headers } : {});
      if (!res.ok) throw await failure(res);
      return res;
    },
  };
}

// The kubelet's log endpoint, `GET /containerLogs/{namespace}/{pod}/{container}`, over HTTPS on loopback: the API
// server proxies `pods/log` (and so `kubectl logs`) here, authenticating with its kubelet client certificate.
import { closeSync, existsSync, openSync, readFileSync, readSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';

/** Where one container's log is, or why there is none (the kubelet's wording). */
export type LogTarget = { path: string; running(): boolean } | { status: number; message: string };

export type LogLookup = (namespace: string, pod: string, container: string, previous: boolean) => LogTarget;

function tail(text: string, lines: number): string {
  if (lines <= 0) return '';
  const parts = text.split('\n');
  const trailing = parts.at(-1) === '' ? parts.pop() : undefined;
  return parts.slice(-lines).join('\n') + (trailing !== undefined ? '\n' : '');
}

/** Streams what the file gains until the container stops and the file is drained, or the client leaves. */
function follow(res: ServerResponse, path: string, from: number, running: () => boolean): void {
  let pos = from;
  const timer = setInterval(() => {
    const size = existsSync(path) ? statSync(path).size : 0;
    if (size > pos) {
      const fd = openSync(path, 'r');
      const buf = Buffer.alloc(size - pos);
      readSync(fd, buf, 0, buf.length, pos);
      closeSync(fd);
      pos = size;
      res.write(buf);
    } else if (!running()) {
      clearInterval(timer);
      res.end();
    }
  }, 200);
  res.on('close', () => clearInterval(timer));
}

function serveLogs(req: IncomingMessage, res: ServerResponse, lookup: LogLookup): void {
  const url = new URL(req.url ?? '/', 'https://127.0.0.1');
  const m = /^\/containerLogs\/([^/]+)\/([^/]+)\/([^/]+)$/.exec(url.pathname);
  if (req.method !== 'GET' || !m) {
    res.writeHead(404, { 'content-type': 'text/plain' }).end(`${url.pathname}: the kubelet stand-in serves only /containerLogs\n`);
    return;
  }
  const [namespace, pod, container] = m.slice(1).map(decodeURIComponent) as [string, string, string];
  const target = lookup(namespace, pod, container, url.searchParams.get('previous') === 'true');
  if ('status' in target) {
    res.writeHead(target.status, { 'content-type': 'text/plain' }).end(target.message);
    return;
  }
  const raw = existsSync(target.path) ? readFileSync(target.path) : Buffer.alloc(0);
  const tailLines = url.searchParams.get('tailLines');
  const limitBytes = url.searchParams.get('limitBytes');
  let body = tailLines !== null ? Buffer.from(tail(raw.toString('utf8'), Number(tailLines))) : raw;
  if (limitBytes !== null) body = body.subarray(0, Number(limitBytes));
  res.writeHead(200, { 'content-type': 'text/plain' });
  res.write(body);
  if (url.searchParams.get('follow') === 'true' && limitBytes === null) follow(res, target.path, raw.length, target.running);
  else res.end();
}

export function startLogServer(opts: { port: number; cert: string; key: string; clientCa: string; lookup: LogLookup }): Promise<Server> {
  const server = createServer(
    { cert: readFileSync(opts.cert), key: readFileSync(opts.key), ca: readFileSync(opts.clientCa), requestCert: true, rejectUnauthorized: true },
    (req, res) => serveLogs(req, res, opts.lookup),
  );
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, '127.0.0.1', () => resolve(server));
  });
}

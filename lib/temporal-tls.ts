// TLS to the Temporal cluster (temporal.tls, tls_cert, tls_key, tls_ca, tls_server_name): one set of options for
// every connection a process opens, the client's (API, `temporal setup`) and the worker's native one.
import { readFileSync } from 'node:fs';
import type { TLSConfig } from '@temporalio/client';
import type { Config } from '../contracts/config.js';
import { ConfigError } from './config.js';

/** Undefined: plaintext. The files are read at each connect, so a rotated certificate is used by the next one. */
export function temporalTls(t: Config['temporal']): TLSConfig | undefined {
  if (!t.tls) return undefined;
  const read = (key: 'tls_cert' | 'tls_key' | 'tls_ca', path: string): Buffer => {
    try {
      return readFileSync(path);
    } catch (err) {
      throw new ConfigError(`temporal.${key} (HANZO_ML_TEMPORAL_${key.toUpperCase()}): cannot read ${path}: ${(err as Error).message}`);
    }
  };
  return {
    ...(t.tls_ca ? { serverRootCACertificate: read('tls_ca', t.tls_ca) } : {}),
    ...(t.tls_cert && t.tls_key ? { clientCertPair: { crt: read('tls_cert', t.tls_cert), key: read('tls_key', t.tls_key) } } : {}),
    ...(t.tls_server_name ? { serverNameOverride: t.tls_server_name } : {}),
  };
}

/** The connection options of temporal.address: `{ address, tls }`. */
export function temporalConnectionOptions(address: string, t: Config['temporal']): { address: string; tls?: TLSConfig } {
  const tls = temporalTls(t);
  return tls ? { address, tls } : { address };
}

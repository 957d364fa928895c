// TLS to Temporal (temporal.tls, tls_cert, tls_key, tls_ca, tls_server_name), as the Helm chart mounts it: the API's
// client connection, the worker's native connection and `temporal setup` reach a real Temporal dev server through
// a TLS front end on loopback that demands a client certificate signed by our CA, and plaintext or a connection
// without the certificate is refused. The configuration refuses TLS settings that would do nothing.
import { mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { connect, type Server as NetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type TLSSocket } from 'node:tls';
import { Connection } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../lib/config.js';
import { startTemporalDevServer, type DevServer } from '../lib/temporal-dev-server.js';
import { startRuntime } from '../runtime/embedded.js';
import { temporalConnectionOptions } from '../lib/temporal-tls.js';
import { setupTemporal } from '../runtime/temporal.js';
import { issue, LOOPBACK_SANS, makeClusterPki } from './support/cluster/pki.js';
import { testConfig } from './support/config.js';
import { freePort } from './support/ports.js';

let temporal: DevServer;
let frontEnd: NetServer;
let address: string;
let pki: { ca: string; cert: string; key: string };
/** The subject CN of every client certificate the front end accepted. */
const clients: string[] = [];

/** A TLS front end (h2 by ALPN, client certificate required) that pipes each connection to the plaintext server. */
function tlsFrontEnd(server: { cert: string; key: string }, ca: string, upstreamPort: number): NetServer {
  const front = createServer({ cert: readFileSync(server.cert), key: readFileSync(server.key), ca: readFileSync(ca), requestCert: true, rejectUnauthorized: true, ALPNProtocols: ['h2'] }, (socket: TLSSocket) => {
    clients.push(String(socket.getPeerCertificate().subject?.CN));
    const upstream = connect(upstreamPort, '127.0.0.1');
    socket.pipe(upstream).pipe(socket);
    socket.on('error', () => upstream.destroy());
    upstream.on('error', () => socket.destroy());
  });
  front.on('tlsClientError', () => undefined);
  return front;
}

const tlsEnv = (extra: Record<string, string> = {}) => ({
  HANZO_ML_TEMPORAL_ADDRESS: address,
  HANZO_ML_TEMPORAL_TLS: 'true',
  HANZO_ML_TEMPORAL_TLS_CERT: pki.cert,
  HANZO_ML_TEMPORAL_TLS_KEY: pki.key,
  HANZO_ML_TEMPORAL_TLS_CA: pki.ca,
  // The address is an IP; the server's certificate also names localhost, which this checks against.
  HANZO_ML_TEMPORAL_TLS_SERVER_NAME: 'localhost',
  ...extra,
});

describe('TLS to Temporal', () => {
  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hanzo-ml-temporal-tls-'));
    const ca = makeClusterPki(dir);
    const serving = issue(dir, 'temporal-frontend', '/CN=temporal-frontend', 'serverAuth', LOOPBACK_SANS);
    const client = issue(dir, 'hanzo-ml-client', '/CN=hanzo-ml-worker', 'clientAuth');
    pki = { ca: ca.caCert, ...client };
    const loaded = testConfig();
    mkdirSync(join(loaded.home, 'logs'), { recursive: true });
    const upstreamPort = await freePort();
    temporal = await startTemporalDevServer({ binary: loaded.bootstrap.temporal, home: loaded.home, port: upstreamPort, uiPort: null, namespace: 'default' });
    frontEnd = tlsFrontEnd(serving, ca.caCert, upstreamPort);
    const port = await freePort();
    await new Promise<void>((resolve) => frontEnd.listen(port, '127.0.0.1', resolve));
    address = `127.0.0.1:${port}`;
  }, 120_000);

  afterAll(async () => {
    await new Promise((resolve) => (frontEnd ? frontEnd.close(resolve) : resolve(undefined)));
    await temporal?.stop();
  });

  it('connects the client and the worker with the configured client certificate, CA and server name', async () => {
    const { config } = testConfig(tlsEnv());
    const before = clients.length;
    const client = await Connection.connect(temporalConnectionOptions(config.temporal.address!, config.temporal));
    expect((await client.workflowService.getSystemInfo({})).serverVersion).toBeTruthy();
    await client.close();
    const native = await NativeConnection.connect(temporalConnectionOptions(config.temporal.address!, config.temporal));
    await native.close();
    expect(clients.slice(before)).toEqual(expect.arrayContaining(['hanzo-ml-worker']));
    expect(clients.length - before).toBeGreaterThanOrEqual(2);
  });

  it('runs the API runtime and `temporal setup` over TLS', async () => {
    const loaded = testConfig(tlsEnv());
    const runtime = await startRuntime({ ...loaded, temporalAddress: address, temporalUiUrl: null, worker: false, listen: false });
    try {
      expect((await runtime.client.workflowService.describeNamespace({ namespace: 'default' })).namespaceInfo?.name).toBe('default');
    } finally {
      await runtime.stop();
    }
    await expect(setupTemporal(address, loaded.config.temporal)).resolves.toBeUndefined();
  });

  it('is refused without the client certificate, and in plaintext', async () => {
    const serverOnly = Object.entries(tlsEnv()).filter(([k]) => !/^HANZO_ML_TEMPORAL_TLS_(CERT|KEY)$/.test(k));
    const { config } = testConfig(Object.fromEntries(serverOnly));
    expect(temporalConnectionOptions(address, config.temporal).tls).not.toHaveProperty('clientCertPair');
    await expect(Connection.connect({ ...temporalConnectionOptions(address, config.temporal), connectTimeout: 3000 })).rejects.toThrow();
    await expect(Connection.connect({ address, connectTimeout: 3000 })).rejects.toThrow();
  });

  it('refuses TLS settings that would do nothing or cannot work, naming the key', () => {
    const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-test-'));
    const load = (env: Record<string, string>) => () => loadConfig({ HANZO_ML_HOME: home, ...env });
    expect(load({ HANZO_ML_TEMPORAL_ADDRESS: address, HANZO_ML_TEMPORAL_TLS_CA: pki.ca })).toThrow(/temporal\.tls_ca \(HANZO_ML_TEMPORAL_TLS_CA\): set without temporal\.tls: true/);
    expect(load({ HANZO_ML_TEMPORAL_ADDRESS: address, HANZO_ML_TEMPORAL_TLS: 'true', HANZO_ML_TEMPORAL_TLS_CERT: pki.cert })).toThrow(/temporal\.tls_key .*needs both tls_cert and tls_key/);
    expect(load({ HANZO_ML_TEMPORAL_TLS: 'true' })).toThrow(/temporal\.tls .*needs temporal\.address/);
    const { config } = loadConfig({ HANZO_ML_HOME: home, ...tlsEnv({ HANZO_ML_TEMPORAL_TLS_CA: join(home, 'missing-ca.crt') }) });
    expect(() => temporalConnectionOptions(address, config.temporal)).toThrow(/temporal\.tls_ca \(HANZO_ML_TEMPORAL_TLS_CA\): cannot read .*missing-ca\.crt/);
  });
});

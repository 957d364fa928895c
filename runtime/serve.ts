// `hanzo-ml serve`: the API only, stateless, any number of replicas, against the Temporal cluster of
// temporal.address and the shared catalogue. No worker, no executor.
import { Client, Connection } from '@temporalio/client';
import { loadConfig } from '../lib/config.js';
import { buildApp, closeServer, listen, openCore, startEventsPart, startMetricsPart, untilSignalled, apiUrlOf } from './parts.js';
import { clusterTemporalAddress } from './temporal.js';
import { temporalConnectionOptions } from '../lib/temporal-tls.js';

export async function runServe(): Promise<void> {
  const loaded = loadConfig();
  const address = clusterTemporalAddress(loaded.config, 'serve');
  const core = await openCore(loaded, 'revoke');
  const connection = await Connection.connect(temporalConnectionOptions(address, loaded.config.temporal));
  const client = new Client({ connection, namespace: loaded.config.temporal.namespace });
  const events = await startEventsPart(core);
  const metrics = await startMetricsPart(core, true);
  const server = await listen(buildApp(core, client, null, metrics.metrics), loaded.config.server.host, loaded.config.server.port);
  process.stderr.write(`hanzo-ml serve: api ${apiUrlOf(loaded.config)}\n`);
  await untilSignalled('hanzo-ml serve', async () => {
    await closeServer(server);
    await metrics.stop();
    await events.stop();
    await connection.close();
    await core.catalogue.close();
  });
}

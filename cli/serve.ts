// The production process shapes. `hanzo-ml serve`: the API only, stateless, any number of replicas.
// `hanzo-ml worker`: the Temporal worker only (workflows, catalogue activities and, on the job task queue, the
// activities that start and watch jobs). Both need a Temporal cluster (temporal.address); `hanzo-ml dev`
// remains the all-in-one embedded stack.
import { Connection } from '@temporalio/client';
import { ConfigError, loadConfig, type LoadedConfig } from '../lib/config.js';
import { startRuntime, type Runtime } from '../lib/stack.js';
import { registerSearchAttributes } from '../lib/temporal-setup.js';
import { startEventRelay } from '../lib/event-relay.js';
import { createLogger } from '../lib/log.js';
import { openCatalogue } from '../db/client.js';

function clusterConfig(shape: string): LoadedConfig & { address: string } {
  const loaded = loadConfig();
  const address = loaded.config.temporal.address;
  if (!address) throw new ConfigError(`hanzo-ml ${shape} needs a Temporal cluster: set temporal.address (HANZO_ML_TEMPORAL_ADDRESS), or run hanzo-ml dev for the embedded stack`);
  return { ...loaded, address };
}

async function untilSignalled(runtime: Runtime, shape: string): Promise<void> {
  process.stderr.write(`hanzo-ml ${shape}: ready (SIGTERM stops it)\n`);
  await new Promise<void>((resolve) => {
    const onSignal = (): void => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      // Jobs are not stopped: they belong to their workflows, and the next worker attaches to them.
      void runtime.stop().then(resolve);
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });
}

export async function runServe(): Promise<void> {
  const { address, ...loaded } = clusterConfig('serve');
  const runtime = await startRuntime({ ...loaded, temporalAddress: address, temporalUiUrl: null, worker: false, devToken: false });
  process.stderr.write(`hanzo-ml serve: api ${runtime.apiUrl}\n`);
  await untilSignalled(runtime, 'serve');
}

export async function runWorker(): Promise<void> {
  const { address, ...loaded } = clusterConfig('worker');
  await setupTemporal(address, loaded.config.temporal.namespace);
  const runtime = await startRuntime({ ...loaded, temporalAddress: address, temporalUiUrl: null, api: false, devToken: false });
  process.stderr.write(`hanzo-ml worker: executor ${loaded.config.scheduler.executor}, ${loaded.config.scheduler.max_concurrent_jobs} job slots\n`);
  await untilSignalled(runtime, 'worker');
}

/** `hanzo-ml temporal setup` (and every worker start): registers our search attributes on the cluster. */
export async function setupTemporal(address?: string, namespace?: string): Promise<void> {
  const loaded = address ? null : clusterConfig('temporal setup');
  const connection = await Connection.connect({ address: address ?? loaded!.address });
  try {
    const ns = namespace ?? loaded!.config.temporal.namespace;
    const added = await registerSearchAttributes(connection, ns);
    process.stderr.write(added.length ? `temporal: registered search attributes ${added.join(', ')} in ${ns}\n` : `temporal: search attributes already registered in ${ns}\n`);
  } finally {
    await connection.close();
  }
}

/**
 * `hanzo-ml relay`: only the outbox relay (API and worker processes run one too when stream.brokers is set;
 * one at a time publishes). Needs the shared catalogue of database.url.
 */
export async function runRelay(): Promise<void> {
  const { config } = loadConfig();
  if (!config.stream.brokers) throw new ConfigError('hanzo-ml relay needs stream.brokers (HANZO_ML_STREAM_BROKERS)');
  if (!config.database.url) throw new ConfigError('hanzo-ml relay needs the shared catalogue: set database.url (HANZO_ML_DATABASE_URL)');
  const log = createLogger(config.logging);
  const catalogue = await openCatalogue({ url: config.database.url });
  const relay = await startEventRelay({ db: catalogue.db, config, log });
  process.stderr.write(`hanzo-ml relay: publishing to ${config.stream.brokers}\n`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await relay.stop();
  await catalogue.close();
}

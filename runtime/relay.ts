// `hanzo-ml relay`: only the outbox relay (API and worker processes run one too when stream.brokers is set; one at
// a time publishes). Needs the shared catalogue of database.url.
import { ConfigError, loadConfig } from '../lib/config.js';
import { createLogger } from '../lib/log.js';
import { openCatalogue } from '../db/client.js';
import { startEventRelay } from '../events/relay.js';
import { untilSignalled } from './parts.js';

export async function runRelay(): Promise<void> {
  const { config } = loadConfig();
  if (!config.stream.brokers) throw new ConfigError('hanzo-ml relay needs stream.brokers (HANZO_ML_STREAM_BROKERS)');
  if (!config.database.url) throw new ConfigError('hanzo-ml relay needs the shared catalogue: set database.url (HANZO_ML_DATABASE_URL)');
  const log = createLogger(config.logging);
  const catalogue = await openCatalogue({ url: config.database.url });
  const relay = await startEventRelay({ db: catalogue.db, config, log });
  process.stderr.write(`hanzo-ml relay: publishing to ${config.stream.brokers}\n`);
  await untilSignalled('hanzo-ml relay', async () => {
    await relay.stop();
    await catalogue.close();
  });
}

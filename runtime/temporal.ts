// The Temporal cluster of the production shapes: its address, and the search attributes our workflows set.
import { Connection } from '@temporalio/client';
import type { Config } from '../contracts/config.js';
import { ConfigError, loadConfig } from '../lib/config.js';
import { registerSearchAttributes } from '../lib/temporal-setup.js';
import { temporalConnectionOptions } from '../lib/temporal-tls.js';

export function clusterTemporalAddress(config: Config, shape: string): string {
  const address = config.temporal.address;
  if (!address) throw new ConfigError(`hanzo-ml ${shape} needs a Temporal cluster: set temporal.address (HANZO_ML_TEMPORAL_ADDRESS), or run hanzo-ml dev for the embedded stack`);
  return address;
}

/** `hanzo-ml temporal setup` (and every worker start): registers our search attributes on the cluster. */
export async function setupTemporal(address?: string, temporal?: Config['temporal']): Promise<void> {
  const config = address && temporal ? null : loadConfig().config;
  const settings = temporal ?? config!.temporal;
  const connection = await Connection.connect(temporalConnectionOptions(address ?? clusterTemporalAddress(config!, 'temporal setup'), settings));
  try {
    const ns = settings.namespace;
    const added = await registerSearchAttributes(connection, ns);
    process.stderr.write(added.length ? `temporal: registered search attributes ${added.join(', ')} in ${ns}\n` : `temporal: search attributes already registered in ${ns}\n`);
  } finally {
    await connection.close();
  }
}

import type { Db } from '../client.js';
import { outbox } from '../schema/index.js';

export type Tx = Parameters<Parameters<Db['transaction']>[0]>[0] | Db;

export const TOPICS = {
  jobs: 'jobs',
  metrics: 'metrics',
  models: 'models',
  datasets: 'datasets',
  pipelines: 'pipelines',
} as const;

/** Records an event in the same transaction as the change it describes (the relay publishes it later). */
export async function emitEvent(
  tx: Tx,
  organizationId: string,
  topic: keyof typeof TOPICS,
  key: string,
  payload: Record<string, unknown>,
): Promise<void> {
  await tx.insert(outbox).values({ organizationId, topic: TOPICS[topic], key, payload: { ...payload, timestamp: new Date().toISOString() } });
}

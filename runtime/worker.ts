// `hanzo-ml worker`: the Temporal worker only (workflows, catalogue activities and, on the job task queue, the
// activities that start and watch jobs), with its metrics endpoint and the event relay. No API.
import { loadConfig } from '../lib/config.js';
import { openCore, startEventsPart, startMetricsPart, startWorkerPart, untilSignalled } from './parts.js';
import { clusterTemporalAddress, setupTemporal } from './temporal.js';

export async function runWorker(): Promise<void> {
  const loaded = loadConfig();
  const address = clusterTemporalAddress(loaded.config, 'worker');
  await setupTemporal(address, loaded.config.temporal);
  const core = await openCore(loaded, 'revoke');
  const worker = await startWorkerPart(core, { temporalAddress: address });
  const events = await startEventsPart(core);
  const metrics = await startMetricsPart(core, true);
  process.stderr.write(`hanzo-ml worker: executor ${loaded.config.scheduler.executor}, ${loaded.config.scheduler.max_concurrent_jobs} job slots\n`);
  // Jobs are not stopped: they belong to their workflows, and the next worker attaches to them.
  await untilSignalled('hanzo-ml worker', async () => {
    await worker.stop();
    await metrics.stop();
    await events.stop();
    await core.catalogue.close();
  });
}

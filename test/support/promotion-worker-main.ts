// promotion-worker.ts as a process of its own: a test kills it (SIGKILL, no clean-up) and starts another.
// Configured by the environment: HANZO_ML_* settings, TEST_TEMPORAL_ADDRESS and TEST_TASK_QUEUE.
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { startPromotionWorker } from './promotion-worker.js';

Runtime.install({ logger: new DefaultLogger('WARN') });
const env = Object.fromEntries(Object.entries(process.env).filter((e): e is [string, string] => e[0].startsWith('HANZO_ML_') && e[1] !== undefined));
const worker = await startPromotionWorker({ env, temporalAddress: process.env.TEST_TEMPORAL_ADDRESS!, taskQueue: process.env.TEST_TASK_QUEUE! });
process.stdout.write('worker running\n');
process.once('SIGTERM', () => void worker.stop().then(() => process.exit(0)));
await worker.running;

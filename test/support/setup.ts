// Keep the Temporal SDK's own log to warnings in tests (each vitest file runs in its own process).
import { DefaultLogger, Runtime } from '@temporalio/worker';

Runtime.install({ logger: new DefaultLogger('WARN') });

// The pipeline worker: two Temporal workers in one process. One polls the workflow task queue (the workflows and
// the quick catalogue activities); the other polls the job task queue beside it (train, eval, merge, Candle and
// trial activities, each of which holds a job for minutes to days), with scheduler.max_concurrent_jobs slots, so
// a quick activity never waits behind a week-long job.
import { fileURLToPath } from 'node:url';
import { NativeConnection, Worker, bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { PIPELINE_TASK_QUEUE, jobsTaskQueueOf } from '../contracts/pipeline.js';
import { createActivities } from '../activities/index.js';
import type { ActivityDeps } from '../activities/deps.js';

export const workflowsPath = fileURLToPath(new URL('../workflows/index.ts', import.meta.url));

/** Bundles the workflow code once; tests reuse one bundle across workers. */
export function bundleWorkflows(): Promise<WorkflowBundleWithSourceMap> {
  return bundleWorkflowCode({ workflowsPath, logger: { log: () => undefined, trace: () => undefined, debug: () => undefined, info: () => undefined, warn: console.warn, error: console.error } });
}

export interface PipelineWorker {
  run(): Promise<void>;
  /** Runs until `until` settles, then shuts down and returns its value (as Worker.runUntil). */
  runUntil<T>(until: Promise<T>): Promise<T>;
  shutdown(): void;
  /** RUNNING while either worker runs, STOPPED once both have stopped. */
  getState(): string;
}

export async function createPipelineWorker(opts: {
  connection: NativeConnection;
  namespace: string;
  deps: ActivityDeps;
  workflowBundle?: WorkflowBundleWithSourceMap;
  taskQueue?: string;
}): Promise<PipelineWorker> {
  const taskQueue = opts.taskQueue ?? PIPELINE_TASK_QUEUE;
  const activities = createActivities(opts.deps);
  const workflows = await Worker.create({
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue,
    ...(opts.workflowBundle ? { workflowBundle: opts.workflowBundle } : { workflowsPath }),
    activities,
    maxConcurrentActivityTaskExecutions: 16,
    shutdownGraceTime: '3s',
  });
  const jobs = await Worker.create({
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: jobsTaskQueueOf(taskQueue),
    activities,
    // Each slot is one job being watched (mostly waiting on a process or a pod), not CPU work here.
    maxConcurrentActivityTaskExecutions: opts.deps.config.scheduler.max_concurrent_jobs,
    shutdownGraceTime: '3s',
  });
  const both = [workflows, jobs];
  const self: PipelineWorker = {
    run: async () => {
      // One failing stops the other: a worker half up would take workflows it cannot run the jobs of.
      const stopping = (other: Worker) => (err: unknown) => {
        if (other.getState() === 'RUNNING') other.shutdown();
        throw err;
      };
      await Promise.all([workflows.run().catch(stopping(jobs)), jobs.run().catch(stopping(workflows))]);
    },
    runUntil: async <T>(until: Promise<T>): Promise<T> => {
      const running = self.run();
      try {
        return await Promise.race([until, running.then(() => until)]);
      } finally {
        self.shutdown();
        await running;
      }
    },
    shutdown: () => {
      for (const w of both) if (w.getState() === 'RUNNING') w.shutdown();
    },
    getState: () => {
      const states = both.map((w) => w.getState());
      if (states.includes('FAILED')) return 'FAILED';
      if (states.every((st) => st === 'STOPPED')) return 'STOPPED';
      return states.includes('RUNNING') ? 'RUNNING' : states[0]!;
    },
  };
  return self;
}

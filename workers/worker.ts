// The pipeline worker: runs fineTunePipelineWorkflow and all activities on the pipeline task queue.
import { fileURLToPath } from 'node:url';
import { NativeConnection, Worker, bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { PIPELINE_TASK_QUEUE } from '../contracts/pipeline.js';
import { createActivities } from '../activities/index.js';
import type { ActivityDeps } from '../activities/deps.js';

export const workflowsPath = fileURLToPath(new URL('../workflows/index.ts', import.meta.url));

/** Bundles the workflow code once; tests reuse one bundle across workers. */
export function bundleWorkflows(): Promise<WorkflowBundleWithSourceMap> {
  return bundleWorkflowCode({ workflowsPath, logger: { log: () => undefined, trace: () => undefined, debug: () => undefined, info: () => undefined, warn: console.warn, error: console.error } });
}

export async function createPipelineWorker(opts: {
  connection: NativeConnection;
  namespace: string;
  deps: ActivityDeps;
  workflowBundle?: WorkflowBundleWithSourceMap;
  taskQueue?: string;
}): Promise<Worker> {
  return Worker.create({
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue ?? PIPELINE_TASK_QUEUE,
    ...(opts.workflowBundle ? { workflowBundle: opts.workflowBundle } : { workflowsPath }),
    activities: createActivities(opts.deps),
    // Long jobs are mostly waiting on a child process; a few at a time keep the CPU for the jobs.
    maxConcurrentActivityTaskExecutions: 8,
    shutdownGraceTime: '3s',
  });
}

// The executor of scheduler.executor, chosen once at start-up, and what the embedded stack does with its local
// jobs when it stops.
import { join } from 'node:path';
import type { Config } from '../../contracts/config.js';
import { trainerPython, type Bootstrap } from '../../lib/config.js';
import type { Logger } from '../../lib/log.js';
import { detectLocalGpus } from '../queue/admission.js';
import { localJobEnvironment } from '../environment.js';
import { kubernetesExecutorFromConfig } from './kubernetes.js';
import { LocalExecutor, jobState, runningLocalJobs, signalJob } from './local.js';
import type { JobExecutor } from './types.js';

export function createExecutor(o: { config: Config; home: string; bootstrap: Bootstrap }, log: Logger): JobExecutor {
  if (o.config.scheduler.executor === 'kubernetes') return kubernetesExecutorFromConfig(o.config, log);
  const gpus = detectLocalGpus(o.config.scheduler.local_gpus);
  return new LocalExecutor({ workRoot: localJobsRoot(o.home), python: trainerPython(o), env: localJobEnvironment(o), gpus });
}

export const localJobsRoot = (home: string): string => join(home, 'work', 'jobs');

/**
 * Ctrl-C stops local jobs too: SIGTERM makes the trainer write an emergency checkpoint (the job runner uploads
 * it), and the restarted stack resumes from it. Waits up to 60 s for the jobs to exit. Jobs of a cluster are
 * the cluster's: stopping a process leaves them running, and the next worker attaches.
 */
export async function stopLocalJobs(home: string, log: Logger): Promise<void> {
  const running = runningLocalJobs(localJobsRoot(home));
  for (const w of running) {
    log.info('stopping job (emergency checkpoint)', { workdir: w });
    signalJob(w, 'SIGTERM');
  }
  const deadline = Date.now() + 60_000;
  while (running.some((w) => jobState(w).state === 'running') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
}

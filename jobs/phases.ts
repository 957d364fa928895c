// A submitted job's status follows the executor's jobs it runs: queued while one waits (for a slot, in a queue),
// running once one runs. Jobs of several steps (a conversion runs four) go back to queued between them.
import type { JobQueuePlace } from '../contracts/jobs.js';
import type { Db } from '../db/client.js';
import { setJobQueue, setJobStatus } from '../db/repo/jobs.js';
import type { RunJobOptions } from './run-loop.js';

export type Phase = (p: 'waiting' | 'running', why: string | null, queue?: JobQueuePlace | null) => Promise<void>;
type Callbacks = Required<Pick<RunJobOptions<unknown>, 'onWaiting' | 'onPoll'>>;

/** The run loop's callbacks that move the job through its phases, each change told once. */
export function phaseCallbacks(onPhase: Phase): Callbacks {
  let running = false;
  return {
    onWaiting: async (why, queue) => {
      running = false;
      await onPhase('waiting', why, queue);
    },
    onPoll: async () => {
      if (!running) {
        running = true;
        await onPhase('running', null);
      }
      return {};
    },
  };
}

/**
 * A submitted job's row through its phases: queued with the executor's reason and its place in the queue (whose
 * changes its `queue` events tell, db/repo/jobs.ts setJobQueue), then running.
 */
export function jobPhaseRecorder(db: Db, jobId: string) {
  return async (p: 'waiting' | 'running', why: string | null, queue?: JobQueuePlace | null): Promise<void> => {
    await setJobStatus(db, jobId, p === 'running' ? 'running' : 'queued', { message: why });
    if (p === 'waiting') await setJobQueue(db, jobId, queue ?? null);
  };
}

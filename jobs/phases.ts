// A submitted job's status follows the executor's jobs it runs: queued while one waits (for a slot, in a queue),
// running once one runs. Jobs of several steps (a conversion runs four) go back to queued between them.
import type { RunJobOptions } from './run-loop.js';

export type Phase = (p: 'waiting' | 'running', why: string | null) => Promise<void>;
type Callbacks = Required<Pick<RunJobOptions<unknown>, 'onWaiting' | 'onPoll'>>;

/** The run loop's callbacks that move the job through its phases, each change told once. */
export function phaseCallbacks(onPhase: Phase): Callbacks {
  let running = false;
  return {
    onWaiting: async (why) => {
      running = false;
      await onPhase('waiting', why);
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

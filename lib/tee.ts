// One stream read once into several consumers at the pace of the slowest (an upload stored and checked as it arrives).
import { once } from 'node:events';
import type { Readable, Writable } from 'node:stream';

/**
 * Writes each chunk of `source` to every sink before reading the next, so the slowest sink holds the source back
 * (and, through it, the sender). The sinks are ended after the last chunk; `hold.sink` only once `hold.until` has
 * resolved (a store whose object must not become whole before the checks on the other sink have passed). On the
 * source's error, `until`'s rejection or the signal, the source and every sink are destroyed with the reason and the
 * promise rejects with it.
 */
export async function tee(source: Readable, sinks: Writable[], signal: AbortSignal, hold?: { sink: Writable; until: Promise<unknown> }): Promise<void> {
  // Only while it is read: an abort after the last chunk (a check failing at the end) has nothing left to stop here.
  const onAbort = () => source.destroy(signal.reason instanceof Error ? signal.reason : new Error(String(signal.reason)));
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    for await (const chunk of source) {
      signal.throwIfAborted();
      await Promise.all(sinks.map((s) => (s.write(chunk) ? undefined : once(s, 'drain', { signal }))));
    }
    signal.throwIfAborted();
    for (const s of sinks) if (s !== hold?.sink) s.end();
    if (hold) {
      await hold.until;
      signal.throwIfAborted();
      hold.sink.end();
    }
  } catch (err) {
    const reason = signal.aborted && signal.reason instanceof Error ? signal.reason : (err as Error);
    source.destroy();
    // A sink's reader may not have started yet (still opening its file): the error stays on the sink (`errored`) for
    // it to find, rather than being thrown as an event nobody listens to.
    for (const s of sinks) s.on('error', () => undefined).destroy(reason);
    throw reason;
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
}

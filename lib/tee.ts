// One stream read once into several consumers at the pace of the slowest (an upload stored and checked as it arrives).
import { once } from 'node:events';
import { addAbortSignal, type Readable, type Writable } from 'node:stream';

/**
 * Writes each chunk of `source` to every sink before reading the next, so the slowest sink holds the source back
 * (and, through it, the sender). The sinks are ended after the last chunk. On the source's error or the signal,
 * the source and every sink are destroyed with the reason and the promise rejects with it.
 */
export async function tee(source: Readable, sinks: Writable[], signal: AbortSignal): Promise<void> {
  addAbortSignal(signal, source);
  try {
    for await (const chunk of source) {
      signal.throwIfAborted();
      await Promise.all(sinks.map((s) => (s.write(chunk) ? undefined : once(s, 'drain', { signal }))));
    }
    signal.throwIfAborted();
    for (const s of sinks) s.end();
  } catch (err) {
    const reason = signal.aborted && signal.reason instanceof Error ? signal.reason : (err as Error);
    source.destroy();
    for (const s of sinks) s.destroy(reason);
    throw reason;
  }
}

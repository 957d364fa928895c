// lib/tee.ts: one stream read once into several sinks at the pace of the slowest; a held sink ends only once what it
// waits for has resolved; an abort destroys the source and every sink.
import { Readable, PassThrough } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { tee } from '../lib/tee.js';

/** An endless source of 64 KiB chunks that counts what was read from it. */
function endless(): { stream: Readable; read: () => number } {
  let read = 0;
  const stream = new Readable({
    read() {
      read += 65536;
      this.push(Buffer.alloc(65536, 1));
    },
  });
  return { stream, read: () => read };
}

async function drain(s: Readable): Promise<number> {
  let n = 0;
  for await (const c of s) n += (c as Buffer).length;
  return n;
}

describe('tee', () => {
  it('reads the source no faster than its slowest sink takes it, and stops everything on abort', async () => {
    const source = endless();
    const [fast, slow] = [new PassThrough(), new PassThrough()];
    const fastRead = drain(fast).catch((err: Error) => err);
    const stop = new AbortController();
    const fed = tee(source.stream, [fast, slow], stop.signal);
    await sleep(300);
    // Nobody reads `slow`: the source stops after what the buffers on the way hold (a few chunks), not megabytes.
    expect(source.read()).toBeLessThan(1024 * 1024);
    stop.abort(new Error('the client went away'));
    await expect(fed).rejects.toThrow('the client went away');
    expect(await fastRead).toEqual(new Error('the client went away'));
    expect(slow.destroyed && source.stream.destroyed).toBe(true);
  });

  it('ends a held sink only once what it waits for resolved, and destroys it when that rejects', async () => {
    const chunks = () => Readable.from([Buffer.from('a'), Buffer.from('b')]);
    let release!: () => void;
    const until = new Promise<void>((r) => (release = r));
    const [held, other] = [new PassThrough(), new PassThrough()];
    const [heldRead, otherRead] = [drain(held), drain(other)];
    const fed = tee(chunks(), [held, other], new AbortController().signal, { sink: held, until });
    expect(await otherRead).toBe(2);
    await sleep(50);
    expect(held.writableEnded).toBe(false);
    release();
    await fed;
    expect(await heldRead).toBe(2);

    const refused = new PassThrough();
    const refusedRead = drain(refused).catch((err: Error) => err.message);
    const stop = new AbortController();
    const check = Promise.reject(new Error('line 2: bad'));
    check.catch(() => stop.abort(new Error('line 2: bad')));
    await expect(tee(chunks(), [refused, new PassThrough().resume()], stop.signal, { sink: refused, until: check })).rejects.toThrow('line 2: bad');
    expect(await refusedRead).toBe('line 2: bad');
  });
});

import { describe, expect, it } from 'vitest';
import { sharedRead } from '../lib/shared-read.js';

describe('sharedRead', () => {
  it('answers concurrent and recent callers with one read, and reads again after maxAge', async () => {
    let reads = 0;
    const read = sharedRead(50, async () => ++reads);
    expect(await Promise.all([read(), read(), read()])).toEqual([1, 1, 1]);
    expect(await read()).toBe(1);
    await new Promise((r) => setTimeout(r, 60));
    expect(await read()).toBe(2);
  });

  it('forgets a failed read, so the next call retries', async () => {
    let calls = 0;
    const read = sharedRead(10_000, async () => {
      if (++calls === 1) throw new Error('API server unavailable');
      return 'nodes';
    });
    await expect(read()).rejects.toThrow('API server unavailable');
    expect(await read()).toBe('nodes');
    expect(calls).toBe(2);
  });
});

// The GPU-hour estimate's device time: a start-up cost plus a per-token cost fitted to finished jobs.
import { describe, expect, it } from 'vitest';
import { fitThroughput } from '../lib/throughput-fit.js';

describe('fitThroughput', () => {
  it('separates a start-up cost from the per-token cost when finished jobs differ in length', () => {
    // 10 s of start-up, then 1,000 tokens a second
    const fit = fitThroughput([{ tokens: 10_000, deviceSeconds: 20 }, { tokens: 30_000, deviceSeconds: 40 }, { tokens: 50_000, deviceSeconds: 60 }]);
    expect(fit).not.toBeNull();
    expect(fit!.tokens_per_device_second).toBeCloseTo(1000, 9);
    expect(fit!.startup_device_seconds).toBeCloseTo(10, 9);
    expect(fit!.samples).toBe(3);
  });

  it('falls back to the pooled ratio with no start-up for one job, jobs of one length, or an unphysical line', () => {
    expect(fitThroughput([{ tokens: 36_000, deviceSeconds: 36 }])).toEqual({ tokens_per_device_second: 1000, startup_device_seconds: 0, samples: 1 });
    expect(fitThroughput([{ tokens: 36_000, deviceSeconds: 36 }, { tokens: 36_000, deviceSeconds: 36 }])).toMatchObject({ tokens_per_device_second: 1000, startup_device_seconds: 0 });
    // the longer job was faster in total: a negative per-token cost is noise, not a model
    expect(fitThroughput([{ tokens: 1000, deviceSeconds: 180 }, { tokens: 36_000, deviceSeconds: 36 }])).toMatchObject({ startup_device_seconds: 0, tokens_per_device_second: 37_000 / 216 });
    // a line through the origin's wrong side (negative start-up) is not used either
    expect(fitThroughput([{ tokens: 10_000, deviceSeconds: 5 }, { tokens: 30_000, deviceSeconds: 25 }])).toMatchObject({ startup_device_seconds: 0, tokens_per_device_second: 40_000 / 30 });
  });

  it('ignores jobs that counted no tokens or no time, and answers null for none', () => {
    expect(fitThroughput([])).toBeNull();
    expect(fitThroughput([{ tokens: 0, deviceSeconds: 10 }, { tokens: 10, deviceSeconds: 0 }])).toBeNull();
  });
});

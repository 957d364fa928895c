// Device time of a training job as a start-up cost plus a per-token cost, fitted to the finished jobs of one
// device type, method and base model: seconds = startup + tokens / tokens_per_second (least squares). A job's
// first steps pay for compilation, allocator growth and warm-up whatever its length, so a pure ratio
// (total tokens / total seconds) underestimates short jobs and overestimates long ones.

export interface ThroughputFit {
  tokens_per_device_second: number;
  /** device-seconds every job pays regardless of its tokens (0 when the points cannot separate it) */
  startup_device_seconds: number;
  samples: number;
}

export interface FinishedPoint {
  tokens: number;
  deviceSeconds: number;
}

/**
 * The least-squares line through the points when it is physical (a positive per-token cost and a non-negative
 * start-up); otherwise, as with one point or jobs of one length, the pooled ratio with no start-up term.
 */
export function fitThroughput(points: FinishedPoint[]): ThroughputFit | null {
  const usable = points.filter((p) => p.tokens > 0 && p.deviceSeconds > 0);
  if (usable.length === 0) return null;
  const n = usable.length;
  const meanTokens = usable.reduce((s, p) => s + p.tokens, 0) / n;
  const meanSeconds = usable.reduce((s, p) => s + p.deviceSeconds, 0) / n;
  const variance = usable.reduce((s, p) => s + (p.tokens - meanTokens) ** 2, 0);
  const covariance = usable.reduce((s, p) => s + (p.tokens - meanTokens) * (p.deviceSeconds - meanSeconds), 0);
  const perToken = variance > 0 ? covariance / variance : 0;
  const startup = meanSeconds - perToken * meanTokens;
  if (n >= 2 && variance > 0 && perToken > 0 && startup >= 0)
    return { tokens_per_device_second: 1 / perToken, startup_device_seconds: startup, samples: n };
  return { tokens_per_device_second: (meanTokens * n) / (meanSeconds * n), startup_device_seconds: 0, samples: n };
}

// A read many callers make at once (every queued job's poll lists its namespace's Workloads; every job's
// validation lists the nodes), answered by one request shared for a short while. Without it the API server is
// asked once per job per poll: with thousands of queued jobs that is quadratic and was the bottleneck of the
// 1,000-node scheduler benchmark.

/**
 * `read`, shared: a call within `maxAgeMs` of the last read's start gets that read's result (or joins it while in
 * flight). A failed read is forgotten, so the next call retries.
 */
export function sharedRead<T>(maxAgeMs: number, read: () => Promise<T>): () => Promise<T> {
  let last: { at: number; value: Promise<T> } | null = null;
  return () => {
    if (last && Date.now() - last.at < maxAgeMs) return last.value;
    const value = read();
    const entry = { at: Date.now(), value };
    last = entry;
    value.catch(() => {
      if (last === entry) last = null;
    });
    return value;
  };
}

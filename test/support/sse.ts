// A server-sent-events response read as it arrives, for tests: each frame's fields (event, id, data) mapped to what
// the test keeps, `waitFor(n)` until n are kept, `close()` to cancel the stream and let the reader finish.
import { expect } from 'vitest';

export interface SseFrame {
  event?: string;
  id?: string;
  data?: string;
}

export interface SseReader<T> {
  items: T[];
  /** resolves once `n` items have arrived; fails the test after `timeoutMs` */
  waitFor(n: number): Promise<void>;
  close(): Promise<void>;
}

export function readSse<T>(res: Response, keep: (frame: SseFrame) => T | undefined, timeoutMs = 10_000): SseReader<T> {
  const items: T[] = [];
  const reader = res.body!.getReader();
  let buffer = '';
  const reading = (async () => {
    for (;;) {
      const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }));
      if (done) return;
      buffer += new TextDecoder().decode(value);
      for (let cut = buffer.indexOf('\n\n'); cut >= 0; cut = buffer.indexOf('\n\n')) {
        const lines = buffer.slice(0, cut).split('\n');
        buffer = buffer.slice(cut + 2);
        const field = (name: string) => lines.find((l) => l.startsWith(`${name}:`))?.slice(name.length + 1).trim();
        const item = keep({ event: field('event'), id: field('id'), data: field('data') });
        if (item !== undefined) items.push(item);
      }
    }
  })();
  return {
    items,
    async waitFor(n) {
      const until = Date.now() + timeoutMs;
      while (items.length < n && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
      expect(items.length).toBeGreaterThanOrEqual(n);
    },
    async close() {
      await reader.cancel();
      await reading;
    },
  };
}

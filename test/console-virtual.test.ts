// The runs table's virtual window (console/src/virtual.ts): which rows of a long list are rendered at a scroll
// position, and the spacers that keep the scroll bar true to the whole list; and the pages of rows fetched by
// position as the view moves (no fetch while it moves, superseded fetches aborted).
import { describe, expect, it, vi } from 'vitest';
import { PagedRows, SETTLE_MS, windowOf, type PageFetch } from '../console/src/virtual.js';

describe('the virtual rows of a long table', () => {
  it('renders a screenful and a margin of 10,000 rows, with spacers the height of the rest', () => {
    const w = windowOf(33 * 5000, 660, 10_000, 33);
    expect(w).toEqual({ start: 4990, end: 5030, before: 4990 * 33, after: (10_000 - 5030) * 33 });
    expect(w.before + (w.end - w.start) * 33 + w.after).toBe(10_000 * 33);
  });

  it('clamps at the top and at the end of the list, and renders nothing of an empty one', () => {
    expect(windowOf(0, 660, 10_000, 33)).toMatchObject({ start: 0, end: 30, before: 0 });
    expect(windowOf(33 * 100, 660, 105, 33)).toMatchObject({ start: 90, end: 105, after: 0 });
    expect(windowOf(0, 660, 0, 33)).toEqual({ start: 0, end: 0, before: 0, after: 0 });
  });
});

describe('rows fetched by their position (PagedRows)', () => {
  /** A list of `total` numbered rows behind a fetch that records each call and answers when told. */
  function server(total: number) {
    const calls: { offset: number; signal: AbortSignal; answer: () => void }[] = [];
    const fetchPage: PageFetch<number> = (offset, limit, signal) =>
      new Promise((resolve) => calls.push({ offset, signal, answer: () => resolve({ rows: Array.from({ length: Math.max(0, Math.min(limit, total - offset)) }, (_, i) => offset + i), total }) }));
    return { calls, fetchPage };
  }
  const settle = () => new Promise((r) => setTimeout(r, 0));

  it('fetches nothing while the view keeps moving, then only the pages of where it rests', async () => {
    vi.useFakeTimers();
    try {
      const s = server(10_000);
      const pager = new PagedRows(s.fetchPage, 100, () => {}, SETTLE_MS);
      pager.show(0, 40, true);
      expect(s.calls.map((c) => c.offset)).toEqual([0]);
      s.calls[0]!.answer();
      await vi.advanceTimersByTimeAsync(0);
      expect(pager.total).toBe(10_000);
      // A drag of the scroll bar: a new view every 10 ms down to row 9,000.
      for (let row = 100; row <= 9000; row += 100) {
        pager.show(row, row + 40);
        await vi.advanceTimersByTimeAsync(10);
      }
      expect(s.calls).toHaveLength(1);
      await vi.advanceTimersByTimeAsync(SETTLE_MS);
      expect(s.calls.map((c) => c.offset)).toEqual([0, 9000]);
      expect(pager.holds(9000, 9040)).toBe(false);
      s.calls[1]!.answer();
      await vi.advanceTimersByTimeAsync(0);
      expect(pager.holds(9000, 9040)).toBe(true);
      expect(pager.rowAt(9039)).toBe(9039);
      // Back at the top: the first page is still held, nothing is fetched.
      pager.show(0, 40);
      await vi.advanceTimersByTimeAsync(SETTLE_MS);
      expect(s.calls).toHaveLength(2);
      // Reading on by less than a screen (a wheel): the next page is asked at once.
      for (let row = 40; row <= 80; row += 20) pager.show(row, row + 40);
      expect(s.calls.map((c) => c.offset)).toEqual([0, 9000, 100]);
    } finally {
      vi.useRealTimers();
    }
  });

  it('aborts the fetch of a page the view left before it answered, and keeps no late answer', async () => {
    const s = server(10_000);
    const pager = new PagedRows(s.fetchPage, 100, () => {}, 0);
    pager.show(5000, 5040, true);
    pager.show(7000, 7040, true);
    expect(s.calls.map((c) => [c.offset, c.signal.aborted])).toEqual([
      [5000, true],
      [7000, false],
    ]);
    s.calls[0]!.answer();
    s.calls[1]!.answer();
    await settle();
    expect(pager.rowAt(5000)).toBeUndefined();
    expect(pager.rowAt(7000)).toBe(7000);
  });

  it('fetches the pages a view spans, and shows the held rows until a refresh answers', async () => {
    const s = server(250);
    const pager = new PagedRows(s.fetchPage, 100, () => {}, 0);
    pager.show(90, 130, true);
    expect(s.calls.map((c) => c.offset)).toEqual([0, 100]);
    for (const c of s.calls) c.answer();
    await settle();
    pager.refresh();
    expect(s.calls.map((c) => c.offset)).toEqual([0, 100, 0, 100]);
    expect(pager.holds(90, 130)).toBe(true); // the rows of before, until the new ones arrive
    expect(pager.loading).toBe(true);
    s.calls[2]!.answer();
    s.calls[3]!.answer();
    await settle();
    expect(pager.loading).toBe(false);
    expect(pager.held).toBe(200);
  });
});

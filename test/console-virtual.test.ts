// The runs table's virtual window (console/src/virtual.ts): which rows of a long list are rendered at a scroll
// position, and the spacers that keep the scroll bar true to the whole list.
import { describe, expect, it } from 'vitest';
import { windowOf } from '../console/src/virtual.js';

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

// Virtual rows for long tables: of a list of thousands, only the rows inside the scrolled box (plus a margin) are in
// the DOM; spacers above and below keep the scroll bar true to the whole list. Rows have one fixed height.
import { useEffect, useState } from 'preact/hooks';

export interface Window {
  /** the first row to render and one past the last */
  start: number;
  end: number;
  /** heights in px of the spacers before and after the rendered rows */
  before: number;
  after: number;
}

/** Rows rendered beyond the visible ones on each side, so a fast scroll shows no gap. */
const OVERSCAN = 10;

/** The rows of `count` that the box `ref` shows at its scroll position, recomputed on scroll and resize. */
export function useVirtualRows(ref: { current: HTMLElement | null }, count: number, rowHeight: number): Window {
  const [view, setView] = useState({ top: 0, height: 800 });
  useEffect(() => {
    const box = ref.current;
    if (!box) return;
    const update = () => setView({ top: box.scrollTop, height: box.clientHeight });
    update();
    box.addEventListener('scroll', update, { passive: true });
    const resize = new ResizeObserver(update);
    resize.observe(box);
    return () => {
      box.removeEventListener('scroll', update);
      resize.disconnect();
    };
  }, [ref.current]);
  return windowOf(view.top, view.height, count, rowHeight);
}

/** The window of rows for a scroll offset and a box height (pure: what the hook renders). */
export function windowOf(top: number, height: number, count: number, rowHeight: number): Window {
  const start = Math.max(0, Math.floor(top / rowHeight) - OVERSCAN);
  const end = Math.min(count, Math.ceil((top + height) / rowHeight) + OVERSCAN);
  return { start, end: Math.max(start, end), before: start * rowHeight, after: Math.max(0, count - Math.max(start, end)) * rowHeight };
}

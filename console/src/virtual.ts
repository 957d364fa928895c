// Virtual rows for long tables: of a list of thousands, only the rows inside the scrolled box (plus a margin) are in
// the DOM; spacers above and below keep the scroll bar true to the whole list. Rows have one fixed height.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';

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

// ---------------------------------------------------------------------------------------------------------------
// Rows fetched by their position

/** One page the server answered: its rows, and how many rows the whole list has now. */
export interface PageAnswer<T> {
  rows: T[];
  total: number;
}

/** Fetches `limit` rows from position `offset` of the current order and filter; `signal` aborts a superseded one. */
export type PageFetch<T> = (offset: number, limit: number, signal: AbortSignal) => Promise<PageAnswer<T>>;

/** How long the view must stay put before its missing pages are fetched: a dragged scroll bar asks nothing until it rests. */
export const SETTLE_MS = 120;
/** Pages held at most; those farthest from the view go first (a few thousand rows, whatever was scrolled through). */
const MAX_PAGES = 40;

/**
 * The rows of a long server-side list by position: a page is fetched only when rows of it come into view and the
 * view has settled, held for when it comes back, and its fetch aborted when it leaves the view before it answers.
 * A jump to row 9,000 of 10,000 is then one or two page fetches, never the 9,000 rows before it. Framework-free so
 * its scheduling is tested on its own; usePagedRows binds it to a scrolled box.
 */
export class PagedRows<T> {
  total: number | null = null;
  error: string | null = null;
  private pages = new Map<number, T[]>();
  /** the pages before refresh(), still shown until their fresh copies arrive */
  private stale = new Map<number, T[]>();
  private inflight = new Map<number, AbortController>();
  private timer: ReturnType<typeof setTimeout> | null = null;
  private want: [number, number] = [0, 0];

  constructor(
    private readonly fetchPage: PageFetch<T>,
    readonly pageSize: number,
    private readonly onChange: () => void,
    private readonly settleMs = SETTLE_MS,
  ) {}

  rowAt(i: number): T | undefined {
    const p = Math.floor(i / this.pageSize);
    return (this.pages.get(p) ?? this.stale.get(p))?.[i - p * this.pageSize];
  }

  /** Whether every row of [start, end) is held. */
  holds(start: number, end: number): boolean {
    for (let i = start; i < end; i++) if (this.rowAt(i) === undefined) return false;
    return true;
  }

  /** Rows held (fetched and kept). */
  get held(): number {
    let n = 0;
    for (const rows of this.pages.values()) n += rows.length;
    return n;
  }

  get loading(): boolean {
    return this.inflight.size > 0 || this.timer !== null;
  }

  /**
   * The rows [start, end) are in view: fetches of pages out of it are aborted, and the pages it lacks are fetched
   * once the view has stayed for settleMs. At once with `now` (the first page, a refresh), and when the view moved
   * by less than its own height: a wheel or keyboard reading on, not a drag of the scroll bar.
   */
  show(start: number, end: number, now = false): void {
    const readingOn = Math.abs(start - this.want[0]) <= end - start;
    this.want = [start, end];
    const needed = this.pagesOf(start, end);
    for (const [p, c] of this.inflight)
      if (!needed.includes(p)) {
        c.abort();
        this.inflight.delete(p);
      }
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (!needed.some((p) => !this.pages.has(p) && !this.inflight.has(p))) return;
    if (now || readingOn) this.fetchMissing();
    else this.timer = setTimeout(() => this.fetchMissing(), this.settleMs);
  }

  /** Fetches the rows in view again (the list changed); the rows held are shown until the new ones arrive. */
  refresh(): void {
    for (const c of this.inflight.values()) c.abort();
    this.inflight.clear();
    this.stale = new Map([...this.stale, ...this.pages]);
    this.pages.clear();
    this.show(...this.want, true);
  }

  dispose(): void {
    for (const c of this.inflight.values()) c.abort();
    this.inflight.clear();
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  private pagesOf(start: number, end: number): number[] {
    const out: number[] = [];
    for (let p = Math.floor(start / this.pageSize); p * this.pageSize < Math.max(end, start + 1); p++) out.push(p);
    return out;
  }

  private fetchMissing(): void {
    this.timer = null;
    for (const p of this.pagesOf(...this.want)) if (!this.pages.has(p) && !this.inflight.has(p)) this.fetchOne(p);
    this.onChange();
  }

  private fetchOne(p: number): void {
    const c = new AbortController();
    this.inflight.set(p, c);
    const settled = () => {
      if (this.inflight.get(p) !== c) return false; // aborted, or superseded by a refresh
      this.inflight.delete(p);
      return true;
    };
    this.fetchPage(p * this.pageSize, this.pageSize, c.signal).then(
      (a) => {
        if (!settled()) return;
        this.pages.set(p, a.rows);
        this.stale.delete(p);
        this.total = a.total;
        this.error = null;
        this.evict();
        this.onChange();
      },
      (e: Error) => {
        if (!settled()) return;
        this.error = e.message;
        this.onChange();
      },
    );
  }

  /** Drops the pages farthest from the view beyond MAX_PAGES. */
  private evict(): void {
    if (this.pages.size <= MAX_PAGES) return;
    const centre = Math.floor((this.want[0] + this.want[1]) / 2 / this.pageSize);
    const far = [...this.pages.keys()].sort((a, b) => Math.abs(b - centre) - Math.abs(a - centre));
    for (const p of far.slice(0, this.pages.size - MAX_PAGES)) this.pages.delete(p);
  }
}

/**
 * A long server-side list in the box `ref`: the scroll area is sized for all `total` rows, and the pages of the
 * rows in view are fetched by position (PagedRows). `key` names the list (its order, filter, columns): a new key
 * starts again from its first page; null: nothing to fetch yet.
 */
export function usePagedRows<T>(ref: { current: HTMLElement | null }, rowHeight: number, pageSize: number, key: string | null, fetchPage: PageFetch<T>): { pager: PagedRows<T> | null; view: Window } {
  const [, changed] = useState(0);
  const latest = useRef(fetchPage);
  latest.current = fetchPage;
  const pager = useMemo(() => (key === null ? null : new PagedRows<T>((o, l, s) => latest.current(o, l, s), pageSize, () => changed((n) => n + 1))), [key, pageSize]);
  useEffect(() => () => pager?.dispose(), [pager]);
  const view = useVirtualRows(ref, pager?.total ?? 0, rowHeight);
  useEffect(() => {
    if (!pager) return;
    if (pager.total === null) pager.show(0, pageSize, true);
    else pager.show(view.start, view.end);
  }, [pager, pager?.total, view.start, view.end]);
  return { pager, view };
}

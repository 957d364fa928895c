// The console's pages measured in a real browser: Debian's headless Chromium driven by playwright-core (as the
// console's browser tests drive it) against the built console that the bench's API serves at /, on the seeded
// catalogue of run.ts. Times come from the marks the pages set (performance.mark: the runs table's first row, each
// compare chart drawn, drawn after a zoom), read as milliseconds since the navigation started; the heap is Chromium's
// own JSHeapUsedSize (CDP Performance.getMetrics), sampled every 100 ms through every pass, its peak reported.
//   - runs table: navigation to /experiments/bench (4 columns in the URL) -> the first row rendered; and -> every
//     row in view drawn after the scroll bar is dropped at row 9,000 (the page at that offset, fetched by position);
//   - compare: navigation to /compare of r00001..r00100 x k0..k9 -> every chart in view drawn; and -> all 10 drawn,
//     scrolled to the end once the first screen is drawn (charts scrolled away are torn down);
//   - zoom: a drag across 1% of r00001's 1,000,000-step train/loss (and across 10% of k0 of the 100 runs) -> the
//     chart redrawn from the re-fetched range;
//   - one more compare pass under Chromium's tracing (the DevTools timeline categories): its first screen from the
//     trace's own navigationStart and user-timing marks, and the JS heap from the renderer's UpdateCounters events, a
//     check of the figures above by another instrument.
import { loadavg } from 'node:os';
import { chromium, type Page } from 'playwright-core';

const CHROMIUM = process.env.HANZO_ML_CHROMIUM ?? '/usr/bin/chromium';
const VIEWPORT = { width: 1400, height: 1000 };

export interface Timing {
  name: string;
  goal_ms: number;
  median_ms: number;
  min_ms: number;
  max_ms: number;
  /** the first pass, assets not yet cached (not in the median) */
  cold_ms: number;
  samples_ms: number[];
  load_1m: number;
}

export interface BrowserResult {
  chromium: string;
  viewport: typeof VIEWPORT;
  passes: number;
  timings: Timing[];
  /** rows of the runs table in the DOM after scrolling through 1,000 runs (virtualized: a screenful, not 1,000) */
  runs_table_dom_rows_after_1000: number;
  /** rows the table holds after that scroll (pages fetched by position and kept) */
  runs_loaded_after_scroll: number;
  /** compare page: charts built at first paint (of 10), and at most at once while scrolling through */
  compare_charts_mounted_first: number;
  compare_charts_mounted_max: number;
  /** compare's first paint: median ms since navigation start by which the last series answer had arrived */
  compare_series_answered_ms: number;
  compare_series_calls: number;
  /** compare's first screen taken apart (medians over the warm passes) */
  compare_breakdown?: CompareBreakdown;
  /** compare's "all drawn" pass after its first screen, taken apart (medians over the warm passes) */
  compare_rest_breakdown?: RestBreakdown;
  /** the zoom's request, as the page sent it */
  zoom_request: string;
  heap_peak_mb: number;
  heap_goal_mb: number;
  /** one compare pass under Chromium's tracing */
  traced: TracedCompare;
  load_1m: number;
}

/**
 * Where compare's first screen goes, one pass: when the first series call left and the last answer read before the
 * screen was drawn arrived (resource timing), then the page's main-thread work on the charts in view: parsing the
 * answers (JSON.parse of the same bodies again, timed in the page once the pass is over), aligning the runs' points
 * (the chart's `align` measure) and drawing (from uPlot's drawClear to its draw hook: scales, paths, strokes).
 */
export interface CompareBreakdown {
  first_call_ms: number;
  answered_ms: number;
  drawn_ms: number;
  /** series calls answered before the screen was drawn */
  calls: number;
  /** their answers' bytes, together */
  bytes: number;
  parse_ms: number;
  align_ms: number;
  draw_ms: number;
  /** the points each call asked per series */
  points: number;
}

/**
 * Where compare's "all 10 drawn" pass goes after its first screen is drawn (ms since navigation start, one pass):
 * the scroll to the end, the call of the other keys (sent, its first byte, its last byte, parsed), the last of
 * those charts made visible, given its points and drawn; and the page's aligning and drawing of them.
 */
export interface RestBreakdown {
  screen_drawn_ms: number;
  scrolled_ms: number;
  rest_sent_ms: number;
  rest_first_byte_ms: number;
  rest_answered_ms: number;
  rest_parsed_ms: number;
  visible_ms: number;
  data_ms: number;
  drawn_ms: number;
  align_ms: number;
  draw_ms: number;
  /** the other keys' call, its answer's bytes */
  rest_bytes: number;
  /** the pass's longest animation frame (long-animation-frame entries): the first screen's painting, mostly */
  longest_frame_ms: number;
}

export interface TracedCompare {
  /** navigationStart -> the last compare:drawn mark of the first screen, from the trace's timestamps */
  in_view_ms: number;
  /** the largest jsHeapSizeUsed of the renderer's UpdateCounters events */
  heap_peak_mb: number;
  /** trace events read */
  events: number;
}

interface TraceEvent {
  name: string;
  cat: string;
  ts: number;
  args?: { data?: { jsHeapSizeUsed?: number; frame?: string } };
}

/** The compare page loaded once under Chromium's tracing; `drawnKeys` are the charts of its first screen. */
async function tracedCompare(page: Page, url: string, drawnKeys: (page: Page) => Promise<string[]>): Promise<TracedCompare> {
  const browser = page.context().browser()!;
  await page.goto('about:blank');
  await browser.startTracing(page, { categories: ['blink.user_timing', 'devtools.timeline', 'disabled-by-default-devtools.timeline', 'loading'] });
  await page.goto(url);
  await page.locator('section.chart').first().waitFor();
  const keys = await drawnKeys(page);
  await Promise.all(keys.map((k) => page.waitForFunction((n) => performance.getEntriesByName(n, 'mark').length > 0, `compare:drawn:${k}`, { timeout: 60_000, polling: 10 })));
  const events = (JSON.parse((await browser.stopTracing()).toString('utf8')) as { traceEvents: TraceEvent[] }).traceEvents;
  // The compare page's own navigation: the last navigationStart (the first is about:blank's).
  const starts = events.filter((e) => e.name === 'navigationStart').map((e) => e.ts);
  const start = Math.max(...starts);
  const drawn = events.filter((e) => e.cat.includes('blink.user_timing') && keys.some((k) => e.name === `compare:drawn:${k}`) && e.ts >= start).map((e) => e.ts);
  const heap = events.filter((e) => e.name === 'UpdateCounters').map((e) => e.args?.data?.jsHeapSizeUsed ?? 0);
  if (!starts.length || drawn.length < keys.length || !heap.length) throw new Error(`the trace lacks ${!starts.length ? 'navigationStart' : drawn.length < keys.length ? 'the compare marks' : 'UpdateCounters'} (${events.length} events)`);
  return { in_view_ms: round((Math.max(...drawn) - start) / 1000), heap_peak_mb: round(Math.max(...heap) / 2 ** 20), events: events.length };
}

const round = (x: number, d = 1): number => Math.round(x * 10 ** d) / 10 ** d;
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const load = () => round(loadavg()[0]!);
const runId = (i: number) => `r${String(i).padStart(5, '0')}`;

/** The latest mark of a name (ms since navigation start), or null. */
const markAt = (page: Page, name: string) => page.evaluate((n) => performance.getEntriesByName(n, 'mark').at(-1)?.startTime ?? null, name);

async function waitMark(page: Page, name: string, after = 0, timeout = 60_000): Promise<number> {
  await page.waitForFunction(([n, t]) => (performance.getEntriesByName(n as string, 'mark').at(-1)?.startTime ?? -1) > (t as number), [name, after] as const, { timeout, polling: 10 });
  return (await markAt(page, name))!;
}

function timing(name: string, goal: number, all: number[]): Timing {
  const [cold, ...warm] = all;
  const t = { name, goal_ms: goal, median_ms: round(median(warm)), min_ms: round(Math.min(...warm)), max_ms: round(Math.max(...warm)), cold_ms: round(cold!), samples_ms: warm.map((x) => round(x)), load_1m: load() };
  console.log(JSON.stringify(t));
  return t;
}

/** Runs `passes` + 1 (the first is cold), each pass's ms from `once`. */
async function passes(n: number, once: (i: number) => Promise<number>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i <= n; i++) out.push(await once(i));
  return out;
}

export async function measureBrowser(base: string, token: string, n: number): Promise<BrowserResult> {
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  try {
    const context = await browser.newContext({ viewport: VIEWPORT });
    const page = await context.newPage();
    await page.goto(`${base}/login`);
    await page.fill('#token', token);
    await page.click('button[type=submit]');
    await page.getByRole('heading', { name: 'Jobs' }).waitFor({ timeout: 30_000 });

    // The heap, sampled through everything that follows.
    const cdp = await context.newCDPSession(page);
    await cdp.send('Performance.enable');
    let heapPeak = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const { metrics } = await cdp.send('Performance.getMetrics').catch(() => ({ metrics: [] as { name: string; value: number }[] }));
        const used = metrics.find((m) => m.name === 'JSHeapUsedSize')?.value ?? 0;
        heapPeak = Math.max(heapPeak, used);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();

    const timings: Timing[] = [];
    const columns = 'metrics.loss,metrics.acc,params.lr,params.method';
    timings.push(
      timing(
        'runs table: navigation -> first row (10,000 runs, 4 columns)',
        1000,
        await passes(n, async () => {
          await page.goto(`${base}/experiments/bench?columns=${columns}`);
          return waitMark(page, 'runs-table:first-row');
        }),
      ),
    );
    // A jump: the scroll bar dropped at row 9,000 once the first rows are drawn; timed to every row in view drawn
    // (the page at that offset fetched once the scroll rests), from the navigation.
    const JUMP_ROW = 9000;
    timings.push(
      timing(
        `runs table: navigation -> rows drawn after a jump to row ${JUMP_ROW.toLocaleString('en-US')} of 10,000`,
        1000,
        await passes(n, async () => {
          await page.goto(`${base}/experiments/bench?columns=${columns}`);
          const first = await waitMark(page, 'runs-table:first-row');
          await page.evaluate((row) => {
            const box = document.querySelector('.runs-scroll')!;
            box.scrollTop = row * document.querySelector('tr[data-run]')!.getBoundingClientRect().height;
          }, JUMP_ROW);
          const drawn = await waitMark(page, 'runs-table:in-view', first);
          await page.locator(`tr[data-index="${JUMP_ROW}"][data-run]`).waitFor({ timeout: 5000 });
          return drawn;
        }),
      ),
    );
    // Scrolling through 1,000 runs a screenful at a time, each drawn before the next: the DOM keeps a screenful.
    await page.goto(`${base}/experiments/bench?columns=${columns}`);
    await waitMark(page, 'runs-table:first-row');
    const scrolledTo = () => page.evaluate(() => Math.max(...[...document.querySelectorAll('tr[data-run]')].map((r) => Number(r.getAttribute('data-index')))));
    for (let i = 0; i < 200 && (await scrolledTo()) < 1000; i++) {
      await page.evaluate(() => {
        const box = document.querySelector('.runs-scroll')!;
        box.scrollTop += box.clientHeight;
      });
      await page.waitForFunction(() => document.querySelectorAll('.runs-scroll tr.pending').length === 0, undefined, { timeout: 30_000, polling: 20 });
    }
    const loadedRows = () => page.evaluate(() => Number(document.querySelector('.runs-scroll')!.getAttribute('data-loaded')));
    const domRows = await page.evaluate(() => document.querySelectorAll('tr[data-run]').length);
    const runsLoaded = await loadedRows();

    const compareUrl = `${base}/compare?runs=${Array.from({ length: 100 }, (_, i) => runId(i + 1)).join(',')}&keys=${Array.from({ length: 10 }, (_, k) => `k${k}`).join(',')}`;
    const inView = () =>
      page.evaluate(() =>
        [...document.querySelectorAll('section.chart')].filter((s) => {
          const r = s.getBoundingClientRect();
          return r.bottom > 0 && r.top < innerHeight;
        }).map((s) => s.getAttribute('data-chart')!),
      );
    const drawnAll = async (keys: string[], after: number) => Math.max(...(await Promise.all(keys.map((k) => waitMark(page, `compare:drawn:${k}`, after)))));
    let mountedFirst = 0;
    const answered: number[] = [];
    const breakdowns: CompareBreakdown[] = [];
    const sent: string[] = [];
    page.on('request', (r) => {
      if (r.url().endsWith('/v1/runs/series')) sent.push(r.postData() ?? '');
    });
    timings.push(
      timing(
        'compare 100 runs x 10 keys: navigation -> every chart in view drawn',
        2000,
        await passes(n, async () => {
          sent.length = 0;
          await page.goto(compareUrl);
          await page.locator('section.chart').first().waitFor();
          const keys = await inView();
          const t = await drawnAll(keys, 0);
          mountedFirst = await page.locator('section.chart canvas').count();
          // When the last series answer the screen drew was read: the rest of the time is the page's (parse, align,
          // draw). The other keys' call, sent once the first answer arrived, may end before the bench reads this.
          answered.push(await page.evaluate((drawn) => Math.max(...performance.getEntriesByType('resource').filter((e) => e.name.endsWith('/v1/runs/series')).map((e) => (e as PerformanceResourceTiming).responseEnd).filter((end) => end <= drawn)), t));
          breakdowns.push(await compareBreakdown(page, keys, t, [...sent], token));
          return t;
        }),
      ),
    );
    let mountedMax = 0;
    const restBreakdowns: RestBreakdown[] = [];
    timings.push(
      timing(
        'compare: navigation -> all 10 charts drawn (scrolled to the end once the first screen is drawn)',
        2000,
        await passes(n, async () => {
          await page.goto(compareUrl);
          await page.locator('section.chart').first().waitFor();
          const firstKeys = await inView();
          const screenDrawn = await drawnAll(firstKeys, 0);
          const scrolled = await page.evaluate(() => performance.now());
          await page.locator('section[data-chart="k9"]').scrollIntoViewIfNeeded();
          const missing = async () => ({ y: await page.evaluate(() => scrollY), drawn: await page.evaluate(() => performance.getEntriesByType('mark').map((m) => m.name)) });
          const allKeys = Array.from({ length: 10 }, (_, k) => `k${k}`);
          const t = await drawnAll(allKeys, 0).catch(async (e: Error) => {
            throw new Error(`${e.message}: ${JSON.stringify(await missing())}`);
          });
          mountedMax = Math.max(mountedMax, await page.locator('section.chart canvas').count());
          restBreakdowns.push(await restBreakdown(page, allKeys.filter((k) => !firstKeys.includes(k)), screenDrawn, scrolled, t));
          return t;
        }),
      ),
    );

    let zoomRequest = '';
    const zoom = async (url: string, key: string, from: number, to: number, label: string) =>
      timing(
        label,
        300,
        await passes(n, async () => {
          await page.goto(url);
          await waitMark(page, `compare:drawn:${key}`);
          const over = (await page.locator(`section[data-chart="${key}"] .u-over`).boundingBox())!;
          const y = over.y + over.height / 2;
          await page.mouse.move(over.x + over.width * from, y);
          await page.mouse.down();
          await page.mouse.move(over.x + over.width * to, y, { steps: 4 });
          const request = page.waitForRequest((r) => r.url().endsWith('/v1/runs/series') && (r.postData() ?? '').includes('from_step'));
          const t0 = await page.evaluate(() => performance.now());
          await page.mouse.up();
          zoomRequest = (await request).postData()!.replace(/"run_ids":\[[^\]]*\]/, '"run_ids":[...]');
          return (await waitMark(page, `compare:zoomed:${key}`, t0)) - t0;
        }),
      );
    timings.push(await zoom(`${base}/compare?runs=r00001&keys=train/loss`, 'train/loss', 0.77, 0.78, 'zoom: drag over 1% of a 1,000,000-step series -> redrawn'));
    const longZoom = zoomRequest;
    timings.push(await zoom(compareUrl.replace(/keys=.*/, 'keys=k0'), 'k0', 0.4, 0.5, 'zoom: drag over 10% of 100 runs x 1,000 steps -> redrawn'));
    const traced = await tracedCompare(page, compareUrl, inView);
    console.log(JSON.stringify({ traced }));
    sampling = false;
    await sampler;
    return {
      chromium: browser.version(),
      viewport: VIEWPORT,
      passes: n,
      timings,
      runs_table_dom_rows_after_1000: domRows,
      runs_loaded_after_scroll: Math.round(runsLoaded),
      compare_charts_mounted_first: mountedFirst,
      compare_charts_mounted_max: mountedMax,
      compare_series_answered_ms: round(median(answered.slice(1))),
      compare_series_calls: breakdowns.length ? median(breakdowns.slice(1).map((b) => b.calls)) : mountedFirst,
      compare_breakdown: medianBreakdown(breakdowns.slice(1)),
      compare_rest_breakdown: medianRest(restBreakdowns.slice(1)),
      zoom_request: longZoom,
      heap_peak_mb: round(heapPeak / 2 ** 20),
      heap_goal_mb: 500,
      traced,
      load_1m: load(),
    };
  } finally {
    await browser.close();
  }
}

/** One compare pass taken apart (CompareBreakdown), read in the page once its first screen is drawn at `drawn`. */
async function compareBreakdown(page: Page, keys: string[], drawn: number, bodies: string[], token: string): Promise<CompareBreakdown> {
  return page.evaluate(
    async ({ keys, drawn, bodies, token }) => {
      const calls = (performance.getEntriesByType('resource') as PerformanceResourceTiming[]).filter((e) => e.name.endsWith('/v1/runs/series'));
      const before = calls.filter((c) => c.responseEnd <= drawn);
      // (No named functions in here: the bench's TypeScript runner would wrap them in a helper the page lacks.)
      const measured = { align: 0, draw: 0 };
      for (const k of keys) for (const stage of ['align', 'draw'] as const) measured[stage] += performance.getEntriesByName(`compare:${k}:${stage}`, 'measure').at(-1)?.duration ?? 0;
      // The calls of one screen are alike: the first `before.length` bodies sent stand for those answered in time.
      let parse = 0;
      let bytes = 0;
      for (const body of bodies.slice(0, before.length)) {
        const res = await fetch('/v1/runs/series', { method: 'POST', credentials: 'omit', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body });
        const text = await res.text();
        const t0 = performance.now();
        JSON.parse(text);
        parse += performance.now() - t0;
        bytes += text.length;
      }
      return {
        first_call_ms: Math.min(...calls.map((c) => c.startTime)),
        answered_ms: Math.max(...before.map((c) => c.responseEnd)),
        drawn_ms: drawn,
        calls: before.length,
        bytes,
        parse_ms: parse,
        align_ms: measured.align,
        draw_ms: measured.draw,
        points: bodies.length ? (JSON.parse(bodies[0]!) as { points: number }).points : 0,
      };
    },
    { keys, drawn, bodies, token },
  );
}

/** One "all drawn" pass taken apart (RestBreakdown), read in the page once every chart is drawn. */
async function restBreakdown(page: Page, keys: string[], screenDrawn: number, scrolled: number, drawn: number): Promise<RestBreakdown> {
  const seen = await page.evaluate((keys) => {
    // (No named functions in here: the bench's TypeScript runner would wrap them in a helper the page lacks.)
    const calls = (performance.getEntriesByType('resource') as PerformanceResourceTiming[]).filter((e) => e.name.endsWith('/v1/runs/series')).sort((a, b) => a.startTime - b.startTime);
    const rest = calls.at(-1)!;
    const out = { visible_ms: -Infinity, data_ms: -Infinity, align_ms: 0, draw_ms: 0 };
    for (const k of keys) {
      out.visible_ms = Math.max(out.visible_ms, performance.getEntriesByName(`compare:visible:${k}`).at(-1)?.startTime ?? NaN);
      out.data_ms = Math.max(out.data_ms, performance.getEntriesByName(`compare:data:${k}`).at(-1)?.startTime ?? NaN);
      out.align_ms += performance.getEntriesByName(`compare:${k}:align`).at(-1)?.duration ?? 0;
      out.draw_ms += performance.getEntriesByName(`compare:${k}:draw`).at(-1)?.duration ?? 0;
    }
    return {
      rest_sent_ms: rest.startTime,
      rest_first_byte_ms: rest.responseStart,
      rest_answered_ms: rest.responseEnd,
      rest_parsed_ms: performance.getEntriesByName('series:parsed').at(-1)?.startTime ?? NaN,
      rest_bytes: rest.decodedBodySize,
      longest_frame_ms: Math.max(0, ...performance.getEntriesByType('long-animation-frame').map((e) => e.duration)),
      ...out,
    };
  }, keys);
  return { screen_drawn_ms: screenDrawn, scrolled_ms: scrolled, drawn_ms: drawn, ...seen };
}

function medianBreakdown(all: CompareBreakdown[]): CompareBreakdown | undefined {
  if (!all.length) return undefined;
  const m = (f: (b: CompareBreakdown) => number) => round(median(all.map(f)));
  return { first_call_ms: m((b) => b.first_call_ms), answered_ms: m((b) => b.answered_ms), drawn_ms: m((b) => b.drawn_ms), calls: m((b) => b.calls), bytes: m((b) => b.bytes), parse_ms: m((b) => b.parse_ms), align_ms: m((b) => b.align_ms), draw_ms: m((b) => b.draw_ms), points: m((b) => b.points) };
}

function medianRest(all: RestBreakdown[]): RestBreakdown | undefined {
  if (!all.length) return undefined;
  return Object.fromEntries(Object.keys(all[0]!).map((k) => [k, round(median(all.map((b) => b[k as keyof RestBreakdown])))])) as unknown as RestBreakdown;
}

export function browserMarkdown(b: BrowserResult): string {
  const verdict = (ratio: number) => (ratio <= 1 ? 'meets the goal' : 'misses the goal');
  const rows = b.timings.map((t) => `| ${t.name} | ${t.median_ms} | ${t.min_ms} - ${t.max_ms} | ${t.cold_ms} | ${t.goal_ms} | ${round(t.median_ms / t.goal_ms, 2)} | ${verdict(t.median_ms / t.goal_ms)} | ${t.load_1m} |`);
  return `## In the browser

Headless Chromium ${b.chromium} (Debian's, playwright-core), viewport ${b.viewport.width}x${b.viewport.height}, against the
console build the API serves at /. Times from the pages' performance marks, ms since navigation start (zoom: since
the mouse was released); medians of ${b.passes} passes after one cold pass (assets not yet cached; shown apart).

| measure | median ms | range ms | cold ms | goal ms | ratio | verdict | load 1m |
|---|---|---|---|---|---|---|---|
${rows.join('\n')}
| browser JS heap, peak over every pass (CDP JSHeapUsedSize, sampled every 100 ms) | ${b.heap_peak_mb} MB | | | ${b.heap_goal_mb} MB | ${round(b.heap_peak_mb / b.heap_goal_mb, 2)} | ${verdict(b.heap_peak_mb / b.heap_goal_mb)} | ${b.load_1m} |
${b.traced ? `| Chromium trace, one compare pass: navigationStart -> every chart in view drawn (user-timing marks) | ${b.traced.in_view_ms} | | | 2000 | ${round(b.traced.in_view_ms / 2000, 2)} | ${verdict(b.traced.in_view_ms / 2000)} | |
| Chromium trace, that pass: JS heap peak (renderer UpdateCounters, ${b.traced.events} events) | ${b.traced.heap_peak_mb} MB | | | ${b.heap_goal_mb} MB | ${round(b.traced.heap_peak_mb / b.heap_goal_mb, 2)} | ${verdict(b.traced.heap_peak_mb / b.heap_goal_mb)} | |
` : ''}
Virtualized and mounted only in view: after scrolling the runs table through 1,000 runs (${b.runs_loaded_after_scroll} held),
${b.runs_table_dom_rows_after_1000} rows are in the DOM; the compare page has drawn ${b.compare_charts_mounted_first} of its 10 charts
when those in view are drawn (their points from ${b.compare_series_calls} series call(s) answered by then) and at most ${b.compare_charts_mounted_max} at once
(of 10; the viewport and the 200 px margin hold most of them). At compare's first paint the last series answer had arrived by ${b.compare_series_answered_ms} ms
(median): the rest is the page's parsing, aligning and drawing.${b.compare_breakdown ? ` ${breakdownText(b.compare_breakdown)}` : ''}${b.compare_rest_breakdown ? `\n${restText(b.compare_rest_breakdown)}` : ''} The long series' zoom asked
\`${b.zoom_request}\`.
`;
}

function breakdownText(d: CompareBreakdown): string {
  return `Compare's first screen taken apart (medians): the first series call left at ${d.first_call_ms} ms, the last of the ${d.calls} answered
in time arrived at ${d.answered_ms} ms (${round(d.bytes / 1024)} KiB in all, ${d.points} points a series), the charts in view were drawn at ${d.drawn_ms} ms;
the page's work on them: parsing ${d.parse_ms} ms (JSON.parse of the same answers, timed again in the page), aligning ${d.align_ms} ms,
drawing ${d.draw_ms} ms (uPlot's drawClear to draw: scales, paths, strokes; the rest is rendering and waiting for the main thread).`;
}

function restText(d: RestBreakdown): string {
  return `Compare's "all 10 drawn" pass after its first screen (medians, ms since navigation start): the first screen drawn at
${d.screen_drawn_ms}, the page scrolled to the end at ${d.scrolled_ms}; the other keys' call sent at ${d.rest_sent_ms}, its first byte at
${d.rest_first_byte_ms}, its last at ${d.rest_answered_ms} (${round(d.rest_bytes / 1024)} KiB), parsed at ${d.rest_parsed_ms}; the last of those charts visible at
${d.visible_ms}, given its points at ${d.data_ms}, all drawn at ${d.drawn_ms} (aligning ${d.align_ms} ms, drawing ${d.draw_ms} ms of them). The pass's
longest animation frame (the first screen's painting: the browser rasterizing its canvases) held the main thread ${d.longest_frame_ms} ms.`;
}

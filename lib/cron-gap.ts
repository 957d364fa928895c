// The shortest gap between two firings of a five-field cron expression, found by walking the 31 days of a
// month minute by minute (44,640 steps; schedules are created rarely). The month field is read for validity but
// not restricted: that can only find a shorter gap than the real one, so a limit built on it stays safe.

/** The values of one cron field: "*", "n", "a-b", "*\/s", "a-b/s" and comma lists of those. */
function fieldValues(field: string, min: number, max: number, name: string): Set<number> {
  const out = new Set<number>();
  for (const part of field.split(',')) {
    const m = /^(\*|\d+(?:-\d+)?)(?:\/(\d+))?$/.exec(part);
    if (!m) throw new Error(`cron ${name} field "${field}": expected *, n, a-b or a step such as */15`);
    const step = m[2] ? Number(m[2]) : 1;
    const [lo, hi] = m[1] === '*' ? [min, max] : m[1]!.includes('-') ? m[1]!.split('-').map(Number) : [Number(m[1]), m[2] ? max : Number(m[1])];
    if (step < 1 || lo! < min || hi! > max || lo! > hi!) throw new Error(`cron ${name} field "${field}": out of range ${min}-${max}`);
    for (let v = lo!; v <= hi!; v += step) out.add(v);
  }
  return out;
}

/** Minutes between the two closest firings, or null if it fires at most once a month. */
export function shortestCronGapMinutes(expr: string): number | null {
  const fields = expr.trim().split(/\s+/);
  if (fields.length !== 5) throw new Error(`cron "${expr}": expected five fields (minute hour day-of-month month day-of-week)`);
  const [mi, ho, dom, , dow] = [
    fieldValues(fields[0]!, 0, 59, 'minute'),
    fieldValues(fields[1]!, 0, 23, 'hour'),
    fieldValues(fields[2]!, 1, 31, 'day-of-month'),
    fieldValues(fields[3]!, 1, 12, 'month'),
    fieldValues(fields[4]!.replace(/7/g, '0'), 0, 6, 'day-of-week'),
  ];
  const domAny = fields[2] === '*';
  const dowAny = fields[4] === '*';
  let last: number | null = null;
  let best: number | null = null;
  const start = Date.UTC(2026, 0, 1);
  for (let i = 0; i < 31 * 24 * 60; i++) {
    const t = new Date(start + i * 60_000);
    const dayOk = domAny || dowAny ? dom.has(t.getUTCDate()) && dow.has(t.getUTCDay()) : dom.has(t.getUTCDate()) || dow.has(t.getUTCDay());
    if (!(mi.has(t.getUTCMinutes()) && ho.has(t.getUTCHours()) && dayOk)) continue;
    if (last !== null) best = Math.min(best ?? Infinity, i - last);
    last = i;
  }
  return best;
}

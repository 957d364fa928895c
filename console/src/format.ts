// How numbers, durations and times read on the pages.
export function duration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return '—';
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

export const usd = (v: number | null | undefined): string => (v === null || v === undefined ? '—' : `$${v.toFixed(v < 1 ? 4 : 2)}`);

export const time = (iso: string | null | undefined): string => (iso ? new Date(iso).toLocaleString() : '—');

/** A value as read in a table or a legend: thousands grouped (12,345.6), tiny values as 2.0e-4, else `digits` significant. */
export function num(v: number | null | undefined, digits = 4): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return '—';
  if (Math.abs(v) >= 1e15) return v.toExponential(2);
  if (Math.abs(v) >= 1000) return v.toLocaleString('en-US', { maximumFractionDigits: 1 });
  return Math.abs(v) < 1e-3 && v !== 0 ? v.toExponential(1) : Number(v.toPrecision(digits)).toString();
}

const SUFFIXES: [number, string][] = [
  [1e12, 'T'],
  [1e9, 'B'],
  [1e6, 'M'],
  [1e3, 'k'],
];

/**
 * A chart's tick label, short enough for the axis: 0, 0.25, 1,000, 12.5k, 3.2M, 4B; below 0.001 the exponent
 * without its noise (2e-4, 1.5e-5), as a learning rate reads. Three significant digits at most.
 */
export function axisNum(v: number | null | undefined): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return '';
  const a = Math.abs(v);
  if (a === 0) return '0';
  if (a >= 1e15) return v.toExponential(1).replace('e+', 'e');
  if (a < 1e-3) return v.toExponential(1).replace(/\.0(?=e)/, '');
  if (a < 1e4) return v.toLocaleString('en-US', { maximumSignificantDigits: a >= 1000 ? 4 : 3 });
  const [base, suffix] = SUFFIXES.find(([b]) => a >= b)!;
  // 999,950 rounds to "1000k": shown in the next unit up instead.
  const scaled = Number((v / base).toPrecision(3));
  if (Math.abs(scaled) >= 1000 && base < 1e12) return axisNum(Math.sign(v) * 1000 * base);
  return `${scaled}${suffix}`;
}

export const percent = (part: number, whole: number): number => (whole > 0 ? Math.min(100, Math.round((part / whole) * 100)) : 0);

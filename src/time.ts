/** Injectable clock, so background jobs and rate windows can be driven by tests. */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** The UTC day whose "YYYY-MM-DDT" isoDay last formatted (readings of a page share days). */
let isoDay = Number.NaN;
let isoDayPrefix = '';
const pad2 = (n: number) => (n < 10 ? '0' : '') + n;
const pad3 = (n: number) => (n < 10 ? '00' : n < 100 ? '0' : '') + n;

/**
 * Date#toISOString's text, computed from the milliseconds with the day's prefix cached: a
 * history page formats 1,000 times, and a Date plus toISOString each is a large share of the
 * route's CPU (BENCHMARKS.md, "Design decisions"). Identical output (tested against toISOString), including
 * years outside 0000-9999 (the prefix comes from toISOString itself).
 */
export function iso(ms: number): string;
export function iso(ms: number | null | undefined): string | null;
export function iso(ms: number | null | undefined): string | null {
  if (ms == null) return null;
  if (!Number.isInteger(ms)) return new Date(ms).toISOString();
  const day = Math.floor(ms / DAY_MS);
  if (day !== isoDay) {
    const text = new Date(day * DAY_MS).toISOString();
    isoDay = day;
    isoDayPrefix = text.slice(0, text.indexOf('T') + 1);
  }
  let rest = ms - day * DAY_MS;
  const hours = Math.floor(rest / HOUR_MS);
  rest -= hours * HOUR_MS;
  const minutes = Math.floor(rest / MINUTE_MS);
  rest -= minutes * MINUTE_MS;
  const seconds = Math.floor(rest / 1000);
  return `${isoDayPrefix}${pad2(hours)}:${pad2(minutes)}:${pad2(seconds)}.${pad3(rest - seconds * 1000)}Z`;
}

export const MINUTE_MS = 60_000;
export const HOUR_MS = 3_600_000;
export const DAY_MS = 86_400_000;
/** Past every stored time: the open end of a range read "up to now and beyond". */
export const END_OF_TIME = Number.MAX_SAFE_INTEGER;

export function startOfUtcMonth(ms: number): number {
  const d = new Date(ms);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
}

export function startOfNextUtcMonth(ms: number): number {
  const d = new Date(ms);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
}

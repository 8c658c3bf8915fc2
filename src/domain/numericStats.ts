/**
 * Count, min, max and sum of the numbers at each dotted path of readings (docs/architecture.md, "Rollups").
 * A value counts when it is a JSON number reached through object keys only: array elements,
 * booleans, strings (numeric ones too) and nulls never count.
 */
interface Acc {
  count: number;
  min: number;
  max: number;
  sum: number;
}

/** Path → figures, for one bucket. */
export type Stats = Map<string, Acc>;

/**
 * a + b, held at ±Number.MAX_VALUE instead of overflowing: readings near the double range's
 * end (1e308 twice) would make the sum ±Infinity, which JSON stores as null, and the
 * average null or 0. Saturated, the average is approximate but finite (avgOf).
 */
function sumOf(a: number, b: number): number {
  const s = a + b;
  if (s === Number.POSITIVE_INFINITY) return Number.MAX_VALUE;
  if (s === Number.NEGATIVE_INFINITY) return -Number.MAX_VALUE;
  return s;
}

/** The average of a bucket's figures: within [min, max] even when its sum saturated (sumOf). */
export function avgOf(a: { count: number; min: number; max: number; sum: number }): number {
  return Math.min(a.max, Math.max(a.min, a.sum / a.count));
}

function add(stats: Stats, path: string, v: number): void {
  const acc = stats.get(path);
  if (acc === undefined) stats.set(path, { count: 1, min: v, max: v, sum: v });
  else {
    acc.count++;
    if (v < acc.min) acc.min = v;
    if (v > acc.max) acc.max = v;
    acc.sum = sumOf(acc.sum, v);
  }
}

function walk(obj: Record<string, unknown>, prefix: string, stats: Stats, only: Set<string> | null): void {
  for (const key in obj) {
    const v = obj[key];
    if (typeof v === 'number') {
      const path = prefix + key;
      // JSON numbers are finite; the check keeps a stored 1e400 (parsed as Infinity) out.
      if ((only === null || only.has(path)) && Number.isFinite(v)) add(stats, path, v);
    } else if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
      walk(v as Record<string, unknown>, `${prefix + key}.`, stats, only);
    }
  }
}

/** Adds the numbers of one reading's parsed data. */
export function addValues(stats: Stats, values: Record<string, unknown>): void {
  walk(values, '', stats, null);
}

/** Adds the numbers of one reading's JSON text; `only` restricts to those paths. */
function addReading(stats: Stats, data: string, only: Set<string> | null): void {
  const parsed = JSON.parse(data) as unknown;
  if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) walk(parsed as Record<string, unknown>, '', stats, only);
}

/** Adds `from` into `into`. */
export function mergeStats(into: Stats, from: Stats): void {
  for (const [path, a] of from) {
    const acc = into.get(path);
    if (acc === undefined) into.set(path, { ...a });
    else {
      acc.count += a.count;
      if (a.min < acc.min) acc.min = a.min;
      if (a.max > acc.max) acc.max = a.max;
      acc.sum = sumOf(acc.sum, a.sum);
    }
  }
}

/**
 * The stored form of a bucket's figures (rollup rows): JSON keyed by path, a plain number
 * for a path seen once (count 1, and min = max = sum = that number), else
 * [count, min, max, sum]. Null for an empty bucket.
 */
export function encodeStats(stats: Stats): string | null {
  if (stats.size === 0) return null;
  const out: Record<string, number | number[]> = {};
  for (const [path, a] of stats) out[path] = a.count === 1 ? a.min : [a.count, a.min, a.max, a.sum];
  return JSON.stringify(out);
}

/** Adds a stored bucket (encodeStats) into `into`; `only` restricts to those paths. */
export function mergeEncoded(into: Stats, text: string, only: Set<string> | null): void {
  const parsed = JSON.parse(text) as Record<string, number | [number, number, number, number]>;
  for (const path in parsed) {
    if (only !== null && !only.has(path)) continue;
    const v = parsed[path]!;
    const acc = into.get(path);
    if (typeof v === 'number') {
      if (acc === undefined) into.set(path, { count: 1, min: v, max: v, sum: v });
      else {
        acc.count++;
        if (v < acc.min) acc.min = v;
        if (v > acc.max) acc.max = v;
        acc.sum = sumOf(acc.sum, v);
      }
    } else if (acc === undefined) into.set(path, { count: v[0], min: v[1], max: v[2], sum: v[3] });
    else {
      acc.count += v[0];
      if (v[1] < acc.min) acc.min = v[1];
      if (v[2] > acc.max) acc.max = v[2];
      acc.sum = sumOf(acc.sum, v[3]);
    }
  }
}

/** The bucket of `time` for buckets of `size` ms aligned on the Unix epoch (UTC). */
export const bucketOf = (time: number, size: number): number => Math.floor(time / size) * size;

/** Adds readings (time, data) into per-bucket figures. */
export function addRows(
  buckets: Map<number, Stats>,
  rows: Iterable<readonly [number, string] | readonly [number, number, string]>,
  size: number,
  only: Set<string> | null,
): void {
  for (const row of rows) {
    const time = row[0];
    const data = row.length === 2 ? row[1] : row[2];
    const b = bucketOf(time, size);
    let stats = buckets.get(b);
    if (stats === undefined) {
      stats = new Map();
      buckets.set(b, stats);
    }
    addReading(stats, data, only);
  }
}

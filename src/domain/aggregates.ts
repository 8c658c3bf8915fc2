import { badRequest } from '../errors.js';
import type { Repositories } from '../storage/repositories.js';
import { type Clock, DAY_MS, END_OF_TIME, HOUR_MS, iso, MINUTE_MS } from '../time.js';
import { addRows, avgOf, bucketOf, mergeEncoded, type Stats } from './numericStats.js';
import { keptFrom, LEVELS, type RollupService } from './rollups.js';
import type { StorageStatus } from './storageStatus.js';
import { capRangeToRetention, RANGE_NAMES, type RangeName, rangeMs } from './telemetry.js';
import type { Account, Device } from './types.js';

/** Bucket sizes of the aggregate endpoint, smallest first. */
const INTERVALS = [
  ['1m', MINUTE_MS],
  ['5m', 5 * MINUTE_MS],
  ['15m', 15 * MINUTE_MS],
  ['1h', HOUR_MS],
  ['6h', 6 * HOUR_MS],
  ['1d', DAY_MS],
] as const;
export type IntervalName = (typeof INTERVALS)[number][0];
export const INTERVAL_NAMES = INTERVALS.map(([name]) => name) as IntervalName[];
const intervalMs = (name: IntervalName): number => INTERVALS.find(([n]) => n === name)![1];

/** The default interval gives at most this many buckets; no interval may give more than MAX_BUCKETS. */
const DEFAULT_MAX_BUCKETS = 500;
const MAX_BUCKETS = 10_000;
export const MAX_FIELDS = 50;

const bucketsOver = (range: RangeName, interval: IntervalName) => Math.ceil(rangeMs(range) / intervalMs(interval));

/** The smallest interval giving at most DEFAULT_MAX_BUCKETS over the range: 1h→1m, 6h→1m, 24h→5m, 7d→1h, 30d→6h. */
function defaultInterval(range: RangeName): IntervalName {
  return INTERVAL_NAMES.find((i) => bucketsOver(range, i) <= DEFAULT_MAX_BUCKETS) ?? '1d';
}

/** `fields` of the query: comma-separated paths; none empty, at most MAX_FIELDS. */
function parseFields(text: string | undefined): string[] | null {
  if (text === undefined) return null;
  const paths = text.split(',').map((p) => p.trim());
  if (paths.length > MAX_FIELDS) throw badRequest(`fields lists ${paths.length} paths; at most ${MAX_FIELDS} are allowed`);
  if (paths.some((p) => p === '')) throw badRequest('fields must not contain an empty path');
  return [...new Set(paths)];
}

export interface AggregateQuery {
  range?: string;
  interval?: string;
  fields?: string;
}

export interface AggregateResult {
  range: RangeName;
  interval: IntervalName;
  fields: string[];
  /** The body's `data`, as JSON text (buckets oldest first). */
  dataJson: string;
}

/**
 * Count, min, max and avg per numeric path in UTC-aligned buckets over a range
 * (docs/api.md, "Aggregates"). The range is the last `range` before the request, capped to the
 * plan retention like the history, and is read from three sources that together hold every
 * reading exactly once:
 *   - rollups (hour rows for whole hours, minute rows for the rest), up to rolled_until;
 *   - raw readings before the first rollup boundary inside the range (the partial first
 *     minute or hour: only readings inside the range count) and from rolled_until on (what
 *     the background job has not rolled yet, including readings committed a moment ago).
 * Minute rollups are only used inside their kept window; outside it the readings are read.
 */
export function aggregateService(
  repos: Repositories,
  clock: Clock,
  rollupJob: RollupService,
  storage: Pick<StorageStatus, 'isStorageFailure'>,
) {
  return {
    async aggregate(account: Account, device: Device, query: AggregateQuery): Promise<AggregateResult> {
      const requested = (query.range ?? '24h') as RangeName;
      if (!RANGE_NAMES.includes(requested)) throw badRequest(`range must be one of ${RANGE_NAMES.join(', ')}`);
      const range = capRangeToRetention(requested, account.limits.retentionDays);
      const interval = (query.interval ?? defaultInterval(range)) as IntervalName;
      if (!INTERVAL_NAMES.includes(interval)) throw badRequest(`interval must be one of ${INTERVAL_NAMES.join(', ')}`);
      if (bucketsOver(range, interval) > MAX_BUCKETS)
        throw badRequest(
          `interval ${interval} gives ${bucketsOver(range, interval)} buckets over ${range}; at most ${MAX_BUCKETS} are allowed`,
        );
      const requestedFields = parseFields(query.fields);
      const only = requestedFields ? new Set(requestedFields) : null;

      const now = clock.now();
      const since = Math.max(now - rangeMs(range), now - account.limits.retentionDays * DAY_MS);
      const size = intervalMs(interval);
      let rolled: number;
      try {
        await rollupJob.settleDevice(device.seq);
        rolled = repos.rollups.rolledUntil();
      } catch (err) {
        // The device's dirty hours could not be recomputed because storage refuses writes (a
        // full disk, a read-only database): its rollups may be stale, so this answer comes
        // from the readings alone. Any other error is a fault that must not pass unseen.
        if (!storage.isStorageFailure(err)) throw err;
        rolled = Number.NEGATIVE_INFINITY;
      }

      const buckets = new Map<number, Stats>();
      const raw = async (from: number, to: number) => {
        if (to > from) addRows(buckets, await repos.rollups.raw(device.seq, from, to), size, only);
      };
      /**
       * Figures of [from, to) (to ≤ rolled) from the coarsest level at most `level` whose
       * whole, kept buckets fit, the ends from finer levels, and the readings last.
       */
      const cover = async (from: number, to: number, level: number): Promise<void> => {
        if (to <= from) return;
        if (level < 0) {
          await raw(from, to);
          return;
        }
        const step = LEVELS[level]!.size;
        const a = Math.max(Math.ceil(from / step) * step, keptFrom(level, now));
        const b = bucketOf(to, step);
        if (a >= b) {
          await cover(from, to, level - 1);
          return;
        }
        await cover(from, a, level - 1);
        for (const [start, text] of await repos.rollups.rows(device.seq, level, a, b)) {
          const into = bucketOf(start, size);
          let stats = buckets.get(into);
          if (stats === undefined) {
            stats = new Map();
            buckets.set(into, stats);
          }
          mergeEncoded(stats, text, only);
        }
        await cover(b, to, level - 1);
      };
      // The coarsest level whose buckets nest in the interval's.
      let level = LEVELS.length - 1;
      while (size % LEVELS[level]!.size !== 0) level--;
      if (since < rolled) {
        await cover(since, rolled, level);
        await raw(rolled, END_OF_TIME);
      } else await raw(since, END_OF_TIME);

      const fields = requestedFields ?? [...new Set([...buckets.values()].flatMap((s) => [...s.keys()]))].sort();
      const parts: string[] = [];
      for (const b of [...buckets.keys()].sort((x, y) => x - y)) {
        const stats = buckets.get(b)!;
        const values: string[] = [];
        for (const path of fields) {
          const a = stats.get(path);
          if (a !== undefined) values.push(`${JSON.stringify(path)}:{"count":${a.count},"min":${a.min},"max":${a.max},"avg":${avgOf(a)}}`);
        }
        if (values.length > 0) parts.push(`{"time":"${iso(b)}","values":{${values.join(',')}}}`);
      }
      return { range, interval, fields, dataJson: `[${parts.join(',')}]` };
    },
  };
}

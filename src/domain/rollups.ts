import type { Repositories } from '../storage/index.js';
import type { OrderedRawRow, RawRow, RollupRow } from '../storage/repos/rollups.js';
import { type Clock, HOUR_MS, MINUTE_MS } from '../time.js';
import { addRows, bucketOf, encodeStats, mergeEncoded, mergeStats, type Stats } from './numericStats.js';

/**
 * Readings are rolled up once their minute is this far in the past: a reading is stamped
 * when it arrives and committed within milliseconds, so by then its minute is complete. One
 * that still commits later is late and marks its hour for recomputation (rollups repository).
 */
export const ROLL_LAG_MS = 5_000;
/** How often the background pass runs; the query reads raw readings for what it has not rolled yet. */
export const ROLL_EVERY_MS = 60_000;
/**
 * Minute rollups are kept for this long: they serve the ranges up to 24 h (1m and 5m
 * buckets) and the partial hours at both ends of longer ranges. Older minutes live on in
 * the hour rollups only, which keeps the database small (docs/aggregates.md).
 */
export const MINUTE_ROLLUPS_KEEP_MS = 25 * HOUR_MS;
/**
 * Readings read per synchronous step of a pass: a step parses and writes them in a few
 * milliseconds, then the event loop runs (ingest commits) before the next one.
 */
export const ROWS_PER_STEP = 4_000;

/** The first minute whose minute rollup is still kept at `now`. */
export const minuteRollupsStart = (now: number): number => bucketOf(now - MINUTE_ROLLUPS_KEEP_MS, MINUTE_MS);

export interface RollupOptions {
  onError?: (err: unknown) => void;
  intervalMs?: number;
  firstRunDelayMs?: number;
}

export interface RollupRun {
  devices: number;
  readings: number;
  dirtyHours: number;
}

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Keeps the per-device minute and hour rollups of numeric paths (migration 7) up to date,
 * off the acknowledgement path: a pass every ROLL_EVERY_MS rolls up every device's readings
 * from rolled_until to the last complete minute (minus ROLL_LAG_MS), in steps of at most
 * ROWS_PER_STEP readings, each its own short transaction, yielding to the event loop in
 * between. Every write recomputes whole buckets from the readings (or from minute rollups
 * for the part of an hour rolled by an earlier pass), so a pass cut short by a crash or a
 * stop is simply redone.
 */
export function rollupService(repos: Repositories, clock: Clock, options: RollupOptions = {}) {
  const rollups = repos.rollups;
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<RollupRun> | null = null;
  let stopped = false;
  let prunedBefore = 0;

  /**
   * Writes the rollups of one device for [from, to) from `rows`, every reading of that span.
   * Minute rows are written for minutes still kept; hour rows for every hour with data, the
   * hour that `from` cuts into combined with what an earlier span rolled of it.
   */
  function rollSpan(deviceSeq: number, from: number, to: number, rows: readonly (RawRow | OrderedRawRow)[], keepStart: number): void {
    const minutes = new Map<number, Stats>();
    addRows(minutes, rows, MINUTE_MS, null);
    const minuteFrom = Math.max(from, keepStart);
    if (to > minuteFrom) {
      const out: RollupRow[] = [];
      for (const b of [...minutes.keys()].sort((x, y) => x - y)) {
        if (b < minuteFrom) continue;
        const text = encodeStats(minutes.get(b)!);
        if (text !== null) out.push([b, text]);
      }
      rollups.replaceMinutes(deviceSeq, minuteFrom, to, out);
    }
    const hours = new Map<number, Stats>();
    for (const [b, stats] of minutes) {
      const h = bucketOf(b, HOUR_MS);
      let into = hours.get(h);
      if (into === undefined) {
        into = new Map();
        hours.set(h, into);
      }
      mergeStats(into, stats);
    }
    const firstWholeHour = Math.ceil(from / HOUR_MS) * HOUR_MS;
    if (to > firstWholeHour) rollups.deleteHours(deviceSeq, firstWholeHour, to);
    for (const [h, stats] of hours) {
      if (h < from) {
        // The hour began before this span: add what was rolled of it before.
        if (h >= keepStart) for (const [, text] of rollups.minuteRows(deviceSeq, h, from)) mergeEncoded(stats, text, null);
        else {
          const before = new Map<number, Stats>();
          addRows(before, rollups.raw(deviceSeq, h, from), HOUR_MS, null);
          const earlier = before.get(h);
          if (earlier) mergeStats(stats, earlier);
        }
      }
      const text = encodeStats(stats);
      if (text !== null) rollups.putHour(deviceSeq, h, text);
    }
  }

  /** Recomputes the dirty hours of one device (or of every device) from its readings. */
  function settle(deviceSeq?: number): number {
    const dirty = deviceSeq === undefined ? rollups.allDirty() : rollups.dirtyHours(deviceSeq).map((hour) => ({ deviceSeq, hour }));
    if (dirty.length === 0) return 0;
    const keepStart = minuteRollupsStart(clock.now());
    for (const { deviceSeq: seq, hour } of dirty) {
      repos.transaction(() => {
        // Up to the time before which readings are rolled (or being rolled by a pass).
        const end = Math.min(hour + HOUR_MS, rollups.lateBefore());
        if (end > hour) rollSpan(seq, hour, end, rollups.raw(seq, hour, end), keepStart);
        rollups.clearDirty(seq, hour);
      });
    }
    return dirty.length;
  }

  /**
   * One pass as a sequence of synchronous steps; the caller decides whether to yield to the
   * event loop between them (the background job) or not (a rebuild).
   */
  function* steps(run: RollupRun): Generator<number, void> {
    const now = clock.now();
    const target = bucketOf(now - ROLL_LAG_MS, MINUTE_MS);
    const start = rollups.rolledUntil();
    const keepStart = minuteRollupsStart(now);
    if (target > start) {
      rollups.setLateBefore(target);
      const prune = bucketOf(keepStart, HOUR_MS) > prunedBefore;
      for (const { seq } of repos.devices.allSeqs()) {
        let cursor = start;
        let touched = false;
        while (cursor < target) {
          let rows: readonly (RawRow | OrderedRawRow)[] = rollups.rawFirst(seq, cursor, target, ROWS_PER_STEP);
          let end = target;
          if (rows.length === ROWS_PER_STEP) {
            // Cut at the last hour boundary, so every step rolls whole hours (but the last).
            const cut = bucketOf(rows[rows.length - 1]![0], HOUR_MS);
            if (cut > cursor) {
              end = cut;
              rows = rows.filter((r) => r[0] < cut);
            } else {
              end = Math.min(cut + HOUR_MS, target);
              rows = rollups.raw(seq, cursor, end);
            }
          }
          if (rows.length > 0) {
            const span = rows;
            const from = cursor;
            repos.transaction(() => rollSpan(seq, from, end, span, keepStart));
            run.readings += rows.length;
            touched = true;
          }
          cursor = end;
          yield rows.length;
        }
        if (prune) rollups.pruneMinutes(seq, keepStart);
        if (touched) run.devices++;
      }
      if (prune) prunedBefore = bucketOf(keepStart, HOUR_MS);
      rollups.setRolledUntil(target);
    }
    run.dirtyHours += settle();
  }

  async function pass(): Promise<RollupRun> {
    const run: RollupRun = { devices: 0, readings: 0, dirtyHours: 0 };
    let sinceYield = 0;
    for (const n of steps(run)) {
      sinceYield += n + 50;
      if (sinceYield >= ROWS_PER_STEP) {
        sinceYield = 0;
        await yieldToEventLoop();
        if (stopped) break;
      }
    }
    return run;
  }

  return {
    /** Periodic passes on an unref'd timer; the first soon after start (an upgraded data dir rolls up its readings). */
    start(): void {
      stopped = false;
      const schedule = (delay: number) => {
        timer = setTimeout(() => {
          void this.runOnce()
            .catch((err) => options.onError?.(err))
            .finally(() => {
              if (!stopped) schedule(options.intervalMs ?? ROLL_EVERY_MS);
            });
        }, delay);
        timer.unref();
      };
      schedule(options.firstRunDelayMs ?? 2_000);
    },
    /** Runs one pass now (or joins the pass in progress). */
    runOnce(): Promise<RollupRun> {
      stopped = false;
      running ??= pass().finally(() => (running = null));
      return running;
    },
    /** Stops the timer and waits for a pass in progress to end at its next step. */
    async stop(): Promise<void> {
      stopped = true;
      if (timer) clearTimeout(timer);
      timer = null;
      await running?.catch(() => undefined);
    },
    /** Before a query reads one device's rollups: recompute its dirty hours, if any. */
    settleDevice: (deviceSeq: number): number => settle(deviceSeq),
    /** Drops every rollup and rolls all readings up again, synchronously (bulk loads, tests). */
    rebuild(): RollupRun {
      rollups.clear();
      prunedBefore = 0;
      const run: RollupRun = { devices: 0, readings: 0, dirtyHours: 0 };
      for (const _ of steps(run));
      return run;
    },
  };
}

export type RollupService = ReturnType<typeof rollupService>;

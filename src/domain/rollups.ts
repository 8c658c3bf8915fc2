import type { OrderedRawRow, RawRow, Repositories, RollupLevelWrite } from '../storage/repositories.js';
import { type Clock, HOUR_MS, MINUTE_MS } from '../time.js';
import { LiveMinutes } from './liveMinutes.js';
import { addRows, bucketOf, encodeStats, mergeEncoded, mergeStats, type Stats } from './numericStats.js';
import { periodicJob } from './periodicJob.js';

/**
 * Readings are rolled up once their minute is this far in the past: a reading is stamped
 * when it arrives and committed within milliseconds, so by then its minute is complete. One
 * that still commits later is late and marks its hour for recomputation (rollups repository).
 */
const ROLL_LAG_MS = 5_000;
/** How often the background pass runs; the query reads raw readings for what it has not rolled yet. */
const ROLL_EVERY_MS = 60_000;
/**
 * Rollup levels, finest first; each size divides the next, and every interval of the
 * aggregate endpoint is a multiple of one of them. Finer levels are kept for a recent window
 * only, which keeps the database small (docs/architecture.md, "Rollups"):
 *   - minutes, 6 h: the 1m buckets of the 1h and 6h ranges;
 *   - 5 minutes, 24 h: the 5m and 15m buckets of the 24h range (288 rows instead of 1,440);
 *   - hours, as long as the readings: the 1h, 6h and 1d buckets of every range.
 * A level keeps every bucket from `keptFrom` on (pruning never removes a newer one), so a
 * range as long as its window is served by it whole. The partial buckets at either end of a
 * range are read from the finer levels, and beyond what they keep, from the readings.
 */
export const LEVELS = [
  { size: MINUTE_MS, keepMs: 6 * HOUR_MS },
  { size: 5 * MINUTE_MS, keepMs: 24 * HOUR_MS },
  { size: HOUR_MS, keepMs: Number.POSITIVE_INFINITY },
] as const;

/** The first bucket of a level whose row is still kept at `now` (rows before it may be pruned). */
export const keptFrom = (level: number, now: number): number => {
  const { size, keepMs } = LEVELS[level]!;
  return keepMs === Number.POSITIVE_INFINITY ? Number.NEGATIVE_INFINITY : bucketOf(now - keepMs, size);
};

/**
 * Readings read per synchronous step of a pass: a step parses and writes them in a few
 * milliseconds, then the event loop runs (ingest commits) before the next one.
 */
export const ROWS_PER_STEP = 4_000;

/**
 * While ingest commits more than this many readings a second, a pass waits (a second at a
 * time) instead of competing with it for the CPU, unless the rollups are already
 * MAX_DEFER_MS behind: queries read the not-yet-rolled tail from the readings meanwhile.
 */
const BUSY_READINGS_PER_S = 2_000;
const MAX_DEFER_MS = 10 * 60_000;

export interface RollupOptions {
  /** Readings committed so far by the process's writer (ReadingWriter.committed). */
  committedReadings?: () => number;
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
const sleep = (ms: number) =>
  new Promise<void>((resolve) => {
    setTimeout(resolve, ms).unref();
  });

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
  const job = periodicJob(pass, options.onError);
  // The minute figures of committed readings are complete only when this process commits
  // every reading (SQLite). With several nodes writing one database (PostgreSQL), each node
  // sees only its own: the pass reads every minute back from the database instead.
  const live = repos.leadership.soleWriter ? new LiveMinutes(clock.now()) : null;
  if (live) repos.readings.observeCommits((batch) => live.addCommitted(batch, rollups.lateBefore(), clock.now()));
  let prunedAt = 0;
  /**
   * The dense hour a pass is reading in chunks (between event-loop turns), not to be settled
   * meanwhile: its rollups are written after, from what the chunks held, and would overwrite
   * a settle's. A late reading leaves it dirty, for the settle at the end of the pass.
   */
  let accumulating: { deviceSeq: number; hour: number } | null = null;
  /** Readings read back from the database since the pass last yielded to the event loop. */
  let readBack = 0;

  /**
   * The rollup writes of one device for [from, to) (from a whole minute) from `minutes`, the
   * minute figures of every reading of that span, level by level: each coarser level from the
   * finer one. A bucket that began before `from` (rolled in part by an earlier span) is
   * completed with the finer level's rows of that earlier part, or with the readings where
   * the finer level no longer keeps them. Only buckets a level still keeps are written.
   * Reads what it needs first; the caller stores the result in one transaction.
   */
  async function rollSpan(
    deviceSeq: number,
    from: number,
    to: number,
    minutes: Map<number, Stats>,
    now: number,
  ): Promise<RollupLevelWrite[]> {
    const writes: RollupLevelWrite[] = [];
    let finer = minutes;
    for (let level = 0; level < LEVELS.length; level++) {
      const { size } = LEVELS[level]!;
      let current: Map<number, Stats>;
      if (level === 0) current = finer;
      else {
        current = new Map();
        for (const [b, stats] of finer) {
          const into = bucketOf(b, size);
          let acc = current.get(into);
          if (acc === undefined) {
            acc = new Map();
            current.set(into, acc);
          }
          mergeStats(acc, stats);
        }
        const first = bucketOf(from, size);
        const partial = current.get(first);
        if (first < from && partial !== undefined) {
          // [first, from) was rolled before: the finer level's rows of it, but those this span
          // recomputed (a finer bucket that `from` cuts into and that got new readings).
          if (first >= keptFrom(level - 1, now)) {
            for (const [b, text] of await rollups.rows(deviceSeq, level - 1, first, from))
              if (!finer.has(b)) mergeEncoded(partial, text, null);
          } else {
            const before = new Map<number, Stats>();
            addRows(before, await rollups.raw(deviceSeq, first, from), size, null);
            const earlier = before.get(first);
            if (earlier) mergeStats(partial, earlier);
          }
        }
      }
      const kept = keptFrom(level, now);
      const firstWhole = Math.max(Math.ceil(from / size) * size, kept);
      const write: RollupLevelWrite = { level, deleteFrom: firstWhole, deleteTo: to, rows: [] };
      for (const [b, stats] of current) {
        if (b < kept) continue;
        const text = encodeStats(stats);
        if (text !== null) write.rows.push([b, text]);
      }
      writes.push(write);
      finer = current;
    }
    return writes;
  }

  /**
   * Stores the rollups of [from, to) of one device computed from `readings` readings read
   * back. With other processes writing (PostgreSQL), only if the span still holds exactly
   * those readings (rollups.settleHour's check): otherwise a late reading committed after the
   * read, and another node may have settled its hour meanwhile, which this write would undo.
   * False: nothing stored, the caller reads the span again.
   */
  async function storeSpan(deviceSeq: number, from: number, to: number, writes: RollupLevelWrite[], readings: number): Promise<boolean> {
    if (live) {
      await rollups.writeSpan(deviceSeq, writes);
      return true;
    }
    return rollups.settleHour(deviceSeq, from, writes, { to, readings });
  }

  const minutesOf = (rows: readonly (RawRow | OrderedRawRow)[]): Map<number, Stats> => {
    const minutes = new Map<number, Stats>();
    addRows(minutes, rows, MINUTE_MS, null);
    return minutes;
  };

  /** Recomputes one dirty hour from its readings, written in one transaction; returns the readings read. */
  async function settleHour(deviceSeq: number, hour: number, now: number): Promise<number> {
    // Up to the time before which readings are rolled (or being rolled by a pass).
    const end = Math.min(hour + HOUR_MS, rollups.lateBefore());
    const rows = end > hour ? await rollups.raw(deviceSeq, hour, end) : [];
    const writes = end > hour ? await rollSpan(deviceSeq, hour, end, minutesOf(rows), now) : [];
    await rollups.settleHour(deviceSeq, hour, writes, { to: end, readings: rows.length });
    return rows.length;
  }

  /** Recomputes the dirty hours of one device (a query is about to read them) but the one a pass is reading. */
  async function settleDevice(deviceSeq: number): Promise<number> {
    // Another node may have rolled further (and moved the late mark) since this one looked.
    await rollups.refresh();
    const now = clock.now();
    let settled = 0;
    for (const hour of await rollups.dirtyHours(deviceSeq)) {
      if (accumulating?.deviceSeq === deviceSeq && accumulating.hour === hour) continue;
      await settleHour(deviceSeq, hour, now);
      settled++;
    }
    return settled;
  }

  /**
   * One pass as a sequence of steps; the caller decides whether to yield to the event loop
   * between them (the background job) or not (a rebuild).
   */
  async function* steps(run: RollupRun): AsyncGenerator<number, void> {
    // A node that has just taken the lead starts where the previous one stopped.
    await rollups.refresh();
    const now = clock.now();
    const target = bucketOf(now - ROLL_LAG_MS, MINUTE_MS);
    const start = rollups.rolledUntil();
    if (target > start) {
      await rollups.setLateBefore(target);
      // Rows older than a level keeps are pruned once an hour.
      const prune = bucketOf(now, HOUR_MS) > prunedAt;
      // Readings from `live.since` on are rolled from the figures held in memory, those
      // before it are read back from the database.
      const readUntil = live ? Math.min(target, live.since) : target;
      for (const { seq } of await repos.devices.allSeqs()) {
        let cursor = start;
        let touched = false;
        while (cursor < readUntil) {
          let rows: readonly OrderedRawRow[] = await rollups.rawFirst(seq, cursor, readUntil, ROWS_PER_STEP);
          readBack += rows.length;
          let end = readUntil;
          const cut = rows.length === ROWS_PER_STEP ? bucketOf(rows[rows.length - 1]![0], HOUR_MS) : null;
          if (cut !== null && cut <= cursor) {
            // One hour holds ROWS_PER_STEP readings or more: read it in chunks of that many, in
            // (time, seq) order, a step each, then written at once.
            end = Math.min(cut + HOUR_MS, readUntil);
            const minutes = new Map<number, Stats>();
            let read = 0;
            accumulating = { deviceSeq: seq, hour: cut };
            try {
              for (;;) {
                addRows(minutes, rows, MINUTE_MS, null);
                run.readings += rows.length;
                read += rows.length;
                if (rows.length < ROWS_PER_STEP) break;
                const [time, after] = rows[rows.length - 1]!;
                yield rows.length;
                rows = await rollups.rawAfter(seq, time, after, end, ROWS_PER_STEP);
                readBack += rows.length;
              }
              if (!(await storeSpan(seq, cursor, end, await rollSpan(seq, cursor, end, minutes, now), read))) {
                yield 0;
                continue;
              }
            } finally {
              accumulating = null;
            }
            touched = true;
            cursor = end;
            yield rows.length;
            continue;
          }
          if (cut !== null) {
            // Cut at the last hour boundary, so every step rolls whole hours (but the last).
            end = cut;
            rows = rows.filter((r) => r[0] < cut);
          }
          if (rows.length > 0) {
            if (!(await storeSpan(seq, cursor, end, await rollSpan(seq, cursor, end, minutesOf(rows), now), rows.length))) {
              yield rows.length;
              continue;
            }
            run.readings += rows.length;
            touched = true;
          }
          cursor = end;
          yield rows.length;
        }
        if (live && cursor < target) {
          const held = live.take(seq, cursor, target);
          if (held !== null) {
            await rollups.writeSpan(seq, await rollSpan(seq, cursor, target, held.minutes, now));
            run.readings += held.readings;
            touched = true;
          }
          // Minutes, not readings: writing one costs about what reading a few rows did.
          yield held === null ? 0 : held.minutes.size;
        }
        if (prune) for (let level = 0; level < LEVELS.length; level++) yield await rollups.deleteRange(seq, level, 0, keptFrom(level, now));
        if (touched) run.devices++;
      }
      if (prune) prunedAt = bucketOf(now, HOUR_MS);
      await rollups.setRolledUntil(target);
      // What is left before the target belongs to devices deleted meanwhile.
      live?.dropBefore(target);
    }
    // Every dirty hour is a step of its own.
    const settleAt = clock.now();
    for (const { deviceSeq, hour } of await rollups.allDirty()) {
      const read = await settleHour(deviceSeq, hour, settleAt);
      readBack += read;
      run.dirtyHours++;
      yield read;
    }
  }

  let lastCount = 0;
  let lastAt = performance.now();
  let perS = 0;
  /** Whether ingest commits fast: its rate over the last second or more (since the last sample). */
  function ingestBusy(): boolean {
    if (!options.committedReadings) return false;
    const at = performance.now();
    if (at - lastAt >= 1_000) {
      const count = options.committedReadings();
      perS = ((count - lastCount) * 1_000) / (at - lastAt);
      lastCount = count;
      lastAt = at;
    }
    return perS > BUSY_READINGS_PER_S;
  }

  async function pass(): Promise<RollupRun> {
    const run: RollupRun = { devices: 0, readings: 0, dirtyHours: 0 };
    let sinceYield = 0;
    for await (const n of steps(run)) {
      sinceYield += n + 50;
      if (sinceYield >= ROWS_PER_STEP) {
        sinceYield = 0;
        await yieldToEventLoop();
        // Only reading readings back competes with ingest; rolling held figures is cheap.
        if (readBack > 0) while (!job.stopped && ingestBusy() && clock.now() - rollups.rolledUntil() < MAX_DEFER_MS) await sleep(1_000);
        readBack = 0;
        if (job.stopped) break;
      }
    }
    return run;
  }

  return {
    /** Periodic passes on an unref'd timer; the first soon after start (an upgraded data dir rolls up its readings). */
    start(): void {
      job.start({ intervalMs: options.intervalMs ?? ROLL_EVERY_MS, firstRunDelayMs: options.firstRunDelayMs ?? 2_000 });
    },
    /** Runs one pass now (or joins the pass in progress); after stop(), it ends at its first yield. */
    runOnce: job.runOnce,
    /** Stops the timer and waits for a pass in progress to end at its next step. */
    stop: job.stop,
    /** Before a query reads one device's rollups: recompute its dirty hours, if any. */
    settleDevice,
    /** Drops every rollup and rolls all readings up again, without yielding to the event loop between steps (bulk loads, tests). */
    async rebuild(): Promise<RollupRun> {
      await rollups.clear();
      // Everything is read from the database.
      live?.dropAll(clock.now());
      prunedAt = 0;
      const run: RollupRun = { devices: 0, readings: 0, dirtyHours: 0 };
      for await (const _ of steps(run));
      return run;
    },
  };
}

export type RollupService = ReturnType<typeof rollupService>;

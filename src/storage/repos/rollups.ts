import type { Db } from '../db.js';

/** (bucket start, stats JSON) of one rollup row. */
export type RollupRow = [number, string];
/** (time, data) of one reading. */
export type RawRow = [number, string];
/** (time, seq, data) of one reading, in (time, seq) order. */
export type OrderedRawRow = [number, number, string];

/** Past every stored time: the open end of a range read "up to now and beyond". */
export const END_OF_TIME = Number.MAX_SAFE_INTEGER;

const HOUR_MS = 3_600_000;

/**
 * Per-device rollups of numeric paths (migration 7): rollup_minutes and rollup_hours, the
 * rolled_until mark, and the hours to recompute (rollup_dirty). What goes in `stats` is the
 * domain's (src/domain/rollups.ts); this repository stores and reads rows.
 *
 * `lateBefore` is the time before which a newly committed reading is late: its minute may
 * already be rolled up. The readings repository checks it per reading of a batch (a number
 * compare) and records the hour of each late reading in rollup_dirty inside the batch's own
 * transaction, so an acknowledged late reading is never missed, even after a crash. Normal
 * readings (stamped now, far ahead of the mark) cost that compare and nothing else.
 */
export function rollupsRepo(db: Db) {
  const readState = db.prepare<[], number>('SELECT rolled_until FROM rollup_state').pluck();
  const writeState = db.prepare<[number]>('UPDATE rollup_state SET rolled_until = ?');
  let rolledUntil = readState.get() ?? 0;
  let lateBefore = rolledUntil;

  const rows = (table: string) => ({
    range: db
      .prepare<[number, number, number], RollupRow>(
        `SELECT bucket, stats FROM ${table} WHERE device_seq = ? AND bucket >= ? AND bucket < ? ORDER BY bucket`,
      )
      .raw(true),
    put: db.prepare<[number, number, string]>(`INSERT OR REPLACE INTO ${table} (device_seq, bucket, stats) VALUES (?, ?, ?)`),
    deleteRange: db.prepare<[number, number, number]>(`DELETE FROM ${table} WHERE device_seq = ? AND bucket >= ? AND bucket < ?`),
    deleteDevice: db.prepare<[number]>(`DELETE FROM ${table} WHERE device_seq = ?`),
  });
  const minutes = rows('rollup_minutes');
  const hours = rows('rollup_hours');

  // Readings of one device in [from, to), from both reading tables in one statement, so a
  // merge of the inbox can never move a row between two reads.
  const rawRange = db
    .prepare<[number, number, number, number, number, number], RawRow>(
      `SELECT time, data FROM readings_by_device WHERE device_seq = ? AND time >= ? AND time < ?
       UNION ALL SELECT time, data FROM readings_inbox WHERE device_seq = ? AND time >= ? AND time < ?`,
    )
    .raw(true);
  const rawFirst = db
    .prepare<[number, number, number, number, number, number, number], OrderedRawRow>(
      `SELECT time, seq, data FROM readings_by_device WHERE device_seq = ? AND time >= ? AND time < ?
       UNION ALL SELECT time, seq, data FROM readings_inbox WHERE device_seq = ? AND time >= ? AND time < ?
       ORDER BY time, seq LIMIT ?`,
    )
    .raw(true);

  const markDirty = db.prepare<[number, number]>('INSERT OR IGNORE INTO rollup_dirty (device_seq, hour) VALUES (?, ?)');
  const dirtyOfDevice = db.prepare<[number], number>('SELECT hour FROM rollup_dirty WHERE device_seq = ? ORDER BY hour').pluck();
  const allDirty = db.prepare<[], { device_seq: number; hour: number }>(
    'SELECT device_seq, hour FROM rollup_dirty ORDER BY device_seq, hour',
  );
  const clearDirty = db.prepare<[number, number]>('DELETE FROM rollup_dirty WHERE device_seq = ? AND hour = ?');
  const clearDirtyOfDevice = db.prepare<[number]>('DELETE FROM rollup_dirty WHERE device_seq = ?');
  const clearDirtyBefore = db.prepare<[number, number]>('DELETE FROM rollup_dirty WHERE device_seq = ? AND hour < ?');
  const hasDirty = db.prepare<[], number>('SELECT EXISTS (SELECT 1 FROM rollup_dirty)').pluck();

  return {
    /** Every reading before this time is in the minute and hour rollups (dirty hours aside). */
    rolledUntil: (): number => rolledUntil,
    setRolledUntil(time: number): void {
      writeState.run(time);
      rolledUntil = time;
    },
    /** A reading committed from now on with an earlier time marks its hour dirty. */
    lateBefore: (): number => lateBefore,
    setLateBefore(time: number): void {
      lateBefore = Math.max(time, rolledUntil);
    },
    /** Called by the readings repository inside a batch's transaction, for late readings only. */
    markDirty(deviceSeq: number, time: number): void {
      markDirty.run(deviceSeq, Math.floor(time / HOUR_MS) * HOUR_MS);
    },
    dirtyHours: (deviceSeq: number): number[] => dirtyOfDevice.all(deviceSeq),
    allDirty: () => allDirty.all().map((r) => ({ deviceSeq: r.device_seq, hour: r.hour })),
    anyDirty: (): boolean => hasDirty.get() === 1,
    clearDirty: (deviceSeq: number, hour: number) => void clearDirty.run(deviceSeq, hour),

    minuteRows: (deviceSeq: number, from: number, to: number): RollupRow[] => minutes.range.all(deviceSeq, from, to),
    hourRows: (deviceSeq: number, from: number, to: number): RollupRow[] => hours.range.all(deviceSeq, from, to),
    /** Replaces the minute rows of [from, to) with `rows` (buckets inside that range). */
    replaceMinutes(deviceSeq: number, from: number, to: number, rows: RollupRow[]): void {
      minutes.deleteRange.run(deviceSeq, from, to);
      for (const [bucket, stats] of rows) minutes.put.run(deviceSeq, bucket, stats);
    },
    putHour: (deviceSeq: number, bucket: number, stats: string) => void hours.put.run(deviceSeq, bucket, stats),
    deleteHours: (deviceSeq: number, from: number, to: number) => void hours.deleteRange.run(deviceSeq, from, to),
    /** Minute rows are kept for a recent window only. */
    pruneMinutes: (deviceSeq: number, before: number) => void minutes.deleteRange.run(deviceSeq, 0, before),

    /** Readings of [from, to) of one device, unordered. */
    raw: (deviceSeq: number, from: number, to: number): RawRow[] => rawRange.all(deviceSeq, from, to, deviceSeq, from, to),
    /** The first `limit` readings of [from, to) of one device, in (time, seq) order. */
    rawFirst: (deviceSeq: number, from: number, to: number, limit: number): OrderedRawRow[] =>
      rawFirst.all(deviceSeq, from, to, deviceSeq, from, to, limit),

    /**
     * Retention deleted the readings before `cutoff`: their rollups go, and the hour the
     * cutoff cuts into is marked dirty, to be recomputed from the readings left in it (a
     * later, longer retention reads it as a whole hour).
     */
    deleteBefore(deviceSeq: number, cutoff: number): void {
      minutes.deleteRange.run(deviceSeq, 0, cutoff);
      hours.deleteRange.run(deviceSeq, 0, cutoff);
      clearDirtyBefore.run(deviceSeq, cutoff - HOUR_MS + 1);
      if (cutoff % HOUR_MS !== 0) markDirty.run(deviceSeq, Math.floor(cutoff / HOUR_MS) * HOUR_MS);
    },
    /** Device deletion. */
    deleteDevice(deviceSeq: number): void {
      minutes.deleteDevice.run(deviceSeq);
      hours.deleteDevice.run(deviceSeq);
      clearDirtyOfDevice.run(deviceSeq);
    },
    /** Drops every rollup, for a rebuild from the readings. */
    clear(): void {
      db.exec('DELETE FROM rollup_minutes; DELETE FROM rollup_hours; DELETE FROM rollup_dirty; UPDATE rollup_state SET rolled_until = 0');
      rolledUntil = 0;
      lateBefore = 0;
    },
  };
}

export type RollupsRepo = ReturnType<typeof rollupsRepo>;

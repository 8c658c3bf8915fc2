import { HOUR_MS } from '../../time.js';
import type { Db } from '../db.js';
import type { OrderedRawRow, RawRow, RollupLevelWrite, RollupRow } from '../repositories.js';

/**
 * Per-device rollups of numeric paths (migration 7): rows per device, level and bucket, the
 * rolled_until mark, and the hours to recompute (rollup_dirty). What goes in `stats`, and
 * what each level's buckets are, is the domain's (src/domain/rollups.ts); this repository
 * stores and reads rows.
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

  const rowRange = db
    .prepare<[number, number, number, number], RollupRow>(
      'SELECT bucket, stats FROM rollups WHERE device_seq = ? AND level = ? AND bucket >= ? AND bucket < ? ORDER BY bucket',
    )
    .raw(true);
  const putRow = db.prepare<[number, number, number, string]>(
    'INSERT OR REPLACE INTO rollups (device_seq, level, bucket, stats) VALUES (?, ?, ?, ?)',
  );
  const deleteRange = db.prepare<[number, number, number, number]>(
    'DELETE FROM rollups WHERE device_seq = ? AND level = ? AND bucket >= ? AND bucket < ?',
  );
  const deleteOfDevice = db.prepare<[number]>('DELETE FROM rollups WHERE device_seq = ?');

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

  const rawFirstSettled = db
    .prepare<[number, number, number, number], OrderedRawRow>(
      `SELECT time, seq, data FROM readings_by_device WHERE device_seq = ? AND time >= ? AND time < ?
       ORDER BY time, seq LIMIT ?`,
    )
    .raw(true);
  const inboxDevicesBefore = db.prepare<[number], number>('SELECT DISTINCT device_seq FROM readings_inbox WHERE time < ?').pluck();
  /**
   * The inbox has no index by device (appends stay cheap), so rawFirst's inbox half reads it
   * whole, and the first pass after a start, which reads back every device, read it once per
   * device. Which devices it holds rows of before `to` is read once per `to` instead, and a
   * device without such rows is read from the clustered table alone. The set can only grow
   * stale towards too many devices: a pass's `to` is in the past, readings are stamped when
   * they arrive, so rows before `to` only leave the inbox (a merge moves them to the clustered
   * table); a reading committed late marks its hour dirty (lateBefore), and that hour is
   * recomputed from both tables (raw).
   */
  let inboxBefore: { to: number; devices: Set<number> } | null = null;

  const rawCount = db.prepare<[number, number, number, number, number, number], { n: number }>(
    `SELECT (SELECT count(*) FROM readings_by_device WHERE device_seq = ? AND time >= ? AND time < ?)
      + (SELECT count(*) FROM readings_inbox WHERE device_seq = ? AND time >= ? AND time < ?) AS n`,
  );

  // The next readings after (time, seq) in [time, to), in (time, seq) order: the chunks of an
  // hour too dense to read at once.
  const rawAfter = db
    .prepare<[number, number, number, number, number, number, number, number, number, number, number], OrderedRawRow>(
      `SELECT time, seq, data FROM readings_by_device WHERE device_seq = ? AND time >= ? AND (time > ? OR seq > ?) AND time < ?
       UNION ALL SELECT time, seq, data FROM readings_inbox WHERE device_seq = ? AND time >= ? AND (time > ? OR seq > ?) AND time < ?
       ORDER BY time, seq LIMIT ?`,
    )
    .raw(true);
  const rawAfterSettled = db
    .prepare<[number, number, number, number, number, number], OrderedRawRow>(
      `SELECT time, seq, data FROM readings_by_device WHERE device_seq = ? AND time >= ? AND (time > ? OR seq > ?) AND time < ?
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

  const deviceExists = db.prepare<[number], number>('SELECT 1 FROM devices WHERE seq = ?').pluck();
  // A pass lists the devices before it works through them, a step at a time: a device deleted
  // meanwhile (its rollups deleted with its row) gets nothing written, or its rows would stay
  // behind it for good. Checked inside the write's transaction, which holds the write lock.
  const writeLevels = (deviceSeq: number, writes: RollupLevelWrite[]) => {
    if (deviceExists.get(deviceSeq) === undefined) return;
    for (const w of writes) {
      if (w.deleteTo > w.deleteFrom) deleteRange.run(deviceSeq, w.level, w.deleteFrom, w.deleteTo);
      for (const [bucket, stats] of w.rows) putRow.run(deviceSeq, w.level, bucket, stats);
    }
  };
  const writeSpan = db.transaction(writeLevels);
  const settleHour = db.transaction(
    (deviceSeq: number, hour: number, writes: RollupLevelWrite[], read: { to: number; readings: number }) => {
      if (read.to > hour && rawCount.get(deviceSeq, hour, read.to, deviceSeq, hour, read.to)!.n !== read.readings) return false;
      writeLevels(deviceSeq, writes);
      clearDirty.run(deviceSeq, hour);
      return true;
    },
  );
  const clear = db.transaction(() => {
    db.exec('DELETE FROM rollups; DELETE FROM rollup_dirty; UPDATE rollup_state SET rolled_until = 0');
  });

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
    /** One process serves a SQLite database: the marks in memory are the database's. */
    refresh(): void {},
    /** Called by the readings repository inside a batch's transaction, for late readings only. */
    markDirty(deviceSeq: number, time: number): void {
      markDirty.run(deviceSeq, Math.floor(time / HOUR_MS) * HOUR_MS);
    },
    dirtyHours: (deviceSeq: number): number[] => dirtyOfDevice.all(deviceSeq),
    allDirty: () => allDirty.all().map((r) => ({ deviceSeq: r.device_seq, hour: r.hour })),

    /** Rows of one level with buckets in [from, to), oldest first. */
    rows: (deviceSeq: number, level: number, from: number, to: number): RollupRow[] => rowRange.all(deviceSeq, level, from, to),
    /** Deletes the rows of one level with buckets in [from, to); returns how many went. */
    deleteRange: (deviceSeq: number, level: number, from: number, to: number): number =>
      deleteRange.run(deviceSeq, level, from, to).changes,
    writeSpan: (deviceSeq: number, writes: RollupLevelWrite[]): void => writeSpan.immediate(deviceSeq, writes),
    settleHour: (deviceSeq: number, hour: number, writes: RollupLevelWrite[], read: { to: number; readings: number }): boolean =>
      settleHour.immediate(deviceSeq, hour, writes, read),

    /** Readings of [from, to) of one device, unordered. */
    raw: (deviceSeq: number, from: number, to: number): RawRow[] => rawRange.all(deviceSeq, from, to, deviceSeq, from, to),
    /** The first `limit` readings of [from, to) of one device, in (time, seq) order. */
    rawFirst: (deviceSeq: number, from: number, to: number, limit: number): OrderedRawRow[] => {
      if (inboxBefore?.to !== to) inboxBefore = { to, devices: new Set(inboxDevicesBefore.all(to)) };
      return inboxBefore.devices.has(deviceSeq)
        ? rawFirst.all(deviceSeq, from, to, deviceSeq, from, to, limit)
        : rawFirstSettled.all(deviceSeq, from, to, limit);
    },
    /**
     * The first `limit` readings after (time, seq) and before `to`, in (time, seq) order: the
     * chunks after rawFirst's, of a `to` no later than its, so the devices rawFirst found
     * without inbox rows are read from the clustered table alone here too.
     */
    rawAfter: (deviceSeq: number, time: number, seq: number, to: number, limit: number): OrderedRawRow[] =>
      inboxBefore !== null && to <= inboxBefore.to && !inboxBefore.devices.has(deviceSeq)
        ? rawAfterSettled.all(deviceSeq, time, time, seq, to, limit)
        : rawAfter.all(deviceSeq, time, time, seq, to, deviceSeq, time, time, seq, to, limit),

    /**
     * Inside readings.expireBatch's transaction: retention deleted the readings before `cutoff`: their rollups go, and the hour the
     * cutoff cuts into is marked dirty, to be recomputed from the readings left in it (a
     * later, longer retention reads it as a whole hour).
     */
    deleteBefore(deviceSeq: number, cutoff: number, levels: number): void {
      for (let level = 0; level < levels; level++) deleteRange.run(deviceSeq, level, 0, cutoff);
      clearDirtyBefore.run(deviceSeq, cutoff - HOUR_MS + 1);
      if (cutoff % HOUR_MS !== 0) markDirty.run(deviceSeq, Math.floor(cutoff / HOUR_MS) * HOUR_MS);
    },
    /** Device deletion, inside devices.removeWithRollups' transaction. */
    deleteDevice(deviceSeq: number): void {
      deleteOfDevice.run(deviceSeq);
      clearDirtyOfDevice.run(deviceSeq);
    },
    /** Drops every rollup, for a rebuild from the readings. */
    clear(): void {
      clear.immediate();
      rolledUntil = 0;
      lateBefore = 0;
    },
  };
}

export type RollupsRepo = ReturnType<typeof rollupsRepo>;

import type { Pool } from 'pg';
import { HOUR_MS } from '../../../time.js';
import type { OrderedRawRow, RawRow, RollupLevelWrite, RollupRow, RollupsRepository } from '../../repositories.js';
import { inTransaction, prepared, type Queryable, Rollback } from './sql.js';

const readState = prepared<{ rolled_until: number }>('rollup-state', 'SELECT rolled_until FROM rollup_state');
const writeState = prepared('rollup-set-state', 'UPDATE rollup_state SET rolled_until = $1');
const readLate = prepared<{ late_before: number }>('rollup-late', 'SELECT late_before FROM rollup_late');
// Waits for the batches being written (each holds the row FOR SHARE, readingWriter.ts): once
// this commits, every reading committed before is visible to the pass, and every batch
// after sees the new mark.
const writeLate = prepared('rollup-set-late', 'UPDATE rollup_late SET late_before = greatest(late_before, $1)');
const rowRange = prepared(
  'rollup-rows',
  'SELECT bucket, stats FROM rollups WHERE device_seq = $1 AND level = $2 AND bucket >= $3 AND bucket < $4 ORDER BY bucket',
);
const putRow = prepared(
  'rollup-put',
  `INSERT INTO rollups (device_seq, level, bucket, stats) VALUES ($1, $2, $3, $4)
   ON CONFLICT (device_seq, level, bucket) DO UPDATE SET stats = excluded.stats`,
);
// Many rows of one level in one statement: a span of a busy device writes hundreds.
const putRows = prepared(
  'rollup-put-many',
  `INSERT INTO rollups (device_seq, level, bucket, stats) SELECT $1, $2, b, s FROM unnest($3::bigint[], $4::text[]) AS u(b, s)
   ON CONFLICT (device_seq, level, bucket) DO UPDATE SET stats = excluded.stats`,
);
const deleteRange = prepared(
  'rollup-delete-range',
  'DELETE FROM rollups WHERE device_seq = $1 AND level = $2 AND bucket >= $3 AND bucket < $4',
);
const deleteLevelsBefore = prepared(
  'rollup-delete-before',
  'DELETE FROM rollups WHERE device_seq = $1 AND level < $2 AND bucket >= 0 AND bucket < $3',
);
const deleteOfDevice = prepared('rollup-delete-device', 'DELETE FROM rollups WHERE device_seq = $1');

// Readings of one device: the primary key (device_seq, time, seq) of each partition the range covers.
const rawRange = prepared('rollup-raw', 'SELECT time, data FROM readings WHERE device_seq = $1 AND time >= $2 AND time < $3');
const rawCount = prepared<{ n: number }>(
  'rollup-raw-count',
  'SELECT count(*) AS n FROM readings WHERE device_seq = $1 AND time >= $2 AND time < $3',
);
const rawFirst = prepared(
  'rollup-raw-first',
  'SELECT time, seq, data FROM readings WHERE device_seq = $1 AND time >= $2 AND time < $3 ORDER BY time, seq LIMIT $4',
);
// The next readings after (time, seq) and before `to`: the chunks of an hour too dense to read
// at once. `time >= $2` besides the row comparison, which partition pruning does not look into.
const rawAfter = prepared(
  'rollup-raw-after',
  `SELECT time, seq, data FROM readings WHERE device_seq = $1 AND time >= $2 AND (time, seq) > ($2, $3) AND time < $4
   ORDER BY time, seq LIMIT $5`,
);

// An existing mark is rewritten, which holds it until commit: a settle of the hour waits (readingWriter.ts, INSERT_BATCH).
const markDirty = prepared(
  'rollup-mark-dirty',
  'INSERT INTO rollup_dirty (device_seq, hour) VALUES ($1, $2) ON CONFLICT (device_seq, hour) DO UPDATE SET hour = excluded.hour',
);
const dirtyOfDevice = prepared<{ hour: number }>(
  'rollup-dirty-of-device',
  'SELECT hour FROM rollup_dirty WHERE device_seq = $1 ORDER BY hour',
);
const allDirty = prepared<{ device_seq: number; hour: number }>(
  'rollup-dirty-all',
  'SELECT device_seq, hour FROM rollup_dirty ORDER BY device_seq, hour',
);
const clearDirty = prepared('rollup-clear-dirty', 'DELETE FROM rollup_dirty WHERE device_seq = $1 AND hour = $2');
/**
 * A DELETE of the marks `where` selects that locks them in (device, hour) order first, the
 * order in which a batch of readings writes its marks (readingWriter.ts, INSERT_BATCH). A
 * plain DELETE locks them in the order its plan meets them (a table or bitmap scan: as
 * stored): holding a later hour of a device while a batch holds an earlier one and waits for
 * it, it would wait for the batch in turn, and PostgreSQL would end one of them as a deadlock
 * (the batch's readings refused with a 503).
 */
export const deleteMarksInOrder = (where: string) =>
  `DELETE FROM rollup_dirty WHERE (device_seq, hour) IN
     (SELECT device_seq, hour FROM rollup_dirty WHERE ${where} ORDER BY device_seq, hour FOR UPDATE)`;
const clearDirtyOfDevice = prepared('rollup-clear-dirty-device', deleteMarksInOrder('device_seq = $1'));
const clearDirtyBefore = prepared('rollup-clear-dirty-before', deleteMarksInOrder('device_seq = $1 AND hour < $2'));

async function applyWrites(db: Queryable, deviceSeq: number, writes: RollupLevelWrite[]): Promise<void> {
  for (const w of writes) {
    if (w.deleteTo > w.deleteFrom) await deleteRange.run(db, [deviceSeq, w.level, w.deleteFrom, w.deleteTo]);
    if (w.rows.length === 1) await putRow.run(db, [deviceSeq, w.level, w.rows[0]![0], w.rows[0]![1]]);
    else if (w.rows.length > 1) await putRows.run(db, [deviceSeq, w.level, w.rows.map((r) => r[0]), w.rows.map((r) => r[1])]);
  }
}

/**
 * Retention removed the readings before `cutoff`: their rollups go, and the hour the cutoff
 * cuts into is marked dirty, to be recomputed from the readings left in it. On `db`, so it
 * runs in the retention step's transaction (readings.expireBatch).
 *
 * Marks before rollups, here and wherever both are deleted: a settle (settleHour) takes its
 * hour's mark first and writes the hour's rollups after. Taken in the same order, a deletion
 * waits for a settle at the mark; the other way round each held what the other waited for,
 * and PostgreSQL ended one of them as a deadlock.
 */
export async function deleteRollupsBefore(db: Queryable, deviceSeq: number, cutoff: number, levels: number): Promise<void> {
  await clearDirtyBefore.run(db, [deviceSeq, cutoff - HOUR_MS + 1]);
  if (cutoff % HOUR_MS !== 0) await markDirty.run(db, [deviceSeq, Math.floor(cutoff / HOUR_MS) * HOUR_MS]);
  await deleteLevelsBefore.run(db, [deviceSeq, levels, cutoff]);
}

/** A device's dirty hours and rollups, in that order (deleteRollupsBefore), on `db` (device deletion, in its transaction). */
export async function deleteRollupsOfDevice(db: Queryable, deviceSeq: number): Promise<void> {
  await clearDirtyOfDevice.run(db, [deviceSeq]);
  await deleteOfDevice.run(db, [deviceSeq]);
}

/**
 * Rollups on PostgreSQL (RollupsRepository, src/storage/repositories.ts). `rolledUntil` and
 * `lateBefore` are held in memory, read synchronously, and stored: rolled_until in
 * rollup_state, lateBefore in rollup_late, which every node's writer reads in its batch
 * statement (postgres/readingWriter.ts) to mark a late reading's hour dirty. Only the node
 * that leads runs the pass and moves them; the others read them again (refresh) before they
 * use them: before an aggregate query settles a device, before a pass.
 */
export async function postgresRollupsRepo(pool: Pool): Promise<RollupsRepository> {
  let rolledUntil = (await readState.first(pool, []))?.rolled_until ?? 0;
  let lateBefore = Math.max(rolledUntil, (await readLate.first(pool, []))?.late_before ?? 0);

  return {
    /** Every reading before this time is in the minute and hour rollups (dirty hours aside). */
    rolledUntil: (): number => rolledUntil,
    async setRolledUntil(time: number): Promise<void> {
      await writeState.run(pool, [time]);
      rolledUntil = time;
    },
    /** A reading committed from now on with an earlier time marks its hour dirty. */
    lateBefore: (): number => lateBefore,
    async setLateBefore(time: number): Promise<void> {
      lateBefore = Math.max(time, rolledUntil);
      await writeLate.run(pool, [lateBefore]);
    },
    async refresh(): Promise<void> {
      const [state, late] = await Promise.all([readState.first(pool, []), readLate.first(pool, [])]);
      rolledUntil = state?.rolled_until ?? 0;
      lateBefore = Math.max(rolledUntil, late?.late_before ?? 0);
    },
    dirtyHours: async (deviceSeq: number): Promise<number[]> => (await dirtyOfDevice.rows(pool, [deviceSeq])).map((r) => r.hour),
    allDirty: async (): Promise<{ deviceSeq: number; hour: number }[]> =>
      (await allDirty.rows(pool, [])).map((r) => ({ deviceSeq: r.device_seq, hour: r.hour })),

    /** Rows of one level with buckets in [from, to), oldest first. */
    rows: (deviceSeq: number, level: number, from: number, to: number): Promise<RollupRow[]> =>
      rowRange.arrays<RollupRow>(pool, [deviceSeq, level, from, to]),
    /** Deletes the rows of one level with buckets in [from, to); returns how many went. */
    // An empty range deletes nothing without a query: pruning asks for [0, -Infinity) at the
    // level kept for ever, which SQLite compares and a bigint parameter refuses.
    deleteRange: async (deviceSeq: number, level: number, from: number, to: number): Promise<number> =>
      to <= from ? 0 : deleteRange.run(pool, [deviceSeq, level, from, to]),
    /** The writes of one rolled span of a device, in one transaction. */
    writeSpan: (deviceSeq: number, writes: RollupLevelWrite[]): Promise<void> =>
      inTransaction(pool, (client) => applyWrites(client, deviceSeq, writes)),
    /**
     * A dirty hour recomputed: its writes and the end of its mark, in one transaction, only if
     * the device still has the `read.readings` readings in [hour, read.to) the writes were
     * computed from; otherwise rolled back, the mark kept, and false.
     *
     * The mark is deleted before the readings are counted, and a late reading's batch writes
     * the mark whether or not it exists, holding it until it commits. A batch that wrote it
     * first makes the delete wait for its commit, so the count sees its reading and nothing is
     * settled; a batch that comes after the delete waits for this transaction and marks the
     * hour again. SQLite has the same guarantee from its write lock.
     */
    settleHour: (deviceSeq: number, hour: number, writes: RollupLevelWrite[], read: { to: number; readings: number }): Promise<boolean> =>
      inTransaction<boolean>(pool, async (client) => {
        await clearDirty.run(client, [deviceSeq, hour]);
        if (read.to > hour && (await rawCount.first(client, [deviceSeq, hour, read.to]))!.n !== read.readings) return new Rollback(false);
        await applyWrites(client, deviceSeq, writes);
        return true;
      }),

    /** Readings of [from, to) of one device, unordered. */
    raw: (deviceSeq: number, from: number, to: number): Promise<RawRow[]> => rawRange.arrays<RawRow>(pool, [deviceSeq, from, to]),
    /** The first `limit` readings of [from, to) of one device, in (time, seq) order. */
    rawFirst: (deviceSeq: number, from: number, to: number, limit: number): Promise<OrderedRawRow[]> =>
      rawFirst.arrays<OrderedRawRow>(pool, [deviceSeq, from, to, limit]),
    /** The first `limit` readings after (time, seq) and before `to`, in (time, seq) order. */
    rawAfter: (deviceSeq: number, time: number, seq: number, to: number, limit: number): Promise<OrderedRawRow[]> =>
      rawAfter.arrays<OrderedRawRow>(pool, [deviceSeq, time, seq, to, limit]),
    /** Drops every rollup, for a rebuild from the readings. */
    async clear(): Promise<void> {
      await inTransaction(pool, async (client) => {
        // The late mark first: every batch of readings reads it (FOR SHARE) before it marks
        // late readings' hours, so a rebuild that held marks while waiting for it ended one of
        // them as a deadlock. Then marks before rollups, as a settle takes them (deleteRollupsBefore).
        await client.query('UPDATE rollup_late SET late_before = 0');
        await client.query('DELETE FROM rollup_dirty');
        await client.query('DELETE FROM rollups');
        await client.query('UPDATE rollup_state SET rolled_until = 0');
      });
      rolledUntil = 0;
      lateBefore = 0;
    },
  };
}

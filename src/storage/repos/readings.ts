import type { Db } from '../db.js';
import type { StoredReading } from '../../domain/types.js';
import { COUNT_INSERTED_READINGS, REBUILD_READING_COUNTS } from '../migrations.js';

const MINUTE_MS = 60_000;

interface ReadingRow {
  seq: number;
  device_seq: number;
  time: number;
  data: string;
}

const toReading = (r: ReadingRow): StoredReading => ({ seq: r.seq, deviceSeq: r.device_seq, time: r.time, data: r.data });

export interface PendingReading {
  deviceSeq: number;
  time: number;
  data: string;
}

export function readingsRepo(db: Db) {
  const insert = db.prepare<[number, number, number, string]>('INSERT INTO readings (device_seq, time, seq, data) VALUES (?, ?, ?, ?)');
  // Takes n seqs in one step (migration 1: reading_seq only grows, ids are never reused).
  const takeSeqs = db.prepare<[number], { last: number }>('UPDATE reading_seq SET last = last + ? RETURNING last');
  const latest = db.prepare<[number], ReadingRow>('SELECT seq, device_seq, time, data FROM readings WHERE device_seq = ? ORDER BY time DESC, seq DESC LIMIT 1');
  // Newest first within [since, ∞): a backwards range scan of the clustered table.
  // Rows come as arrays (raw), without device_seq (the caller's): better-sqlite3 builds
  // 1,000 keyed row objects per history page in ~1 ms more (BENCHMARKS.md).
  const history = db
    .prepare<[number, number, number], [number, number, string]>(
      'SELECT seq, time, data FROM readings WHERE device_seq = ? AND time >= ? ORDER BY time DESC, seq DESC LIMIT ?',
    )
    .raw(true);
  // Oldest first, for exports that stream a whole range.
  const rangeAsc = db.prepare<[number, number, number], ReadingRow>(
    'SELECT seq, device_seq, time, data FROM readings WHERE device_seq = ? AND time >= ? AND time < ? ORDER BY time, seq',
  );
  const countSince = db.prepare<[number, number], { n: number }>('SELECT count(*) AS n FROM readings WHERE device_seq = ? AND time >= ?');
  // An account's readings since T (migration 4): whole minutes from reading_counts, and the
  // partial first minute [T, next minute) from the readings index.
  const countMinutesOfAccount = db.prepare<[number, number], { n: number }>(
    'SELECT coalesce(sum(n), 0) AS n FROM reading_counts WHERE account_seq = ? AND minute >= ?',
  );
  const countRangeOfAccount = db.prepare<[number, number, number], { n: number }>(
    'SELECT count(*) AS n FROM devices d JOIN readings r ON r.device_seq = d.seq AND r.time >= ? AND r.time < ? WHERE d.account_seq = ?',
  );
  // Oldest first, by primary key (device_seq, time, seq).
  const deleteBatchOfDevice = db.prepare<[number, number]>(
    'DELETE FROM readings WHERE (device_seq, time, seq) IN (SELECT device_seq, time, seq FROM readings WHERE device_seq = ? ORDER BY time, seq LIMIT ?)',
  );
  const deleteOlderBatch = db.prepare<[number, number, number]>(
    'DELETE FROM readings WHERE (device_seq, time, seq) IN (SELECT device_seq, time, seq FROM readings WHERE device_seq = ? AND time < ? ORDER BY time, seq LIMIT ?)',
  );

  const countInserted = db.prepare<[string]>(COUNT_INSERTED_READINGS);

  /**
   * One transaction for a whole batch (group commit); returns the new seqs in order. The
   * seqs come as one block from reading_seq, and the usage counts (migration 4) take one
   * statement for the batch, aggregated here per device and minute: the only place readings
   * are inserted, so they stay exact.
   */
  const insertBatch = db.transaction((batch: PendingReading[]) => {
    if (batch.length === 0) return [];
    const last = takeSeqs.get(batch.length)!.last;
    const first = last - batch.length + 1;
    const seqs = new Array<number>(batch.length);
    const perMinute = new Map<number, Map<number, number>>();
    for (let i = 0; i < batch.length; i++) {
      const r = batch[i]!;
      const seq = first + i;
      insert.run(r.deviceSeq, r.time, seq, r.data);
      seqs[i] = seq;
      const minute = Math.floor(r.time / MINUTE_MS);
      let perDevice = perMinute.get(minute);
      if (!perDevice) perMinute.set(minute, (perDevice = new Map()));
      perDevice.set(r.deviceSeq, (perDevice.get(r.deviceSeq) ?? 0) + 1);
    }
    const counts: [number, number, number][] = [];
    for (const [minute, perDevice] of perMinute) for (const [deviceSeq, n] of perDevice) counts.push([deviceSeq, minute, n]);
    countInserted.run(JSON.stringify(counts));
    return seqs;
  });

  return {
    insertBatch: (batch: PendingReading[]): number[] => insertBatch.immediate(batch),
    latest(deviceSeq: number) {
      const r = latest.get(deviceSeq);
      return r ? toReading(r) : null;
    },
    history: (deviceSeq: number, since: number, limit: number): StoredReading[] =>
      history.all(deviceSeq, since, limit).map((r) => ({ seq: r[0], deviceSeq, time: r[1], data: r[2] })),
    iterateRange: function* (deviceSeq: number, since: number, until: number) {
      for (const r of rangeAsc.iterate(deviceSeq, since, until)) yield toReading(r);
    },
    /** Readings of an account's devices with time >= since (usage's data_points_24h). */
    countSinceForAccount(accountSeq: number, since: number): number {
      const firstWholeMinute = Math.ceil(since / MINUTE_MS);
      const edge = countRangeOfAccount.get(since, firstWholeMinute * MINUTE_MS, accountSeq)!.n;
      return edge + countMinutesOfAccount.get(accountSeq, firstWholeMinute)!.n;
    },
    /** Recomputes tables derived from readings, after a bulk load that bypassed triggers. */
    rebuildDerived: () => db.exec(REBUILD_READING_COUNTS),
    countSince: (deviceSeqs: number[], since: number) => deviceSeqs.reduce((sum, seq) => sum + countSince.get(seq, since)!.n, 0),
    /** Deletes up to `batch` readings of a device; returns how many went (0 when done). */
    deleteBatchOfDevice: (deviceSeq: number, batch: number) => deleteBatchOfDevice.run(deviceSeq, batch).changes,
    deleteOlderBatch: (deviceSeq: number, before: number, batch: number) => deleteOlderBatch.run(deviceSeq, before, batch).changes,
  };
}

export type ReadingsRepo = ReturnType<typeof readingsRepo>;

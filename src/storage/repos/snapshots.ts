import { DAY_MS } from '../../time.js';
import type { Db } from '../db.js';
import type { NewSnapshot, SnapshotRecord } from '../repositories.js';

interface SnapshotRow {
  seq: number;
  id: string;
  device_seq: number;
  device_id: string;
  account_seq: number;
  content_type: string;
  size: number;
  created_at: number;
}

const toSnapshot = (r: SnapshotRow): SnapshotRecord => ({
  seq: r.seq,
  id: r.id,
  deviceSeq: r.device_seq,
  deviceId: r.device_id,
  accountSeq: r.account_seq,
  contentType: r.content_type,
  size: r.size,
  createdAt: r.created_at,
});

const SELECT = `SELECT s.seq, s.id, s.device_seq, d.id AS device_id, d.account_seq, s.content_type, s.size, s.created_at
  FROM snapshots s JOIN devices d ON d.seq = s.device_seq`;

export function snapshotsRepo(db: Db) {
  const byId = db.prepare<[string], SnapshotRow>(`${SELECT} WHERE s.id = ?`);
  const insert = db.prepare<[string, number, string, number, number]>(
    'INSERT INTO snapshots (id, device_seq, content_type, size, created_at) VALUES (?, ?, ?, ?, ?)',
  );
  // A range scan of snapshots_by_device_time.
  const countSince = db.prepare<[number, number], { n: number }>(
    'SELECT count(*) AS n FROM snapshots WHERE device_seq = ? AND created_at >= ?',
  );
  // Expired = older than the owning account's snapshot retention. The outer bound (older than
  // the shortest retention of any account) lets the scan of snapshots_by_time stop early.
  const shortestRetention = db.prepare<[], { days: number | null }>('SELECT min(snapshot_retention_days) AS days FROM accounts');
  const expired = db.prepare<{ now: number; bound: number; limit: number }, SnapshotRow>(
    `${SELECT} JOIN accounts a ON a.seq = d.account_seq
     WHERE s.created_at < @bound AND s.created_at < @now - a.snapshot_retention_days * ${DAY_MS}
     ORDER BY s.created_at LIMIT @limit`,
  );
  const remove = db.prepare<[number]>('DELETE FROM snapshots WHERE seq = ?');

  const insertWithinQuota = db.transaction((s: NewSnapshot, since: number, limit: number): boolean => {
    if (countSince.get(s.deviceSeq, since)!.n >= limit) return false;
    insert.run(s.id, s.deviceSeq, s.contentType, s.size, s.now);
    return true;
  });
  const removeMany = db.transaction((seqs: number[]) => seqs.reduce((n, seq) => n + remove.run(seq).changes, 0));

  return {
    findById: (id: string): SnapshotRecord | null => {
      const r = byId.get(id);
      return r ? toSnapshot(r) : null;
    },
    // IMMEDIATE takes the write lock before the count: concurrent uploads cannot both take the last place.
    insertWithinQuota: (s: NewSnapshot, since: number, limit: number): boolean => insertWithinQuota.immediate(s, since, limit),
    countSince: (deviceSeq: number, since: number) => countSince.get(deviceSeq, since)!.n,
    /** Up to `limit` snapshots past their account's retention at `now`, oldest first. */
    expiredBatch(now: number, limit: number): SnapshotRecord[] {
      const days = shortestRetention.get()!.days;
      if (days === null) return [];
      return expired.all({ now, bound: now - days * DAY_MS, limit }).map(toSnapshot);
    },
    /** Deletes the given rows in one transaction; returns how many went. */
    removeMany: (seqs: number[]): number => removeMany.immediate(seqs),
  };
}

// The row and its mapping, shared with the PostgreSQL repository (postgres/repos/snapshots.ts) so both backends
// hand the domain the same objects.
export { type SnapshotRow, toSnapshot };

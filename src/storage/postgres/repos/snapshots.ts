import type { Pool } from 'pg';
import { DAY_MS } from '../../../time.js';
import { type SnapshotRow, toSnapshot } from '../../repos/snapshots.js';
import type { NewSnapshot, SnapshotRecord, SnapshotsRepository } from '../../repositories.js';
import { lockDevice } from './devices.js';
import { inTransaction, prepared } from './sql.js';

const SELECT = `SELECT s.seq, s.id, s.device_seq, d.id AS device_id, d.account_seq, s.content_type, s.size, s.created_at
  FROM snapshots s JOIN devices d ON d.seq = s.device_seq`;

const byId = prepared<SnapshotRow>('snapshot-by-id', `${SELECT} WHERE s.id = $1`);
const insert = prepared(
  'snapshot-insert',
  'INSERT INTO snapshots (id, device_seq, content_type, size, created_at) VALUES ($1, $2, $3, $4, $5)',
);
// A range scan of snapshots_by_device_time.
const countSince = prepared<{ n: number }>(
  'snapshots-count-since',
  'SELECT count(*) AS n FROM snapshots WHERE device_seq = $1 AND created_at >= $2',
);
// Expired = older than the owning account's snapshot retention. The outer bound (older than
// the shortest retention of any account) lets the scan of snapshots_by_time stop early.
const shortestRetention = prepared<{ days: number | null }>(
  'accounts-shortest-snapshot-retention',
  'SELECT min(snapshot_retention_days) AS days FROM accounts',
);
const expired = prepared<SnapshotRow>(
  'snapshots-expired',
  `${SELECT} JOIN accounts a ON a.seq = d.account_seq
   WHERE s.created_at < $2 AND s.created_at < $1 - a.snapshot_retention_days * ${DAY_MS}::bigint
   ORDER BY s.created_at, s.seq LIMIT $3`,
);
const removeMany = prepared('snapshots-remove', 'DELETE FROM snapshots WHERE seq = ANY($1::bigint[])');

/** Snapshot rows on PostgreSQL (SnapshotsRepository, src/storage/repositories.ts). */
export function postgresSnapshotsRepo(pool: Pool): SnapshotsRepository {
  const insertValues = (s: NewSnapshot) => [s.id, s.deviceSeq, s.contentType, s.size, s.now];
  return {
    async findById(id: string): Promise<SnapshotRecord | null> {
      const r = await byId.first(pool, [id]);
      return r ? toSnapshot(r) : null;
    },
    /**
     * Inserts the snapshot unless its device already has `limit` snapshots created since
     * `since`; false (nothing inserted) when it has. One transaction holding the device row
     * (FOR UPDATE), so concurrent uploads, from any process, cannot both take the last slot.
     */
    insertWithinQuota: (s: NewSnapshot, since: number, limit: number): Promise<boolean> =>
      inTransaction(pool, async (client) => {
        await lockDevice.run(client, [s.deviceSeq]);
        if ((await countSince.first(client, [s.deviceSeq, since]))!.n >= limit) return false;
        await insert.run(client, insertValues(s));
        return true;
      }),
    countSince: async (deviceSeq: number, since: number): Promise<number> => (await countSince.first(pool, [deviceSeq, since]))!.n,
    /** Up to `limit` snapshots past their account's retention at `now`, oldest first. */
    async expiredBatch(now: number, limit: number): Promise<SnapshotRecord[]> {
      const days = (await shortestRetention.first(pool, []))!.days;
      if (days === null) return [];
      return (await expired.rows(pool, [now, now - days * DAY_MS, limit])).map(toSnapshot);
    },
    /** Deletes the given rows in one statement (one transaction); returns how many went. */
    removeMany: (seqs: number[]): Promise<number> => (seqs.length === 0 ? Promise.resolve(0) : removeMany.run(pool, [seqs])),
  };
}

import type { Pool } from 'pg';
import { type DeviceRow, toDevice } from '../../repos/devices.js';
import type { DeviceChanges, DevicesRepository, DeviceWithToken, NewDevice } from '../../repositories.js';
import type { AuthCache } from '../authCache.js';
import { inTransaction, prepared, type Queryable } from './sql.js';

// Booleans come out as 0/1, as SQLite stores them, so the SQLite repository's row mapping
// (toDevice) is the one both backends use.
const ROW = `d.seq, d.id, d.account_seq, d.name, d.type, d.description, d.status, d.settings, d.schema_mode, d.fields,
  d.snapshots_enabled::int AS snapshots_enabled, d.token_hash, d.rejected_count, d.last_rejection_reason, d.last_rejection_at,
  d.resumed_at, d.created_at, d.updated_at`;
// last_seen is the newest reading's time (a backward probe of each weekly partition's primary
// key), so ingest never updates the device row; the stored column is the fallback once
// retention has removed every reading.
const SELECT = `SELECT ${ROW},
    coalesce((SELECT max(r.time) FROM readings r WHERE r.device_seq = d.seq), d.last_seen) AS last_seen
  FROM devices d`;

const byId = prepared<DeviceRow>('device-by-id', `${SELECT} WHERE d.id = $1`);
const bySeq = prepared<DeviceRow>('device-by-seq', `${SELECT} WHERE d.seq = $1`);
// Hot path of ingest and MQTT CONNECT: the row alone, without the last_seen probe.
const forAuth = prepared<DeviceRow>('device-for-auth', `SELECT ${ROW}, d.last_seen FROM devices d WHERE d.id = $1`);
// In created_at order, stable under offset paging (docs/api.md, "Pagination and page sizes").
const page = prepared<DeviceRow>(
  'devices-page',
  `${SELECT} WHERE d.account_seq = $1 AND ($2::text IS NULL OR d.status = $2) ORDER BY d.created_at, d.seq LIMIT $3 OFFSET $4`,
);
const countOf = prepared<{ n: number }>(
  'devices-count',
  'SELECT count(*) AS n FROM devices WHERE account_seq = $1 AND ($2::text IS NULL OR status = $2)',
);
const insert = prepared(
  'device-insert',
  `INSERT INTO devices (id, account_seq, name, type, description, settings, schema_mode, fields, snapshots_enabled, token_hash,
     created_at, updated_at)
   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)`,
);
// resumed_at marks where a silence may start at the earliest (no_data alerts).
const setStatus = prepared(
  'device-set-status',
  `UPDATE devices SET resumed_at = CASE WHEN $2 = 'active' AND status = 'paused' THEN $3 ELSE resumed_at END,
     status = $2, updated_at = $3 WHERE seq = $1`,
);
const setToken = prepared('device-set-token', 'UPDATE devices SET token_hash = $2, updated_at = $3 WHERE seq = $1');
const update = prepared(
  'device-update',
  `UPDATE devices SET name = $2, type = $3, description = $4, settings = $5, schema_mode = $6, fields = $7,
     snapshots_enabled = $8, updated_at = $9 WHERE seq = $1`,
);
const recordRejection = prepared(
  'device-record-rejection',
  'UPDATE devices SET rejected_count = rejected_count + 1, last_rejection_reason = $2, last_rejection_at = $3 WHERE seq = $1',
);
const remove = prepared('device-remove', 'DELETE FROM devices WHERE seq = $1');
// Retention sweeps a removed device again (migration 12, repos/readings.ts sweepRemovedDevices).
const rememberRemoved = prepared(
  'device-remember-removed',
  'INSERT INTO removed_devices (device_seq, account_seq) SELECT seq, account_seq FROM devices WHERE seq = $1 ON CONFLICT DO NOTHING',
);
// Keeps the newest reading's time in the row before retention deletes readings, so last_seen
// survives the deletion of every reading (SELECT above falls back to it). A device that never
// sent one keeps NULL ("never"), not 0.
const archiveLastSeen = prepared(
  'device-archive-last-seen',
  `UPDATE devices SET last_seen = nullif(greatest(coalesce(last_seen, 0),
     coalesce((SELECT max(time) FROM readings WHERE device_seq = devices.seq), 0)), 0) WHERE seq = $1`,
);
const allSeqs = prepared<{ seq: number; account_seq: number }>('devices-all-seqs', 'SELECT seq, account_seq FROM devices ORDER BY seq');
const lockAccount = prepared('account-lock', 'SELECT 1 FROM accounts WHERE seq = $1 FOR UPDATE');
/** The device row, held to the end of the transaction (removeWithRollups here, snapshots.insertWithinQuota). */
export const lockDevice = prepared('device-lock', 'SELECT 1 FROM devices WHERE seq = $1 FOR UPDATE');

const newDeviceValues = (d: NewDevice) => [
  d.id,
  d.accountSeq,
  d.name,
  d.type,
  d.description,
  JSON.stringify(d.settings),
  d.schemaMode,
  JSON.stringify(d.fields),
  d.snapshotsEnabled,
  d.tokenHash,
  d.now,
];

/** Archives last_seen; the retention step (readings.expireBatch) runs it inside its transaction. */
export const archiveDeviceLastSeen = (db: Queryable, seq: number) => archiveLastSeen.run(db, [seq]);

/** Deletes a device's rollups and their dirty hours (rollups.deleteDevice), on `db`. */
export type DeleteRollupsOf = (db: Queryable, deviceSeq: number) => Promise<void>;

/** Devices on PostgreSQL (DevicesRepository, src/storage/repositories.ts). */
export function postgresDevicesRepo(pool: Pool, cache: AuthCache, deleteRollupsOf: DeleteRollupsOf): DevicesRepository {
  const findForAuth = async (id: string): Promise<DeviceWithToken | null> => toDevice(await forAuth.first(pool, [id]));
  const write = <T>(w: Promise<T>) => cache.writing(w).then(() => {});
  return {
    findById: async (id: string): Promise<DeviceWithToken | null> => toDevice(await byId.first(pool, [id])),
    findBySeq: async (seq: number): Promise<DeviceWithToken | null> => toDevice(await bySeq.first(pool, [seq])),
    /**
     * The device row without last_seen resolved (it holds only the archived value). Cached
     * until this process changes devices or accounts (authCache.ts): a hit is synchronous.
     * Treat the result as read-only.
     */
    findForAuth: cache.cached(findForAuth),
    listByAccount: async (accountSeq: number, opts: { limit: number; offset: number; status?: string }): Promise<DeviceWithToken[]> =>
      (await page.rows(pool, [accountSeq, opts.status || null, opts.limit, opts.offset])).map((r) => toDevice(r)!),
    count: async (accountSeq: number, status?: string): Promise<number> => (await countOf.first(pool, [accountSeq, status || null]))!.n,
    /**
     * Inserts the device unless its account already has `limit` devices; false (nothing
     * inserted) when it has. One transaction holding the account row (FOR UPDATE), so two
     * concurrent creations, from any process, cannot both take the last place.
     */
    insertWithinLimit: (d: NewDevice, limit: number): Promise<boolean> =>
      cache.writing(
        inTransaction(pool, async (client) => {
          await lockAccount.run(client, [d.accountSeq]);
          if ((await countOf.first(client, [d.accountSeq, null]))!.n >= limit) return false;
          await insert.run(client, newDeviceValues(d));
          return true;
        }),
      ),
    update: (seq: number, d: DeviceChanges): Promise<void> =>
      write(
        update.run(pool, [
          seq,
          d.name,
          d.type,
          d.description,
          JSON.stringify(d.settings),
          d.schemaMode,
          JSON.stringify(d.fields),
          d.snapshotsEnabled,
          d.now,
        ]),
      ),
    setStatus: (seq: number, status: 'active' | 'paused', now: number): Promise<void> => write(setStatus.run(pool, [seq, status, now])),
    setTokenHash: (seq: number, hash: string, now: number): Promise<void> => write(setToken.run(pool, [seq, hash, now])),
    recordRejection: (seq: number, reason: string, now: number): Promise<void> => write(recordRejection.run(pool, [seq, reason, now])),
    /**
     * Deletes the device with its rollups in one transaction; its alerts, their events and
     * its snapshot rows go with it (ON DELETE CASCADE). Readings left (the caller deletes them
     * in batches first, readings.deleteBatchOfDevice) are deleted before the row, so the
     * usage-count trigger still finds their account. The row is locked first, as retention's
     * step (readings.expireBatch) takes it, archiving last_seen, before its readings, marks and
     * rollups: locked last, each could hold what the other waited for (docs/postgres.md, "Lock order").
     */
    removeWithRollups: (seq: number): Promise<void> =>
      write(
        inTransaction(pool, async (client) => {
          await lockDevice.run(client, [seq]);
          await client.query('DELETE FROM readings WHERE device_seq = $1', [seq]);
          await deleteRollupsOf(client, seq);
          await rememberRemoved.run(client, [seq]);
          await remove.run(client, [seq]);
        }),
      ),
    /** Every device as (seq, account seq): the retention job walks them. */
    allSeqs: async (): Promise<{ seq: number; accountSeq: number }[]> =>
      (await allSeqs.rows(pool, [])).map((r) => ({ seq: r.seq, accountSeq: r.account_seq })),
  };
}

import type { FieldDefinition, SchemaMode } from '../../domain/types.js';
import type { Db } from '../db.js';
import type { TableChanges } from '../readCache.js';
import type { DeviceChanges, DeviceWithToken, NewDevice } from '../repositories.js';
import type { ReadingsRepo } from './readings.js';
import type { RollupsRepo } from './rollups.js';

interface DeviceRow {
  seq: number;
  id: string;
  account_seq: number;
  name: string;
  type: string;
  description: string;
  status: 'active' | 'paused';
  settings: string;
  schema_mode: SchemaMode;
  fields: string;
  snapshots_enabled: number;
  token_hash: string;
  last_seen: number | null;
  resumed_at: number | null;
  rejected_count: number;
  last_rejection_reason: string | null;
  last_rejection_at: number | null;
  created_at: number;
  updated_at: number;
}

function toDevice(r: DeviceRow | undefined): DeviceWithToken | null {
  if (!r) return null;
  return {
    seq: r.seq,
    id: r.id,
    accountSeq: r.account_seq,
    name: r.name,
    type: r.type,
    description: r.description,
    status: r.status,
    settings: JSON.parse(r.settings) as Record<string, unknown>,
    schemaMode: r.schema_mode,
    fields: JSON.parse(r.fields) as FieldDefinition[],
    snapshotsEnabled: r.snapshots_enabled === 1,
    tokenHash: r.token_hash,
    lastSeen: r.last_seen,
    resumedAt: r.resumed_at,
    rejectedCount: r.rejected_count,
    lastRejectionReason: r.last_rejection_reason,
    lastRejectionAt: r.last_rejection_at,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

// last_seen is the newest reading's time: a probe of the clustered readings table and a look
// at the small inbox (migration 5), so ingest never has to update the device row. The stored
// column is the fallback after retention removed every reading.
const COLUMNS = `d.seq, d.id, d.account_seq, d.name, d.type, d.description, d.status, d.settings,
  d.schema_mode, d.fields, d.snapshots_enabled, d.token_hash, d.rejected_count, d.last_rejection_reason,
  d.last_rejection_at, d.resumed_at, d.created_at, d.updated_at`;
const NEWEST_STORED = '(SELECT max(r.time) FROM readings_by_device r WHERE r.device_seq = d.seq)';
// One device: its inbox rows by a scan of the inbox.
const SELECT = `SELECT ${COLUMNS}, COALESCE(NULLIF(max(coalesce(${NEWEST_STORED}, -1),
    coalesce((SELECT max(i.time) FROM readings_inbox i WHERE i.device_seq = d.seq), -1)), -1), d.last_seen) AS last_seen
  FROM devices d`;
// A page of devices: the inbox grouped once for the whole page, not scanned per device.
const SELECT_PAGE = `SELECT ${COLUMNS}, COALESCE(NULLIF(max(coalesce(${NEWEST_STORED}, -1), coalesce(i.newest, -1)), -1), d.last_seen) AS last_seen
  FROM devices d LEFT JOIN (SELECT device_seq, max(time) AS newest FROM readings_inbox GROUP BY device_seq) i ON i.device_seq = d.seq`;

export function devicesRepo(db: Db, rollups: RollupsRepo, readings: Pick<ReadingsRepo, 'deleteRestOfDevice'>, changes?: TableChanges) {
  const byId = db.prepare<[string], DeviceRow>(`${SELECT} WHERE d.id = ?`);
  const bySeq = db.prepare<[number], DeviceRow>(`${SELECT} WHERE d.seq = ?`);
  // Hot path of ingest and MQTT CONNECT: the row alone, without the last_seen probe.
  const forAuth = db.prepare<[string], DeviceRow>('SELECT * FROM devices WHERE id = ?');
  // Devices list in created_at order, stable under offset paging (docs/api.md, "Pagination and page sizes").
  const page = db.prepare<[number, number, number], DeviceRow>(
    `${SELECT_PAGE} WHERE d.account_seq = ? ORDER BY d.created_at, d.seq LIMIT ? OFFSET ?`,
  );
  const pageByStatus = db.prepare<[number, string, number, number], DeviceRow>(
    `${SELECT_PAGE} WHERE d.account_seq = ? AND d.status = ? ORDER BY d.created_at, d.seq LIMIT ? OFFSET ?`,
  );
  const countAll = db.prepare<[number], { n: number }>('SELECT count(*) AS n FROM devices WHERE account_seq = ?');
  const countByStatus = db.prepare<[number, string], { n: number }>(
    'SELECT count(*) AS n FROM devices WHERE account_seq = ? AND status = ?',
  );
  const insert = db.prepare(`INSERT INTO devices (seq, id, account_seq, name, type, description, settings, schema_mode, fields,
      snapshots_enabled, token_hash, created_at, updated_at)
    VALUES (@seq, @id, @accountSeq, @name, @type, @description, @settings, @schemaMode, @fields, @snapshotsEnabled, @tokenHash, @now, @now)`);
  // Seqs are never reused (migration 10); past any row put in without one (a restored archive).
  const takeSeq = db
    .prepare<[], number>('UPDATE device_seq SET last = max(last, (SELECT coalesce(max(seq), 0) FROM devices)) + 1 RETURNING last')
    .pluck();
  // resumed_at marks where a silence may start at the earliest (no_data alerts).
  const setStatus = db.prepare(`UPDATE devices SET
      resumed_at = CASE WHEN @status = 'active' AND status = 'paused' THEN @now ELSE resumed_at END,
      status = @status, updated_at = @now WHERE seq = @seq`);
  const setToken = db.prepare('UPDATE devices SET token_hash = ?, updated_at = ? WHERE seq = ?');
  const update = db.prepare(`UPDATE devices SET name = @name, type = @type, description = @description, settings = @settings,
    schema_mode = @schemaMode, fields = @fields, snapshots_enabled = @snapshotsEnabled, updated_at = @now WHERE seq = @seq`);
  const recordRejection = db.prepare(
    'UPDATE devices SET rejected_count = rejected_count + 1, last_rejection_reason = ?, last_rejection_at = ? WHERE seq = ?',
  );
  const remove = db.prepare('DELETE FROM devices WHERE seq = ?');
  const allSeqs = db.prepare<[], { seq: number; account_seq: number }>('SELECT seq, account_seq FROM devices ORDER BY seq');

  const insertWithinLimit = db.transaction((d: NewDevice, limit: number): boolean => {
    if (countAll.get(d.accountSeq)!.n >= limit) return false;
    insert.run({
      ...d,
      seq: takeSeq.get()!,
      settings: JSON.stringify(d.settings),
      fields: JSON.stringify(d.fields),
      snapshotsEnabled: d.snapshotsEnabled ? 1 : 0,
    });
    return true;
  });
  // The domain deletes the readings in batches first, each its own transaction; a batch the
  // server commits after the last of them (the admin CLI deletes from another process, between
  // the server's commits) goes here, before the row: readings have no foreign key, so it
  // would stay behind the device for good.
  const removeWithRollups = db.transaction((seq: number) => {
    readings.deleteRestOfDevice(seq);
    rollups.deleteDevice(seq);
    remove.run(seq);
  });

  return {
    findById: (id: string) => toDevice(byId.get(id)),
    findBySeq: (seq: number) => toDevice(bySeq.get(seq)),
    /**
     * The device row without last_seen resolved (it holds only the archived value). Cached
     * until devices or accounts change (readCache.ts): treat the result as read-only.
     */
    findForAuth: changes ? changes.cached((id: string) => toDevice(forAuth.get(id))) : (id: string) => toDevice(forAuth.get(id)),
    listByAccount(accountSeq: number, opts: { limit: number; offset: number; status?: string }) {
      const rows = opts.status
        ? pageByStatus.all(accountSeq, opts.status, opts.limit, opts.offset)
        : page.all(accountSeq, opts.limit, opts.offset);
      return rows.map((r) => toDevice(r)!);
    },
    count: (accountSeq: number, status?: string) => (status ? countByStatus.get(accountSeq, status)! : countAll.get(accountSeq)!).n,
    // IMMEDIATE takes the write lock before the count, so another connection's insert waits.
    insertWithinLimit: (d: NewDevice, limit: number): boolean => insertWithinLimit.immediate(d, limit),
    update(seq: number, d: DeviceChanges): void {
      update.run({
        seq,
        name: d.name,
        type: d.type,
        description: d.description,
        settings: JSON.stringify(d.settings),
        schemaMode: d.schemaMode,
        fields: JSON.stringify(d.fields),
        snapshotsEnabled: d.snapshotsEnabled ? 1 : 0,
        now: d.now,
      });
    },
    setStatus: (seq: number, status: 'active' | 'paused', now: number) => void setStatus.run({ status, now, seq }),
    setTokenHash: (seq: number, hash: string, now: number) => void setToken.run(hash, now, seq),
    recordRejection: (seq: number, reason: string, now: number) => void recordRejection.run(reason, now, seq),
    removeWithRollups: (seq: number): void => removeWithRollups.immediate(seq),
    /** Every device as (seq, account seq): the retention job walks them. */
    allSeqs: () => allSeqs.all().map((r) => ({ seq: r.seq, accountSeq: r.account_seq })),
  };
}

// The row and its mapping, shared with the PostgreSQL repository (postgres/repos/devices.ts) so both backends
// hand the domain the same objects.
export { type DeviceRow, toDevice };

import type { StoredReading } from '../../domain/types.js';
import { MINUTE_MS } from '../../time.js';
import type { Db } from '../db.js';
import { REBUILD_READING_COUNTS } from '../migrations.js';
import { deviceCheckWindow, type TableChanges } from '../readCache.js';
import type { PendingReading } from '../repositories.js';
import type { RollupsRepo } from './rollups.js';

const ROWS_PER_INSERT = 32;
/** Rows per INSERT statement, largest first: ROWS_PER_INSERT, then halves down to 1. */
const INSERT_SIZES = [ROWS_PER_INSERT, 16, 8, 4, 2, 1];
/** Seqs reserved from reading_seq at a time (takeSeqs). */
const SEQ_BLOCK = 4096;
/** A batch with at least this many readings per distinct device skips the inbox. */
export const DIRECT_READINGS_PER_DEVICE = 4;

interface ReadingRow {
  seq: number;
  device_seq: number;
  time: number;
  data: string;
}

/** (seq, time, data) of one device's reading. */
type HistoryRow = [number, number, string];

/** Whether reading a comes after reading b: by time, then seq (the order of history pages). */
const isNewer = (aTime: number, aSeq: number, bTime: number, bSeq: number) => aTime > bTime || (aTime === bTime && aSeq > bSeq);

/** The first `limit` of two newest-first lists, newest first. */
function newestFirst(a: HistoryRow[], b: HistoryRow[], limit: number): HistoryRow[] {
  if (a.length === 0) return b;
  if (b.length === 0) return a;
  const out: HistoryRow[] = [];
  let i = 0;
  let j = 0;
  while (out.length < limit && (i < a.length || j < b.length)) {
    if (j >= b.length || (i < a.length && isNewer(a[i]![1], a[i]![0], b[j]![1], b[j]![0]))) out.push(a[i++]!);
    else out.push(b[j++]!);
  }
  return out;
}

/** Indexes of the batch sorted by device, each device's readings in batch order. */
function byDevice(batch: readonly PendingReading[]): Uint32Array {
  const order = new Uint32Array(batch.length);
  for (let i = 0; i < order.length; i++) order[i] = i;
  return order.sort((a, b) => batch[a]!.deviceSeq - batch[b]!.deviceSeq || a - b);
}

const toReading = (r: ReadingRow): StoredReading => ({ seq: r.seq, deviceSeq: r.device_seq, time: r.time, data: r.data });

/**
 * Readings live in two tables (migration 5): `readings_inbox`, where each committed batch is
 * appended in seq order, and `readings_by_device`, clustered on (device_seq, time, seq), into
 * which mergeInbox moves the inbox in one sorted pass. The inbox stays small (the writer
 * merges it every INBOX_MERGE_ROWS readings, and when ingest pauses), so the queries below
 * read both: the clustered table by its key, the inbox by a scan of at most ~33,000 rows.
 */
export function readingsRepo(db: Db, rollups: RollupsRepo, deviceTables: Pick<TableChanges, 'current'>) {
  // A batch's rows go in as few statements as its size allows: ROWS_PER_INSERT rows per
  // statement, then the remainder in statements of 16, 8, 4, 2 and 1 rows (a remainder of 13
  // takes three). One step and one call into the addon per statement, not per row, and at
  // HTTP ingest's batch sizes (a dozen readings) the whole batch is such a remainder
  // (BENCHMARKS.md, "Design decisions").
  const inserts = (table: string) =>
    INSERT_SIZES.map((rows) => ({
      rows,
      statement: db.prepare<unknown[]>(
        `INSERT INTO ${table} (device_seq, time, seq, data) VALUES ${Array(rows).fill('(?, ?, ?, ?)').join(', ')}`,
      ),
      params: new Array<unknown>(4 * rows),
    }));
  const insertInbox = inserts('readings_inbox');
  const insertByDevice = inserts('readings_by_device');
  /**
   * Readings in the inbox as far as this connection knows: counted once at open (a server
   * stopped by a crash, or a restored backup, may have left some), then kept by its own
   * appends and merges.
   */
  let inboxRows = (db.prepare('SELECT count(*) FROM readings_inbox').pluck().get() as number) ?? 0;
  // Reserves n seqs in one step (migration 1: reading_seq only grows, ids are never reused).
  const reserveSeqs = db.prepare<[number], { last: number }>('UPDATE reading_seq SET last = last + ? RETURNING last');
  /**
   * Seqs reserved by this connection and not yet used: [nextSeq, reservedUpTo]. A batch takes
   * its seqs from here and touches reading_seq only when the block runs out, so most commits
   * write one page fewer and run one statement fewer. The reservation is made inside the
   * batch's transaction: a batch that rolls back takes its reservation with it, and the block
   * is dropped (takeSeqs' caller). Seqs left unused when the process stops are never issued:
   * ids have gaps after a restart, as they do on PostgreSQL.
   */
  let nextSeq = 1;
  let reservedUpTo = 0;
  const takeSeqs = (n: number): number => {
    if (reservedUpTo - nextSeq + 1 < n) {
      const size = Math.max(n, SEQ_BLOCK);
      reservedUpTo = reserveSeqs.get(size)!.last;
      nextSeq = reservedUpTo - size + 1;
    }
    const first = nextSeq;
    nextSeq += n;
    return first;
  };
  const mergeInto = db.prepare(
    'INSERT INTO readings_by_device (device_seq, time, seq, data) SELECT device_seq, time, seq, data FROM readings_inbox ORDER BY device_seq, time, seq',
  );
  // No WHERE: SQLite's truncate optimization drops the inbox's pages instead of deleting rows.
  const emptyInbox = db.prepare('DELETE FROM readings_inbox');
  /** Moves every inbox reading into the clustered table; returns how many moved. */
  const mergeInbox = db.transaction((): number => {
    const moved = mergeInto.run().changes;
    if (moved > 0) emptyInbox.run();
    inboxRows = 0;
    return moved;
  });
  // "Newest first" reads each table with its own statement and merges the two in JS
  // (newestFirst): as one compound SELECT, SQLite re-sorted the clustered table's 1,000 rows
  // in a temporary B-tree although its key already orders them.
  const latestStored = db.prepare<[number], ReadingRow>(
    'SELECT seq, device_seq, time, data FROM readings_by_device WHERE device_seq = ? ORDER BY time DESC, seq DESC LIMIT 1',
  );
  const latestInbox = db.prepare<[number], ReadingRow>(
    'SELECT seq, device_seq, time, data FROM readings_inbox WHERE device_seq = ? ORDER BY time DESC, seq DESC LIMIT 1',
  );
  // Newest first within [since, ∞): a backwards range scan of the clustered table.
  // Rows come as arrays (raw) of (seq, time, data), without device_seq (the caller's):
  // keyed row objects would cost better-sqlite3 noticeably more per 1,000-reading history page.
  const historyStored = db
    .prepare<[number, number, number], HistoryRow>(
      'SELECT seq, time, data FROM readings_by_device WHERE device_seq = ? AND time >= ? ORDER BY time DESC, seq DESC LIMIT ?',
    )
    .raw(true);
  const historyInbox = db
    .prepare<[number, number, number], HistoryRow>(
      'SELECT seq, time, data FROM readings_inbox WHERE device_seq = ? AND time >= ? ORDER BY time DESC, seq DESC LIMIT ?',
    )
    .raw(true);
  // Newest first within [since, before), one row at a time, the caller stopping at the first
  // match or at its budget: SQLite merges the clustered table's backwards range scan with the
  // (small) inbox, so only the rows looked at are read.
  const newestFirstBetween = db
    .prepare<[number, number, number, number, number, number], [number, string]>(
      `SELECT time, data FROM readings_by_device WHERE device_seq = ? AND time >= ? AND time < ?
       UNION ALL SELECT time, data FROM readings_inbox WHERE device_seq = ? AND time >= ? AND time < ?
       ORDER BY time DESC`,
    )
    .raw(true);
  // Oldest first, for exports that stream a whole range: SQLite merges the two ordered arms.
  const rangeAsc = db.prepare<[number, number, number, number, number, number], ReadingRow>(
    `SELECT seq, device_seq, time, data FROM readings_by_device WHERE device_seq = ? AND time >= ? AND time < ?
     UNION ALL SELECT seq, device_seq, time, data FROM readings_inbox WHERE device_seq = ? AND time >= ? AND time < ?
     ORDER BY time, seq`,
  );
  const countSince = db.prepare<[number, number, number, number], { n: number }>(
    `SELECT (SELECT count(*) FROM readings_by_device WHERE device_seq = ? AND time >= ?)
      + (SELECT count(*) FROM readings_inbox WHERE device_seq = ? AND time >= ?) AS n`,
  );
  // An account's readings since T (migration 4): whole minutes from reading_counts, and the
  // partial first minute [T, next minute) from the readings themselves.
  const countMinutesOfAccount = db.prepare<[number, number], { n: number }>(
    'SELECT coalesce(sum(n), 0) AS n FROM reading_counts WHERE account_seq = ? AND minute >= ?',
  );
  const countRangeOfAccount = db.prepare<[number, number, number, number, number, number], { n: number }>(
    `SELECT (SELECT count(*) FROM devices d JOIN readings_by_device r ON r.device_seq = d.seq AND r.time >= ? AND r.time < ? WHERE d.account_seq = ?)
      + (SELECT count(*) FROM readings_inbox r JOIN devices d ON d.seq = r.device_seq WHERE r.time >= ? AND r.time < ? AND d.account_seq = ?) AS n`,
  );
  // Oldest first, by primary key (device_seq, time, seq); callers merge the inbox first, so
  // the reading_counts trigger on readings_by_device sees every deletion.
  const deleteBatchOfDevice = db.prepare<[number, number]>(
    'DELETE FROM readings_by_device WHERE (device_seq, time, seq) IN (SELECT device_seq, time, seq FROM readings_by_device WHERE device_seq = ? ORDER BY time, seq LIMIT ?)',
  );
  const deleteOlderBatch = db.prepare<[number, number, number]>(
    'DELETE FROM readings_by_device WHERE (device_seq, time, seq) IN (SELECT device_seq, time, seq FROM readings_by_device WHERE device_seq = ? AND time < ? ORDER BY time, seq LIMIT ?)',
  );

  // reading_counts (migration 4) takes one upsert per account and minute of a batch: usually
  // one, from the account the pipeline already holds, rather than one json_each statement
  // over per-device counts joined to devices (BENCHMARKS.md, "Design decisions").
  const countInserted = db.prepare<[number, number, number]>(
    'INSERT INTO reading_counts (account_seq, minute, n) VALUES (?, ?, ?) ON CONFLICT (account_seq, minute) DO UPDATE SET n = n + excluded.n',
  );
  // Keeps the newest reading's time in the row before retention deletes readings, so
  // last_seen survives the deletion of every reading (the devices repository falls back to it).
  // A device that never sent one keeps NULL ("never"), not 0.
  const archiveLastSeen = db.prepare<[number]>(`UPDATE devices SET last_seen = nullif(max(coalesce(last_seen, 0),
    coalesce((SELECT max(time) FROM readings_by_device WHERE device_seq = devices.seq), 0),
    coalesce((SELECT max(time) FROM readings_inbox WHERE device_seq = devices.seq), 0)), 0) WHERE seq = ?`);
  const accountOfDevice = db.prepare<[number], number>('SELECT account_seq FROM devices WHERE seq = ?').pluck();
  // Of a JSON array of device seqs, those with no row in devices: one statement per batch, a
  // primary-key probe per distinct device.
  const missingDevices = db
    .prepare<[string], number>('SELECT j.value FROM json_each(?) j WHERE NOT EXISTS (SELECT 1 FROM devices d WHERE d.seq = j.value)')
    .pluck();

  /**
   * One transaction for a whole batch (group commit); returns the new seqs in order. The
   * seqs come from the block this connection reserved (takeSeqs), and the usage counts
   * (migration 4) take one statement for the batch, aggregated here per device and minute:
   * the only place readings are inserted, so they stay exact.
   *
   * Where the batch goes: a batch with several readings per device on average (a few busy
   * devices, e.g. MQTT publishers) writes each device's tail page once for many readings, so
   * it goes straight into the clustered table; a batch spread over many devices goes to the
   * inbox (migration 5). Copying through the inbox costs about a quarter of a page rewritten
   * in the clustered table: straight in when devices ≤ readings / 4.
   *
   * Readings of a device deleted since the pipeline accepted them (they wait in the writer's
   * queue for up to one event-loop pass, while the dashboard or the admin CLI deletes the
   * device) are left out, checked inside this transaction, which holds the write lock: there
   * is no foreign key, so they would otherwise stay behind the deleted device for good,
   * never expired and counted in its account's usage. Their seqs come back null: the writer
   * refuses them. The check runs only within a second of a change (deviceCheckWindow) to the devices or
   * accounts tables, by this process (seen at once) or another (data_version, read here):
   * otherwise no device of the batch can be gone, and the batch saves a statement.
   */
  let onCommitted: (batch: readonly PendingReading[]) => void = () => {};
  const mustCheckDevices = deviceCheckWindow();
  const NONE_GONE: ReadonlySet<number> = new Set();
  const goneDevices = (devices: Set<number>): ReadonlySet<number> =>
    mustCheckDevices(deviceTables.current(true)) ? new Set(missingDevices.all(JSON.stringify([...devices]))) : NONE_GONE;
  const insertBatch = db.transaction((accepted: PendingReading[]): { seqs: (number | null)[]; stored: PendingReading[] } => {
    if (accepted.length === 0) return { seqs: [], stored: accepted };
    let devices = new Set<number>();
    for (let i = 0; i < accepted.length; i++) devices.add(accepted[i]!.deviceSeq);
    const gone = goneDevices(devices);
    const batch = gone.size === 0 ? accepted : accepted.filter((r) => !gone.has(r.deviceSeq));
    if (gone.size > 0) devices = new Set([...devices].filter((seq) => !gone.has(seq)));
    if (batch.length === 0) return { seqs: accepted.map(() => null), stored: batch };
    const first = takeSeqs(batch.length);
    const seqs = new Array<number>(batch.length);
    // minute → account → readings, for reading_counts.
    const perMinute = new Map<number, Map<number, number>>();
    const toInbox = devices.size * DIRECT_READINGS_PER_DEVICE > batch.length;
    const insert = toInbox ? insertInbox : insertByDevice;
    // A reading older than what the rollups already cover (a clock set back, a load of past
    // readings) marks its hour for recomputation in this same transaction (rollups repository).
    const late = rollups.lateBefore();
    const order = toInbox ? null : byDevice(batch);
    let next = 0;
    for (const { rows, statement, params } of insert) {
      for (; batch.length - next >= rows; next += rows) {
        for (let j = 0; j < rows; j++) {
          const i = order === null ? next + j : order[next + j]!;
          const r = batch[i]!;
          params[4 * j] = r.deviceSeq;
          params[4 * j + 1] = r.time;
          params[4 * j + 2] = first + i;
          params[4 * j + 3] = r.data;
        }
        statement.run(params);
      }
    }
    for (let i = 0; i < batch.length; i++) {
      const r = batch[i]!;
      const seq = first + i;
      seqs[i] = seq;
      if (r.time < late) rollups.markDirty(r.deviceSeq, r.time);
      const minute = Math.floor(r.time / MINUTE_MS);
      const accountSeq = r.accountSeq ?? accountOfDevice.get(r.deviceSeq);
      // A device deleted meanwhile has no account: its reading is not counted.
      if (accountSeq === undefined) continue;
      let perAccount = perMinute.get(minute);
      if (!perAccount) {
        perAccount = new Map();
        perMinute.set(minute, perAccount);
      }
      perAccount.set(accountSeq, (perAccount.get(accountSeq) ?? 0) + 1);
    }
    for (const [minute, perAccount] of perMinute) for (const [accountSeq, n] of perAccount) countInserted.run(accountSeq, minute, n);
    if (toInbox) inboxRows += batch.length;
    if (gone.size === 0) return { seqs, stored: batch };
    let kept = 0;
    return { seqs: accepted.map((r) => (gone.has(r.deviceSeq) ? null : seqs[kept++]!)), stored: batch };
  });

  // The inbox is merged first, inside the same transaction, so the reading_counts trigger on
  // readings_by_device sees every deletion.
  const deleteBatchOfDeviceTx = db.transaction((deviceSeq: number, batch: number): number => {
    mergeInbox();
    return deleteBatchOfDevice.run(deviceSeq, batch).changes;
  });
  const deleteAllOfDevice = db.prepare<[number]>('DELETE FROM readings_by_device WHERE device_seq = ?');
  const deleteRestOfDevice = db.transaction((deviceSeq: number): number => {
    mergeInbox();
    return deleteAllOfDevice.run(deviceSeq).changes;
  });
  const deleteOlderBatchTx = db.transaction((deviceSeq: number, before: number, batch: number): number => {
    mergeInbox();
    return deleteOlderBatch.run(deviceSeq, before, batch).changes;
  });
  // One retention batch (the interface's expireBatch): rollups of the deleted readings go in
  // the same transaction; the hour the cutoff cuts into is recomputed from the readings left in it.
  const expireBatch = db.transaction((deviceSeq: number, cutoff: number, batchSize: number, levels: number): number => {
    archiveLastSeen.run(deviceSeq);
    const n = deleteOlderBatchTx(deviceSeq, cutoff, batchSize);
    if (n > 0) rollups.deleteBefore(deviceSeq, cutoff, levels);
    return n;
  });

  return {
    /**
     * Commits a batch; then hands what it stored to the commit observer, whoever wrote it.
     * The seqs in the batch's order, null for a reading of a device that no longer exists.
     */
    insertBatch(batch: PendingReading[]): (number | null)[] {
      let inserted: { seqs: (number | null)[]; stored: PendingReading[] };
      try {
        inserted = insertBatch.immediate(batch);
      } catch (err) {
        // The block may have been reserved in the transaction that rolled back.
        reservedUpTo = 0;
        nextSeq = 1;
        throw err;
      }
      if (inserted.stored.length > 0) onCommitted(inserted.stored);
      return inserted.seqs;
    },
    /** Called with every batch right after it commits (the rollups' live minute figures); one observer. */
    observeCommits(observer: (batch: readonly PendingReading[]) => void): void {
      onCommitted = observer;
    },
    mergeInbox: (): number => mergeInbox.immediate(),
    /** Readings in the inbox, as counted at open and by this connection since. */
    inboxRows: (): number => inboxRows,
    /**
     * The newest reading in [since, before) whose JSON text `matches`, looking at about
     * `maxRows` rows at most (newest first; the rows of the last millisecond looked at are
     * all seen, so a search always moves on). `time` is that reading's time; null with
     * `before` null: no reading matches; null with a `before`: the budget ran out, and
     * [since, before) is what is left to search.
     */
    newestMatchingTime(
      deviceSeq: number,
      since: number,
      before: number,
      matches: (data: string) => boolean,
      maxRows: number,
    ): { time: number | null; before: number | null; scanned: number } {
      let scanned = 0;
      let last = before;
      const rows = newestFirstBetween.iterate(deviceSeq, since, before, deviceSeq, since, before) as IterableIterator<[number, string]>;
      for (const [time, data] of rows) {
        // Every row of [last, before) has been looked at.
        if (scanned >= maxRows && time < last) return { time: null, before: last, scanned };
        last = time;
        scanned++;
        if (matches(data)) return { time, before: null, scanned };
      }
      return { time: null, before: null, scanned };
    },
    latest(deviceSeq: number) {
      const stored = latestStored.get(deviceSeq);
      const recent = latestInbox.get(deviceSeq);
      const r = recent && (!stored || isNewer(recent.time, recent.seq, stored.time, stored.seq)) ? recent : stored;
      return r ? toReading(r) : null;
    },
    history: (deviceSeq: number, since: number, limit: number): StoredReading[] =>
      newestFirst(historyInbox.all(deviceSeq, since, limit), historyStored.all(deviceSeq, since, limit), limit).map((r) => ({
        seq: r[0],
        deviceSeq,
        time: r[1],
        data: r[2],
      })),
    iterateRange: function* (deviceSeq: number, since: number, until: number) {
      for (const r of rangeAsc.iterate(deviceSeq, since, until, deviceSeq, since, until)) yield toReading(r);
    },
    /** Readings of an account's devices with time >= since (usage's data_points_24h). */
    countSinceForAccount(accountSeq: number, since: number): number {
      const firstWholeMinute = Math.ceil(since / MINUTE_MS);
      const edgeEnd = firstWholeMinute * MINUTE_MS;
      const edge = countRangeOfAccount.get(since, edgeEnd, accountSeq, since, edgeEnd, accountSeq)!.n;
      return edge + countMinutesOfAccount.get(accountSeq, firstWholeMinute)!.n;
    },
    /** Recomputes tables derived from readings, after a bulk load that bypassed triggers. */
    rebuildDerived: () => db.exec(REBUILD_READING_COUNTS),
    countSince: (deviceSeqs: number[], since: number) =>
      deviceSeqs.reduce((sum, seq) => sum + countSince.get(seq, since, seq, since)!.n, 0),
    /**
     * Deletes every reading of a device still there, inside the caller's transaction (the
     * removal of the device's row: devices repository); returns how many went.
     */
    deleteRestOfDevice: (deviceSeq: number): number => deleteRestOfDevice(deviceSeq),
    /** Deletes up to `batch` readings of a device, oldest first; returns how many went (0 when done). */
    deleteBatchOfDevice: (deviceSeq: number, batch: number): number => deleteBatchOfDeviceTx.immediate(deviceSeq, batch),
    /** Deletes up to `batch` readings of a device older than `before`, oldest first; returns how many went. */
    deleteOlderBatch: (deviceSeq: number, before: number, batch: number): number => deleteOlderBatchTx.immediate(deviceSeq, before, batch),
    expireBatch: (deviceSeq: number, cutoff: number, batchSize: number, levels: number): number =>
      expireBatch.immediate(deviceSeq, cutoff, batchSize, levels),
  };
}

export type ReadingsRepo = ReturnType<typeof readingsRepo>;

// The row and its mapping, shared with the PostgreSQL repository (postgres/repos/readings.ts) so both backends
// hand the domain the same objects.
export { type ReadingRow, toReading };

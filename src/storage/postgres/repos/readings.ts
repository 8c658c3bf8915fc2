import type { Pool } from 'pg';
import type { StoredReading } from '../../../domain/types.js';
import { DAY_MS, HOUR_MS, MINUTE_MS } from '../../../time.js';
import { type ReadingRow, toReading } from '../../repos/readings.js';
import type { PendingReading, ReadingsRepository } from '../../repositories.js';
import type { AuthCache } from '../authCache.js';
import { archiveDeviceLastSeen } from './devices.js';
import { deleteMarksInOrder, deleteRollupsBefore } from './rollups.js';
import { inTransaction, prepared } from './sql.js';

/** Rows per round trip where a read walks a range of unknown length (exports, silence checks). */
const PAGE_ROWS = 1_000;
const WEEK_MS = 7 * DAY_MS;
/** The lock reading_partitions takes (migrations.ts): creating and dropping a week never overlap. */
const PARTITIONS_LOCK = 0x746c6d70;
/** How long a partition's DROP waits for the readings table before it gives up (dropExpiredPartitions). */
const DROP_LOCK_TIMEOUT_MS = 1_000;
/** SQLSTATE of a lock_timeout. */
const LOCK_NOT_AVAILABLE = '55P03';

// Every read names the device and, where it has one, a time range: the primary key
// (device_seq, time, seq) of each weekly partition answers it, and a range opens only the
// partitions it covers. A keyed page states its time bound on its own besides the row
// comparison: partition pruning does not look into (time, seq) > (…), and without it every
// partition would be opened.
const latest = prepared<ReadingRow>(
  'readings-latest',
  'SELECT seq, device_seq, time, data FROM readings WHERE device_seq = $1 ORDER BY time DESC, seq DESC LIMIT 1',
);
// History comes back as one text, 'seq,time,data' per reading joined by U+001E (which JSON
// text cannot hold raw, as in the writer's batches): one value to decode instead of a row
// message and three fields per reading, which for a page of 1,000 readings cost node-pg more
// than the query cost PostgreSQL, and left garbage that showed in the tail latency.
const history = prepared<{ text: string | null }>(
  'readings-history',
  `SELECT string_agg(seq || ',' || time || ',' || data, chr(30) ORDER BY time DESC, seq DESC) AS text FROM (
     SELECT seq, time, data FROM readings WHERE device_seq = $1 AND time >= $2 ORDER BY time DESC, seq DESC LIMIT $3
   ) newest`,
);
const newestFirstFrom = prepared(
  'readings-newest-first',
  'SELECT time, seq, data FROM readings WHERE device_seq = $1 AND time >= $2 AND time < $3 ORDER BY time DESC, seq DESC LIMIT $4',
);
const newestFirstAfter = prepared(
  'readings-newest-first-after',
  `SELECT time, seq, data FROM readings WHERE device_seq = $1 AND time >= $2 AND time <= $3 AND (time, seq) < ($3, $4)
   ORDER BY time DESC, seq DESC LIMIT $5`,
);
const rangeFrom = prepared<ReadingRow>(
  'readings-range',
  'SELECT seq, device_seq, time, data FROM readings WHERE device_seq = $1 AND time >= $2 AND time < $3 ORDER BY time, seq LIMIT $4',
);
const rangeAfter = prepared<ReadingRow>(
  'readings-range-after',
  `SELECT seq, device_seq, time, data FROM readings WHERE device_seq = $1 AND time >= $2 AND (time, seq) > ($2, $3) AND time < $4
   ORDER BY time, seq LIMIT $5`,
);
// An account's readings since T: whole minutes from reading_counts and the counts appended
// since the last fold (foldUsageCounts), the partial first minute [T, next minute) from the
// readings themselves (as on SQLite).
const countMinutesOfAccount = prepared<{ n: number }>(
  'readings-count-minutes',
  `SELECT coalesce(sum(n), 0)::bigint AS n FROM (
     SELECT n FROM reading_counts WHERE account_seq = $1 AND minute >= $2
     UNION ALL
     SELECT n FROM reading_count_deltas WHERE account_seq = $1 AND minute >= $2
   ) c`,
);
// Moves every committed delta into reading_counts in one statement, so no count is ever in
// both tables or in neither; deltas of batches still in flight are not visible to it and stay
// for the next fold. Gives back the keys whose count fell to zero (every reading of that
// minute deleted), paired by the same order in both arrays, deleted next.
const foldDeltas = prepared<{ deltas: number; emptied_accounts: unknown[]; emptied_minutes: unknown[] }>(
  'reading-counts-fold',
  `WITH gone AS (
     DELETE FROM reading_count_deltas RETURNING account_seq, minute, n
   ), folded AS (
     INSERT INTO reading_counts (account_seq, minute, n)
     SELECT account_seq, minute, sum(n) FROM gone GROUP BY 1, 2 HAVING sum(n) <> 0
     ON CONFLICT (account_seq, minute) DO UPDATE SET n = reading_counts.n + excluded.n
     RETURNING account_seq, minute, n
   )
   SELECT (SELECT count(*) FROM gone)::int AS deltas,
     coalesce((SELECT array_agg(account_seq ORDER BY account_seq, minute) FROM folded WHERE n <= 0), '{}') AS emptied_accounts,
     coalesce((SELECT array_agg(minute ORDER BY account_seq, minute) FROM folded WHERE n <= 0), '{}') AS emptied_minutes`,
);
// A row updated by a statement cannot be deleted by the same one: the emptied minutes go in
// a second statement of the fold's transaction.
const deleteEmptiedCounts = prepared(
  'reading-counts-delete-emptied',
  `DELETE FROM reading_counts c USING unnest($1::bigint[], $2::bigint[]) AS e(account_seq, minute)
   WHERE c.account_seq = e.account_seq AND c.minute = e.minute AND c.n <= 0`,
);
const countRangeOfAccount = prepared<{ n: number }>(
  'readings-count-range-of-account',
  `SELECT count(*) AS n FROM devices d JOIN readings r ON r.device_seq = d.seq AND r.time >= $2 AND r.time < $3
   WHERE d.account_seq = $1`,
);
// Oldest first, by primary key, at most $n rows a statement: retention and device deletion
// go in short transactions. The usage-count trigger sees every deleted row.
const deleteBatchOfDevice = prepared(
  'readings-delete-batch',
  `DELETE FROM readings WHERE (device_seq, time, seq) IN
     (SELECT device_seq, time, seq FROM readings WHERE device_seq = $1 ORDER BY time, seq LIMIT $2)`,
);
const deleteOlderBatch = prepared(
  'readings-delete-older-batch',
  `DELETE FROM readings WHERE (device_seq, time, seq) IN
     (SELECT device_seq, time, seq FROM readings WHERE device_seq = $1 AND time < $2 ORDER BY time, seq LIMIT $3)`,
);
const longestRetention = prepared<{ days: number | null }>(
  'accounts-longest-retention',
  'SELECT max(retention_days) AS days FROM accounts',
);
const partitions = prepared<{ name: string }>(
  'readings-partitions',
  `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
   WHERE i.inhparent = 'readings'::regclass ORDER BY 1`,
);

/** First time of a weekly partition named readings_YYYYMMDD (migrations.ts), or null for another name. */
function partitionStart(name: string): number | null {
  const m = /^readings_(\d{4})(\d{2})(\d{2})$/.exec(name);
  return m ? Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3])) : null;
}

/** What only the PostgreSQL backend's readings have: retention's drop of whole weeks and sweep of removed devices, the usage counts' fold, the commit hook. */
export interface PostgresReadingsExtras {
  dropExpiredPartitions(now: number, levels: number): Promise<string[]>;
  sweepRemovedDevices(): Promise<number>;
  foldUsageCounts(): Promise<number>;
  /** What the PostgresReadingWriter calls after each commit: hands the batch to the commit observer. */
  committed(batch: readonly PendingReading[]): void;
}

/**
 * Readings on PostgreSQL (ReadingsRepository, src/storage/repositories.ts): one
 * range-partitioned table (migrations.ts), written by the PostgresReadingWriter only; this
 * repository reads and deletes. There is no inbox, so nothing to merge. Besides the
 * interface: dropExpiredPartitions and foldUsageCounts.
 */
export function postgresReadingsRepo(pool: Pool, cache: AuthCache): ReadingsRepository & PostgresReadingsExtras {
  let onCommitted: (batch: readonly PendingReading[]) => void = () => {};
  return {
    observeCommits(observer) {
      onCommitted = observer;
    },
    committed: (batch) => onCommitted(batch),
    /**
     * The newest reading in [since, before) whose JSON text `matches`, looking at about
     * `maxRows` rows at most (newest first; the rows of the last millisecond looked at are
     * all seen, so a search always moves on). `time` is that reading's time; null with
     * `before` null: no reading matches; null with a `before`: the budget ran out, and
     * [since, before) is what is left to search. Read in pages, keyed on (time, seq).
     */
    async newestMatchingTime(
      deviceSeq: number,
      since: number,
      before: number,
      matches: (data: string) => boolean,
      maxRows: number,
    ): Promise<{ time: number | null; before: number | null; scanned: number }> {
      let scanned = 0;
      let last = before;
      const pageRows = Math.min(maxRows + 1, PAGE_ROWS);
      let rows = await newestFirstFrom.arrays<[number, number, string]>(pool, [deviceSeq, since, before, pageRows]);
      for (;;) {
        for (const [time, , data] of rows) {
          // Every row of [last, before) has been looked at.
          if (scanned >= maxRows && time < last) return { time: null, before: last, scanned };
          last = time;
          scanned++;
          if (matches(data)) return { time, before: null, scanned };
        }
        if (rows.length < pageRows) return { time: null, before: null, scanned };
        const [time, seq] = rows[rows.length - 1]!;
        rows = await newestFirstAfter.arrays<[number, number, string]>(pool, [deviceSeq, since, time, seq, pageRows]);
      }
    },
    async latest(deviceSeq: number): Promise<StoredReading | null> {
      const r = await latest.first(pool, [deviceSeq]);
      return r ? toReading(r) : null;
    },
    async history(deviceSeq: number, since: number, limit: number): Promise<StoredReading[]> {
      const text = (await history.first(pool, [deviceSeq, since, limit]))?.text;
      if (!text) return [];
      return text.split('\x1e').map((item) => {
        const afterSeq = item.indexOf(',');
        const afterTime = item.indexOf(',', afterSeq + 1);
        return {
          seq: Number(item.slice(0, afterSeq)),
          deviceSeq,
          time: Number(item.slice(afterSeq + 1, afterTime)),
          data: item.slice(afterTime + 1),
        };
      });
    },
    /** Oldest first, for exports that stream a whole range: pages of PAGE_ROWS, keyed on (time, seq). */
    iterateRange: async function* (deviceSeq: number, since: number, until: number): AsyncGenerator<StoredReading> {
      let rows = await rangeFrom.rows(pool, [deviceSeq, since, until, PAGE_ROWS]);
      for (;;) {
        for (const r of rows) yield toReading(r);
        if (rows.length < PAGE_ROWS) return;
        const last = rows[rows.length - 1]!;
        rows = await rangeAfter.rows(pool, [deviceSeq, last.time, last.seq, until, PAGE_ROWS]);
      }
    },
    /** Readings of an account's devices with time >= since (usage's data_points_24h). */
    async countSinceForAccount(accountSeq: number, since: number): Promise<number> {
      const firstWholeMinute = Math.ceil(since / MINUTE_MS);
      const [edge, minutes] = await Promise.all([
        countRangeOfAccount.first(pool, [accountSeq, since, firstWholeMinute * MINUTE_MS]),
        countMinutesOfAccount.first(pool, [accountSeq, firstWholeMinute]),
      ]);
      return edge!.n + minutes!.n;
    },
    /**
     * Folds the usage counts appended per batch (reading_count_deltas, migration 9) into
     * reading_counts, so the deltas stay a few seconds' worth: the leading node's job, every
     * second. It holds the partitions' advisory lock, so folds run one at a time (two nodes
     * that both believe they lead, for a moment) and never beside a partition being created
     * or dropped, whose drop deletes the counts of its week from both tables; when the lock
     * is taken it skips a turn (0). Returns how many delta rows it folded.
     */
    foldUsageCounts: (): Promise<number> =>
      inTransaction(pool, async (client) => {
        const locked = (await client.query('SELECT pg_try_advisory_xact_lock($1) AS ok', [PARTITIONS_LOCK])).rows[0].ok;
        if (!locked) return 0;
        const { deltas, emptied_accounts: accounts, emptied_minutes: minutes } = (await foldDeltas.first(client, []))!;
        if (accounts.length > 0) await deleteEmptiedCounts.run(client, [accounts, minutes]);
        return deltas;
      }),
    /** Deletes up to `batch` readings of a device, oldest first; returns how many went (0 when done). */
    deleteBatchOfDevice: (deviceSeq: number, batch: number): Promise<number> => deleteBatchOfDevice.run(pool, [deviceSeq, batch]),
    /**
     * One retention step of a device, in one transaction: archive its last_seen, delete up to
     * `batch` of its readings older than `cutoff`, and if any went, their rollups (of
     * `levels` levels), marking the hour the cutoff cuts into for recomputation. Returns how
     * many readings went (0: the device is done).
     */
    expireBatch: (deviceSeq: number, cutoff: number, batch: number, levels: number): Promise<number> =>
      cache.writing(
        inTransaction(pool, async (client) => {
          await archiveDeviceLastSeen(client, deviceSeq);
          const n = await deleteOlderBatch.run(client, [deviceSeq, cutoff, batch]);
          if (n > 0) await deleteRollupsBefore(client, deviceSeq, cutoff, levels);
          return n;
        }),
      ),
    /**
     * Drops the weekly partitions whose every reading is past every account's retention at
     * `now` (the partition ends at or before now minus the longest retention): a drop frees a
     * week of readings without deleting them row by row. Each partition goes in a transaction
     * of its own that takes the lock reading_partitions takes (a writer recreating an old week
     * waits for the drop), archives the last_seen of the devices it holds readings of, deletes
     * the usage counts of the minutes it covers (no trigger sees a dropped partition) and
     * drops it; a second transaction then deletes the dirty marks and the rollups (of `levels`
     * levels) before the week's end. What is left past each account's own retention is
     * deleted by statement (expireBatch).
     *
     * DROP TABLE of a partition locks the whole readings table (ACCESS EXCLUSIVE), and while
     * it waits for that lock, every statement on readings queues behind it: ingest would
     * stall as long as the longest query in progress. So the drop gives up after
     * DROP_LOCK_TIMEOUT_MS, rolls its transaction back and leaves the remaining weeks to the
     * next pass (expireBatch deletes their rows meanwhile, if their retention asks for it).
     *
     * The marks are not deleted in the drop's transaction: every batch of readings holds the
     * readings table (ROW EXCLUSIVE, from the start of its statement) when it writes a late
     * reading's mark, so a drop holding that mark while it waits for the table would wait for
     * the batch that waits for it, and PostgreSQL would end the batch as a deadlock (a 503).
     * The drop holds nothing a batch waits for; the marks and rollups go after it, marks
     * first, as a settle takes them (rollups.ts, deleteRollupsBefore). Both deletions take
     * everything before the week's end, so what a pass stopped between the two left behind
     * goes with the next week dropped.
     */
    async dropExpiredPartitions(now: number, levels: number): Promise<string[]> {
      const days = (await longestRetention.first(pool, []))!.days;
      const dropped: string[] = [];
      if (days === null) return dropped;
      const boundary = now - days * DAY_MS;
      for (const { name } of await partitions.rows(pool, [])) {
        const start = partitionStart(name);
        if (start === null || start + WEEK_MS > boundary) continue;
        const end = start + WEEK_MS;
        const gone = await cache
          .writing(
            inTransaction(pool, async (client) => {
              await client.query('SELECT pg_advisory_xact_lock($1)', [PARTITIONS_LOCK]);
              if ((await client.query('SELECT to_regclass($1) AS t', [name])).rows[0].t === null) return false;
              const table = client.escapeIdentifier(name);
              // One probe of the partition's primary key per device, not a scan of the week.
              await client.query(
                `UPDATE devices d SET last_seen = m.newest
               FROM (SELECT x.seq, (SELECT max(r.time) FROM ${table} r WHERE r.device_seq = x.seq) AS newest FROM devices x) m
               WHERE d.seq = m.seq AND m.newest IS NOT NULL AND m.newest > coalesce(d.last_seen, 0)`,
              );
              for (const counts of ['reading_counts', 'reading_count_deltas'])
                await client.query(`DELETE FROM ${counts} WHERE minute >= $1 AND minute < $2`, [start / MINUTE_MS, end / MINUTE_MS]);
              await client.query(`SET LOCAL lock_timeout = ${DROP_LOCK_TIMEOUT_MS}`);
              await client.query(`DROP TABLE ${table}`);
              return true;
            }),
          )
          .catch((err: unknown) => {
            if ((err as { code?: string }).code === LOCK_NOT_AVAILABLE) return null;
            throw err;
          });
        if (gone === null) break;
        if (!gone) continue;
        await inTransaction(pool, async (client) => {
          await client.query(deleteMarksInOrder('hour < $1'), [end - HOUR_MS + 1]);
          await client.query('DELETE FROM rollups WHERE level < $1 AND bucket >= 0 AND bucket < $2', [levels, end]);
        });
        dropped.push(name);
      }
      return dropped;
    },
    /**
     * Deletes again what a device deleted in the last day may have been given after its
     * deletion (migration 12): readings committed by a batch that was already on its way, with
     * their usage counts (the deletion trigger finds no device to count them against, so the
     * tombstone's account is used), the dirty marks and rollups the rollup pass made of them.
     * Marks before rollups, as everywhere. Then forgets the devices deleted over a day ago.
     * Returns the readings deleted.
     */
    sweepRemovedDevices: (): Promise<number> =>
      inTransaction(pool, async (client) => {
        const removed = (await client.query('SELECT device_seq AS seq FROM removed_devices ORDER BY 1')).rows.map((r) => r.seq);
        if (removed.length === 0) return 0;
        const deleted = await client.query<{ n: string }>(
          `WITH gone AS (
             DELETE FROM readings r USING removed_devices t WHERE r.device_seq = t.device_seq RETURNING t.account_seq, r.time
           ), counted AS (
             INSERT INTO reading_count_deltas (account_seq, minute, n) SELECT account_seq, time / 60000, -count(*) FROM gone GROUP BY 1, 2
           )
           SELECT count(*) AS n FROM gone`,
        );
        await client.query(deleteMarksInOrder('device_seq = ANY($1::bigint[])'), [removed]);
        await client.query('DELETE FROM rollups WHERE device_seq = ANY($1::bigint[])', [removed]);
        await client.query("DELETE FROM removed_devices WHERE removed_at < now() - interval '1 day'");
        return Number(deleted.rows[0]!.n);
      }),
  };
}

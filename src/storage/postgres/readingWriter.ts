import type { Pool } from 'pg';
import { STORAGE_RETRY_AFTER_SECONDS } from '../../domain/storageStatus.js';
import { storageUnavailable, unauthorized } from '../../errors.js';
import { deviceCheckWindow } from '../readCache.js';
import type { CommitObserver } from '../readingWriter.js';
import type { PendingReading } from '../repositories.js';
import { type DatabaseUrl, describeDatabaseError, isConnectionError, parseDatabaseUrl, poolNode } from './connect.js';
import { partitionWeek, READING_ID_BLOCK, READINGS_CHANNEL, readingPartitions } from './migrations.js';

interface Waiting extends PendingReading {
  resolve: (seq: number) => void;
  reject: (err: unknown) => void;
}

/**
 * One statement per batch, so one transaction (autocommit) and one round trip: the batch
 * comes as three arrays and the readings' JSON texts joined by DATA_SEPARATOR, takes one
 * block of ids from reading_seq (migration 6) and numbers its readings from it in arrival
 * order, so its ids are one range, lands in readings,
 * and appends its usage counts per account and UTC minute to reading_count_deltas (migration
 * 9: appended, not upserted into reading_counts, so batches in flight together never wait on
 * one row; the account looked up where the caller did not have it, by a subquery evaluated
 * for those rows only: a join with devices was planned as a hash of the whole table per
 * batch; a device deleted meanwhile is not counted). A reading older than $5
 * (the rollups' lateBefore: its minute may already be rolled up) marks its hour dirty in the
 * same statement, so an acknowledged late reading is never missed by the rollups; with
 * readings stamped now, that CTE inserts nothing. An hour already marked gets its mark
 * rewritten, not left alone: the rewrite holds the row until commit, so a settle of that
 * hour (rollups.settleHour deletes the mark, then counts the readings) waits for this batch
 * and counts its reading, where DO NOTHING would let it clear the mark and miss the reading.
 * Marks are written in (device, hour) order, so two batches of late readings wait for each
 * other, never deadlock. The mark is the later of $5 (this process's)
 * and rollup_late's (the node running the rollup pass moves it), whose row the statement
 * holds FOR SHARE until it commits: the pass's move waits for the batches in flight, so a
 * reading either commits before the pass reads its minute or sees the moved mark. One row
 * comes back, with the block's first id: the reading at ordinal k has id first + k - 1.
 *
 * With $6 (this node's name and what the writer knows of the batch) the same statement sends
 * one notification on READINGS_CHANNEL, delivered at commit, for other nodes' live views:
 * one per batch, never per reading, and no round trip of its own.
 *
 * With $9, readings of a device deleted since the pipeline accepted them (queued while the
 * dashboard or the admin CLI deleted it) are left out (alive): readings have no foreign key,
 * so they would stay behind the device, counted in its account's usage until their week's
 * partition is dropped. The ordinals kept come back; the writer refuses the others. The
 * check costs about 70 µs of PostgreSQL CPU per 13-reading batch, so the writer asks for it
 * only within a second of a change (deviceCheckWindow) to devices or accounts it has heard
 * of; without $9 the CTE is never read. Not seen: a removal committing while this statement
 * runs, or one by another process whose notification has not arrived yet; a reading may
 * then land behind it, which retention deletes at its next pass (repos/readings.ts,
 * sweepRemovedDevices) rather than every batch paying for row locks.
 */
const INSERT_BATCH = `
  WITH block AS MATERIALIZED (
    SELECT nextval('reading_seq') AS first
  ), alive AS MATERIALIZED (
    SELECT seq FROM devices WHERE seq = ANY($1::bigint[])
  ), batch AS MATERIALIZED (
    SELECT block.first + u.ord - 1 AS seq, u.device_seq, u.time, u.data, u.account_seq, u.ord
    FROM block, unnest($1::bigint[], $2::bigint[], string_to_array($3::text, chr(30)), $4::bigint[]) WITH ORDINALITY AS u(device_seq, time, data, account_seq, ord)
    WHERE NOT $9::boolean OR u.device_seq IN (SELECT seq FROM alive)
  ), inserted AS (
    INSERT INTO readings (device_seq, time, seq, data) SELECT device_seq, time, seq, data FROM batch
  ), counted AS (
    INSERT INTO reading_count_deltas (account_seq, minute, n)
    SELECT a.account_seq, a.minute, count(*)
    FROM (
      SELECT coalesce(b.account_seq, (SELECT d.account_seq FROM devices d WHERE d.seq = b.device_seq)) AS account_seq, b.time / 60000 AS minute
      FROM batch b
    ) a
    WHERE a.account_seq IS NOT NULL
    GROUP BY 1, 2
  ), mark AS (
    SELECT greatest(late_before, coalesce($5::bigint, 0)) AS late_before FROM rollup_late FOR SHARE
  ), late AS (
    INSERT INTO rollup_dirty (device_seq, hour)
    SELECT DISTINCT device_seq, time - ((time % 3600000) + 3600000) % 3600000 FROM batch, mark WHERE time < mark.late_before
    ORDER BY 1, 2
    ON CONFLICT (device_seq, hour) DO UPDATE SET hour = excluded.hour
  )
  SELECT (SELECT first FROM block) AS first,
    CASE WHEN $9::boolean THEN (SELECT string_agg(ord::text, ',' ORDER BY ord) FROM batch) END AS kept,
    CASE WHEN $6::text IS NOT NULL AND EXISTS (SELECT FROM batch) THEN
      pg_notify('${READINGS_CHANNEL}', split_part($6, ' ', 1) || ' ' || $7::bigint || ' ' || $8::bigint || ' '
        || (SELECT min(seq) || ' ' || max(seq) FROM batch) || ' ' || split_part($6, ' ', 2))
    END AS notified`;

/**
 * Between the readings' JSON texts in INSERT_BATCH's $3 (U+001E, chr(30) there). JSON text
 * cannot hold it raw (a control character inside a string must be escaped, and outside one
 * only whitespace may appear), so splitting gives the texts back. One string rather than a
 * text[] parameter, which node-pg escapes element by element and PostgreSQL parses back
 * character by character (BENCHMARKS.md, PostgreSQL). A text that did hold one would shift
 * the rows and fail the statement (NOT NULL), not store anything wrong.
 */
const DATA_SEPARATOR = '\x1e';

/** Devices listed in a batch's notification at most (8,000 bytes per payload); more are sent as '*'. */
const MAX_NOTIFIED_DEVICES = 500;

/** SQLSTATE classes and codes after which the same batch can succeed later. */
const TRANSIENT = /^(53|08)|^(57P0[1-3]|57014|25006|40001|40P01|55P03)$/;

/** No partition for a row's time: one was dropped by another process, or the cache is stale. */
const isMissingPartition = (err: unknown) =>
  (err as { code?: string }).code === '23514' && /no partition of relation/.test((err as Error).message);

/** INSERT_BATCH's one row: the block's first id, the ordinals kept when $9 checked the devices. */
type BatchResult = [first: number, kept: string | null, notified: unknown];

/** Batches a writer has in flight at most: one being committed while the next is sent. */
export const MAX_IN_FLIGHT = 2;

/**
 * Group commit on PostgreSQL, the contract of the SQLite ReadingWriter (src/storage/readingWriter.ts):
 * readings appended in one pass of the event loop go out together as one INSERT_BATCH
 * statement, and each caller's promise settles after that statement's transaction has
 * committed. Up to MAX_IN_FLIGHT statements are in flight at once, so the server parses and
 * answers the next readings while PostgreSQL commits the last; with both slots busy new
 * readings queue and form the next batch, so a slow commit makes batches larger, not more
 * numerous. Batches in flight together may commit in either order (as batches of two nodes
 * do), but each batch's callers are answered after the batch before it (writeBatch).
 *
 * When the database cannot be reached, or cannot take the write now (disk full, a standby
 * after a failover, shutting down), every reading of the batch is rejected with a 503
 * "storage unavailable" AppError: nothing was acknowledged, the device sends again. The pool
 * opens new connections on the next batch, so writes resume by themselves when the database
 * is back. A connection lost in the middle of a COMMIT leaves its outcome unknown: the batch
 * is rejected and may also be stored, so a resend can store a reading twice, but no
 * acknowledged reading is ever missing.
 */
export class PostgresReadingWriter {
  private queue: Waiting[] = [];
  private scheduled = false;
  /** The batches being written. */
  private readonly inFlight = new Set<Promise<void>>();
  /** The last batch sent, settled once its callers are answered: the next one answers after it. */
  private lastSettled: Promise<void> = Promise.resolve();
  private closed = false;
  /** Weeks whose readings partition this writer created or found (migrations, readingPartitions). */
  private readonly weeks = new Set<number>();
  /** Largest batch seen, for /metrics and the benchmark report. */
  maxBatch = 0;
  /** Readings committed by this writer: background jobs back off while it climbs fast. */
  committed = 0;
  /** Batches committed so far: with `committed`, the readings per commit (/metrics). */
  commits = 0;
  private observer: CommitObserver | null = null;
  /** Where the pool connects, for the detail of a failure (never shown to clients). */
  private readonly database: DatabaseUrl;
  /** This process's node name in the batches' notifications; null for a pool not from connectPostgres (none sent). */
  private readonly node: string | null;

  constructor(
    private readonly pool: Pool,
    databaseUrl: string,
    private readonly maxBatchSize = 5_000,
    /** Readings before this time mark their hour for the rollups to recompute (rollups.lateBefore); none without it. */
    private readonly lateBefore: (() => number) | null = null,
    /** Told of each committed batch before its callers are answered (readings.committed: the rollups' live minutes). */
    private readonly onCommitted: ((batch: readonly PendingReading[]) => void) | null = null,
    /**
     * Changes whenever devices or accounts may have changed (the repositories' auth cache):
     * batches check that their devices exist only within a second of a change (deviceCheckWindow); always
     * without it.
     */
    private readonly authTablesGeneration: (() => number) | null = null,
  ) {
    if (maxBatchSize > READING_ID_BLOCK) throw new Error(`a batch takes at most ${READING_ID_BLOCK} reading ids`);
    this.database = parseDatabaseUrl(databaseUrl);
    let node: string | null = null;
    try {
      node = poolNode(pool);
    } catch {
      // a pool of a test or a tool: nobody listens for its batches
    }
    this.node = node;
  }

  /**
   * Where commit outcomes go (the storage status: 503 counted and logged, /healthz degraded
   * until the next commit); set once by the composition.
   */
  reportTo(observer: CommitObserver): void {
    this.observer = observer;
  }

  get depth(): number {
    return this.queue.length;
  }

  private readonly mustCheckDevices = deviceCheckWindow();
  /** Whether the next batch checks that its devices still exist (INSERT_BATCH's $9). */
  private checksDevices(): boolean {
    return this.authTablesGeneration === null || this.mustCheckDevices(this.authTablesGeneration());
  }

  append(reading: PendingReading): Promise<number> {
    if (this.closed) return Promise.reject(new Error('writer is closed'));
    return new Promise<number>((resolve, reject) => {
      this.queue.push({
        deviceSeq: reading.deviceSeq,
        accountSeq: reading.accountSeq,
        time: reading.time,
        data: reading.data,
        parsed: reading.parsed,
        resolve,
        reject,
      });
      this.schedule();
    });
  }

  /** A flush at the end of this event-loop pass, unless one is queued or every slot is busy (a batch's end schedules one). */
  private schedule(): void {
    if (this.scheduled || this.inFlight.size >= MAX_IN_FLIGHT) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.flush();
    });
  }

  /** Sends what is queued as one batch, if a slot is free. */
  private flush(): void {
    if (this.queue.length === 0 || this.inFlight.size >= MAX_IN_FLIGHT) return;
    const batch = this.queue.splice(0, this.maxBatchSize);
    const written = this.writeBatch(batch, this.lastSettled).finally(() => {
      this.inFlight.delete(written);
      // Readings that arrived while the slots were busy, or more than one batch takes.
      if (this.queue.length > 0) this.schedule();
    });
    this.inFlight.add(written);
    this.lastSettled = written;
    if (this.queue.length > 0) this.schedule();
  }

  /**
   * Writes one batch and settles its callers' promises once `previous` (the batch sent before
   * it) has settled its own; never rejects. The two may commit in either order, but callers
   * are answered, and observers told, in arrival order: a device's readings reach the alert
   * evaluation oldest first, as on SQLite, so the first of them to meet a condition is the
   * one that triggers.
   */
  private async writeBatch(batch: Waiting[], previous: Promise<void>): Promise<void> {
    this.maxBatch = Math.max(this.maxBatch, batch.length);
    let seqs: (number | null)[];
    try {
      seqs = await this.write(batch);
    } catch (err) {
      await previous;
      const failure = this.observer ? this.observer.commitFailed(this.failure(err), batch.length) : this.failure(err);
      for (const w of batch) w.reject(failure);
      return;
    }
    await previous;
    if (this.observer && this.observer.commitFailure !== null) this.observer.commitSucceeded();
    this.commits++;
    const stored = seqs.includes(null) ? batch.filter((_, i) => seqs[i] !== null) : batch;
    this.committed += stored.length;
    if (this.onCommitted && stored.length > 0) {
      try {
        this.onCommitted(stored);
      } catch {
        // An observer's bug must not turn committed readings into errors.
      }
    }
    for (let i = 0; i < batch.length; i++) {
      const seq = seqs[i]!;
      // Its device was deleted after the reading was accepted: not stored (INSERT_BATCH).
      if (seq === null) batch[i]!.reject(unauthorized('device no longer exists'));
      else batch[i]!.resolve(seq);
    }
  }

  /** The readings' seqs in the batch's order, null for one whose device no longer exists. */
  private async write(batch: Waiting[]): Promise<(number | null)[]> {
    const n = batch.length;
    const devices = new Array<number>(n);
    const times = new Array<number>(n);
    const data = new Array<string>(n);
    const accounts = new Array<number | null>(n);
    let unknownWeek: number[] | null = null;
    let minTime = Number.POSITIVE_INFINITY;
    let maxTime = Number.NEGATIVE_INFINITY;
    const notified = new Set<number>();
    for (let i = 0; i < n; i++) {
      const r = batch[i]!;
      devices[i] = r.deviceSeq;
      times[i] = r.time;
      if (r.time < minTime) minTime = r.time;
      if (r.time > maxTime) maxTime = r.time;
      if (notified.size <= MAX_NOTIFIED_DEVICES) notified.add(r.deviceSeq);
      data[i] = r.data;
      accounts[i] = r.accountSeq ?? null;
      if (!this.weeks.has(partitionWeek(r.time))) {
        unknownWeek ??= [];
        unknownWeek.push(r.time);
      }
    }
    if (unknownWeek) await this.ensureWeeks(unknownWeek);
    const checkDevices = this.checksDevices();
    const query = {
      name: 'telemetryd-insert-readings',
      text: INSERT_BATCH,
      values: [
        devices,
        times,
        data.join(DATA_SEPARATOR),
        accounts,
        this.lateBefore?.() ?? null,
        this.node === null ? null : `${this.node} ${notified.size > MAX_NOTIFIED_DEVICES ? '*' : [...notified].join(',')}`,
        minTime,
        maxTime,
        checkDevices,
      ],
      rowMode: 'array',
    };
    let rows: BatchResult[];
    try {
      rows = (await this.pool.query<BatchResult>(query)).rows;
    } catch (err) {
      if (!isMissingPartition(err)) throw err;
      this.weeks.clear();
      await this.ensureWeeks(times);
      rows = (await this.pool.query<BatchResult>(query)).rows;
    }
    // The ids are the block's, in the batch's order: one row comes back, not one per reading.
    const [first, kept] = rows[0]!;
    if (!checkDevices) return Array.from({ length: n }, (_, i) => first + i);
    const seqs = new Array<number | null>(n).fill(null);
    if (kept) for (const ord of kept.split(',')) seqs[Number(ord) - 1] = first + Number(ord) - 1;
    return seqs;
  }

  /** Creates the partitions of these times' weeks, and of the week after the newest: ready before it starts. */
  private async ensureWeeks(times: number[]): Promise<void> {
    const weeks = [...new Set(times.map(partitionWeek))];
    const ahead = Math.max(...weeks) + 7 * 24 * 3_600_000;
    await readingPartitions(this.pool, [...weeks, ahead]);
    for (const w of [...weeks, ahead]) this.weeks.add(w);
  }

  /** What a failed batch is rejected with: 503 with Retry-After when it may succeed later, the error itself otherwise. */
  private failure(err: unknown): unknown {
    const code = (err as { code?: string }).code ?? '';
    if (!isConnectionError(err) && !TRANSIENT.test(code)) return err;
    const reason = isConnectionError(err)
      ? 'database unreachable'
      : code === '53100'
        ? 'database disk full'
        : code === '25006'
          ? 'database read-only'
          : 'database busy';
    const failure = storageUnavailable(reason, STORAGE_RETRY_AFTER_SECONDS);
    // The detail (host, port, server message) is for the log, not for the device.
    failure.cause = new Error(describeDatabaseError(err, this.database));
    return failure;
  }

  /** Writes what is queued and refuses anything new (clean shutdown). */
  async close(): Promise<void> {
    this.closed = true;
    for (;;) {
      if (this.queue.length > 0 && this.inFlight.size < MAX_IN_FLIGHT) this.flush();
      else if (this.inFlight.size > 0) await Promise.race(this.inFlight);
      else if (this.scheduled) await new Promise<void>((resolve) => setImmediate(resolve));
      else return;
    }
  }
}

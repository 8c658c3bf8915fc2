/**
 * Whether storage can take a write now, and why not (docs/reliability.md "When the disk
 * fills"). Two causes:
 *
 *  - low disk space: a timer looks at the free space of the data directory's file system
 *    (the database) and of the snapshots directory's (uploads) at most once a second. Below
 *    --min-free-disk new readings and snapshots are refused before they are written, so the
 *    database never runs into a full disk, and taken again by themselves once there is room;
 *    the ingest path only reads a field;
 *  - a write that failed for a storage reason (disk full, I/O error, database busy or
 *    read-only): refused as it happens, and the service stays degraded until a later write
 *    of the same kind succeeds. Writes are still attempted meanwhile: the next one that
 *    commits is what shows the fault is gone (or, for a database server that could not be
 *    reached, its answer to a round trip: checkReachable). A read that could not reach the
 *    database server marks it the same way.
 *
 * Either way the caller gets a 503 with Retry-After (an MQTT client: no PUBACK, disconnected),
 * /healthz says "degraded" with the reason, and the log gets one line per reason per 10 s.
 * This module knows no SQLite and no file system: the composition passes probes for them.
 */
import { AppError, storageUnavailable } from '../errors.js';
import type { DomainEvents } from './events.js';
import { type LogLine, ThrottledLog } from './throttledLog.js';

/** Seconds a refused client is asked to wait: a few free-space checks, short enough to catch up. */
export const STORAGE_RETRY_AFTER_SECONDS = 10;
/** How often free disk space is looked at. */
const FREE_SPACE_CHECK_MS = 1_000;

/** Why storage refuses writes: the `reason` label of the refused-writes metric. */
export const STORAGE_FAILURE_KINDS = ['low_disk', 'disk_full', 'io_error', 'read_only', 'busy', 'unreachable'] as const;
export type StorageFailureKind = (typeof STORAGE_FAILURE_KINDS)[number];

export interface StorageFailure {
  kind: StorageFailureKind;
  /** For the caller and the operator: "disk full", "low disk space: …". */
  reason: string;
}

/** The database (readings, snapshot rows) and the snapshot files, each on its file system. */
export type StorageArea = 'database' | 'snapshots';

/** What the composition measures for this module (src/storage/storageProbes.ts). */
export interface StorageProbes {
  /** Bytes this process may still write on the file system holding `dir`. */
  freeBytes(dir: string): Promise<number>;
  freeBytesNow(dir: string): number;
  /** A storage failure (disk full, I/O error, busy, read-only), or null for any other error. */
  classify(err: unknown): StorageFailure | null;
  databaseSizeBytes(): number;
  /** Throws when the database cannot be read. */
  checkDatabase(): void;
  /** Resolves once the database answers a round trip; rejects while it cannot be reached. */
  databaseAnswers(): Promise<void>;
}

export interface StorageStatusOptions {
  /**
   * Directory whose file system holds each area (the data dir; the snapshots dir). The
   * database's is null when it lives on a database server (PostgreSQL), whose disk this
   * process cannot see: only its writes' failures tell.
   */
  dirs: { database: string | null; snapshots: string };
  /** Free bytes below which new writes are refused; 0 never refuses for space. */
  minFreeBytes: number;
  probes: StorageProbes;
  /** The group-commit writer's queue, for /metrics. */
  writerQueue: () => WriterQueue;
  events: DomainEvents;
  log?: { warn: LogLine; info: LogLine };
  /** Monotonic milliseconds, for the log's 10 s windows. */
  now?: () => number;
}

/** The group-commit writer as /metrics shows it. */
export interface WriterQueue {
  /** Readings waiting for the next commit. */
  depth: number;
  /** Largest commit so far, in readings. */
  maxBatch: number;
  /** Commits so far. */
  commits: number;
}

interface StorageReport {
  writable: boolean;
  reason: string | null;
  freeBytes: Record<StorageArea, number | null>;
  minFreeBytes: number;
}

const AREA_NAMES: Record<StorageArea, string> = { database: 'data directory', snapshots: 'snapshots directory' };
/** What the log calls an area: the database's is a database server when its directory is not this machine's. */
const areaName = (area: StorageArea, dirs: StorageStatusOptions['dirs']) =>
  area === 'database' && dirs.database === null ? 'database' : AREA_NAMES[area];

const mb = (bytes: number) => `${(bytes / 1_048_576).toFixed(1)} MB`;

function lowDiskSpace(area: StorageArea, free: number, min: number): StorageFailure {
  return { kind: 'low_disk', reason: `low disk space: ${mb(free)} free for the ${AREA_NAMES[area]}, below the minimum of ${mb(min)}` };
}

export class StorageStatus {
  /** Non-null while new readings are refused before they reach the database (ingest reads this). */
  readingsRefusal: StorageFailure | null = null;
  /** Non-null while new snapshots are refused (either file system low). */
  snapshotsRefusal: StorageFailure | null = null;
  /** Non-null while the database's last write failed for a storage reason (the writer reads this). */
  commitFailure: StorageFailure | null = null;
  private snapshotFileFailure: StorageFailure | null = null;
  private readonly free: Record<StorageArea, number | null> = { database: null, snapshots: null };
  private readonly throttle: ThrottledLog;
  private timer: NodeJS.Timeout | null = null;
  private checking = false;

  constructor(private readonly options: StorageStatusOptions) {
    this.throttle = new ThrottledLog(10_000, options.now);
  }

  /**
   * Looks at free space now, then every FREE_SPACE_CHECK_MS off the request path (an
   * unref'd timer: it never keeps the process alive). The server starts it; the admin CLI,
   * which writes only a little, does not.
   */
  start(): void {
    if (this.timer) return;
    const { probes, dirs } = this.options;
    try {
      this.applyFreeSpace(dirs.database === null ? null : probes.freeBytesNow(dirs.database), probes.freeBytesNow(dirs.snapshots));
    } catch (err) {
      this.reportProbeFailure(err);
    }
    this.timer = setInterval(() => void this.checkFreeSpace(), FREE_SPACE_CHECK_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    // Counts still held back go out now rather than never.
    this.throttle.flush(true);
  }

  /** One free-space check (the timer's); also flushes log counts held back. */
  private async checkFreeSpace(): Promise<void> {
    if (this.checking) return;
    this.checking = true;
    const { probes, dirs } = this.options;
    try {
      const [database, snapshots] = await Promise.all([
        dirs.database === null ? null : probes.freeBytes(dirs.database),
        probes.freeBytes(dirs.snapshots),
      ]);
      // stop() during the await: a closed server takes no new state.
      if (this.timer) this.applyFreeSpace(database, snapshots);
    } catch (err) {
      this.reportProbeFailure(err);
    }
    try {
      await this.checkReachable();
    } finally {
      this.checking = false;
      this.throttle.flush();
    }
  }

  /**
   * A database server that could not be reached is marked degraded until a write commits.
   * Behind a load balancer that checks /healthz, no write would reach this node again: so
   * while it is marked unreachable the timer asks the server for a round trip, and an answer
   * clears the mark (the next write still tells whether it takes writes).
   */
  private async checkReachable(): Promise<void> {
    if (this.commitFailure?.kind !== 'unreachable') return;
    try {
      await this.options.probes.databaseAnswers();
    } catch {
      return;
    }
    if (this.timer && this.commitFailure?.kind === 'unreachable') this.writeSucceeded('database');
  }

  private applyFreeSpace(database: number | null, snapshots: number): void {
    const min = this.options.minFreeBytes;
    this.free.database = database;
    this.free.snapshots = snapshots;
    const databaseLow = min > 0 && database !== null && database < min ? lowDiskSpace('database', database, min) : null;
    const snapshotsLow = min > 0 && snapshots < min ? lowDiskSpace('snapshots', snapshots, min) : null;
    const wasRefusing = this.readingsRefusal !== null || this.snapshotsRefusal !== null;
    this.readingsRefusal = databaseLow;
    // A snapshot is a file and a database row: it needs room on both.
    this.snapshotsRefusal = databaseLow ?? snapshotsLow;
    const refusing = this.snapshotsRefusal;
    if (refusing && !wasRefusing) {
      this.logWarn('low-disk', 'disk space below --min-free-disk: refusing new readings and snapshots until there is room', {
        reason: refusing.reason,
      });
    } else if (!refusing && wasRefusing) {
      this.logInfo('low-disk-cleared', 'disk space is back above --min-free-disk: taking readings and snapshots again', {
        freeBytes: database ?? snapshots,
      });
    }
  }

  private reportProbeFailure(err: unknown): void {
    // Free space unknown: writes are not refused for it (a broken probe must not stop ingest).
    this.logWarn('probe', 'cannot read free disk space', { err: err instanceof Error ? err.message : String(err) });
  }

  /**
   * The refusal of `count` writes, counted for /metrics and logged (throttled). `detail` is
   * for the log only (which database server failed, and how), never for the caller.
   */
  refuse(failure: StorageFailure, count = 1, detail?: string): AppError {
    this.options.events.emit('storage.refused', { kind: failure.kind, count });
    const details = detail === undefined ? { reason: failure.reason } : { reason: failure.reason, detail };
    this.logWarn(`refused:${failure.kind}`, 'writes refused: storage unavailable', details, count);
    return storageUnavailable(failure.reason, STORAGE_RETRY_AFTER_SECONDS);
  }

  /** The ingest pipeline's gate: the refusal of one reading while readingsRefusal is set. */
  refuseReading(): AppError {
    return this.refuse(this.readingsRefusal ?? { kind: 'low_disk', reason: 'low disk space' });
  }

  /**
   * A group commit of `readings` failed: the error its readings are rejected with. A storage
   * failure becomes a 503 and marks the database degraded; anything else is passed on as it
   * is (a 500, logged where it is answered).
   */
  commitFailed(err: unknown, readings: number): unknown {
    return this.writeFailed('database', err, readings);
  }

  commitSucceeded(): void {
    this.writeSucceeded('database');
  }

  /**
   * Any request that failed because storage did (a read while the database server cannot be
   * reached, a lookup on a busy database): the same 503 with Retry-After a refused write gets,
   * logged throttled instead of once per request. Null for any other error (a 500).
   */
  unavailable(err: unknown): AppError | null {
    // An AppError is answered as it is; an error with a status of its own (the HTTP layer's:
    // a client that went away) is about the request, not storage.
    if (err instanceof AppError || (err as { statusCode?: unknown } | null)?.statusCode !== undefined) return null;
    const failure = this.options.probes.classify(err);
    if (failure === null) return null;
    // A database server that a read could not reach cannot take writes either: degraded
    // until it answers again (checkReachable), as after a write that could not reach it. A
    // node whose requests all failed on reads (the device cache cold) would otherwise look
    // healthy to a load balancer.
    if (failure.kind === 'unreachable' && this.commitFailure === null) this.markFailed('database', failure);
    this.logWarn(`request:${failure.kind}`, 'requests failed: storage unavailable', { reason: failure.reason });
    return storageUnavailable(failure.reason, STORAGE_RETRY_AFTER_SECONDS);
  }

  /** Whether `err` is storage failing (disk full, I/O error, busy, read-only), not a bug or bad input. */
  isStorageFailure(err: unknown): boolean {
    return (err instanceof AppError && err.code === 'storage_unavailable') || this.options.probes.classify(err) !== null;
  }

  /** A write to `area` failed: see commitFailed. */
  writeFailed(area: StorageArea, err: unknown, count = 1): unknown {
    const failure = this.options.probes.classify(err);
    if (failure === null) return err;
    this.markFailed(area, failure);
    // The PostgreSQL writer's 503 carries the server's own message as its cause.
    const cause = (err as { cause?: unknown } | null)?.cause;
    return this.refuse(failure, count, cause instanceof Error ? cause.message : undefined);
  }

  writeSucceeded(area: StorageArea): void {
    if (area === 'database' ? this.commitFailure === null : this.snapshotFileFailure === null) return;
    if (area === 'database') this.commitFailure = null;
    else this.snapshotFileFailure = null;
    this.logInfo(`recovered:${area}`, `${areaName(area, this.options.dirs)} takes writes again`, {});
  }

  /**
   * A background write (merging the readings inbox) failed. It refuses nothing (readings
   * still commit to the inbox), so it does not make the service degraded; a storage failure
   * is logged throttled. Returns false for any other error, which the caller reports itself.
   */
  backgroundWriteFailed(err: unknown, what: string): boolean {
    const failure = this.options.probes.classify(err);
    if (failure === null) return false;
    this.logWarn(`background:${failure.kind}`, `${what} failed; retried later`, { reason: failure.reason });
    return true;
  }

  private markFailed(area: StorageArea, failure: StorageFailure): void {
    if (area === 'database') this.commitFailure = failure;
    else this.snapshotFileFailure = failure;
  }

  /** Why writes are refused or failing now, or null. */
  failure(): StorageFailure | null {
    return this.readingsRefusal ?? this.snapshotsRefusal ?? this.commitFailure ?? this.snapshotFileFailure;
  }

  /** For the dashboard: can storage take writes, why not, and the free space. */
  report(): StorageReport {
    const failure = this.failure();
    return {
      writable: failure === null,
      reason: failure?.reason ?? null,
      freeBytes: { ...this.free },
      minFreeBytes: this.options.minFreeBytes,
    };
  }

  /**
   * /healthz: "unavailable" when the database cannot be read, "degraded" while writes are
   * refused or failing, "ok" otherwise.
   */
  health(): { status: 'ok' | 'degraded' | 'unavailable'; reason: string | null; database: string } {
    try {
      this.options.probes.checkDatabase();
    } catch (err) {
      return { status: 'unavailable', reason: null, database: err instanceof Error ? err.message : String(err) };
    }
    const failure = this.failure();
    return failure ? { status: 'degraded', reason: failure.reason, database: 'ok' } : { status: 'ok', reason: null, database: 'ok' };
  }

  /** The database file's size (pages in use; the WAL is not counted), for /metrics. */
  databaseSizeBytes(): number {
    return this.options.probes.databaseSizeBytes();
  }

  /** Readings waiting for the next group commit, the largest commit and the commits so far, for /metrics. */
  writerQueue(): WriterQueue {
    const { depth, maxBatch, commits } = this.options.writerQueue();
    return { depth, maxBatch, commits };
  }

  private logWarn(key: string, message: string, details: Record<string, unknown>, count = 1): void {
    const log = this.options.log;
    if (log) this.throttle.report(log.warn, key, message, details, count);
  }

  private logInfo(key: string, message: string, details: Record<string, unknown>): void {
    const log = this.options.log;
    if (log) this.throttle.report(log.info, key, message, details);
  }
}

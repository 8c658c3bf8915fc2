import type { Pool } from 'pg';
import type { StorageFailure, StorageProbes } from '../../domain/storageStatus.js';
import { AppError } from '../../errors.js';
import { fileSystemProbes, storageFailureOf } from '../storageProbes.js';
import { isConnectionError } from './connect.js';

/** How old the database size shown in /metrics may be. */
const SIZE_REFRESH_MS = 10_000;

/** The writer's 503 reasons (readingWriter.ts) and the failure each one is. */
const WRITER_REASONS: Record<string, StorageFailure> = {
  'database unreachable': { kind: 'unreachable', reason: 'database unreachable' },
  'database disk full': { kind: 'disk_full', reason: 'database disk full' },
  'database read-only': { kind: 'read_only', reason: 'database read-only' },
  'database busy': { kind: 'busy', reason: 'database busy' },
};

/**
 * A storage failure on PostgreSQL: the writer's 503s (already classified, with their reason),
 * a statement that failed because the server cannot be reached or cannot take writes now
 * (a snapshot row), or a file-system error of the snapshot files.
 */
function classify(err: unknown): StorageFailure | null {
  if (err instanceof AppError) {
    if (err.code !== 'storage_unavailable') return null;
    return WRITER_REASONS[err.message.replace(/^storage unavailable: /, '')] ?? { kind: 'busy', reason: 'database busy' };
  }
  if (isConnectionError(err)) return WRITER_REASONS['database unreachable']!;
  const code = (err as { code?: unknown } | null)?.code;
  // A SQLSTATE, not a file-system errno of the same shape (EROFS, EPERM: a system call's).
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && typeof (err as NodeJS.ErrnoException).syscall !== 'string') {
    if (code === '53100') return WRITER_REASONS['database disk full']!;
    if (code === '25006') return WRITER_REASONS['database read-only']!;
    if (/^(53|57P0[1-3]|57014|40001|40P01|55P03)/.test(code)) return WRITER_REASONS['database busy']!;
    return null;
  }
  return storageFailureOf(err);
}

/**
 * The storage status's probes (src/domain/storageStatus.ts) on PostgreSQL. Free space is
 * watched for the snapshots folder only: the database's disk belongs to its server. The
 * database size is PostgreSQL's own figure, read in the background at most every 10 s
 * (/metrics asks synchronously). There is no synchronous read to check the database with:
 * failed writes are what make /healthz degraded, until the next commit or, for an unreachable
 * server, until it answers a round trip (`databaseAnswers`).
 */
export function postgresStorageProbes(pool: Pool): StorageProbes {
  let size = 0;
  let sizeAt = -Infinity;
  let reading = false;
  const refreshSize = () => {
    if (reading || performance.now() - sizeAt < SIZE_REFRESH_MS) return;
    reading = true;
    pool
      .query<{ bytes: number }>('SELECT pg_database_size(current_database()) AS bytes')
      .then(
        ({ rows }) => {
          size = rows[0]!.bytes;
          sizeAt = performance.now();
        },
        () => {},
      )
      .finally(() => {
        reading = false;
      });
  };
  // Read once now, so the first scrape of /metrics has the figure too.
  refreshSize();
  return {
    ...fileSystemProbes,
    classify,
    databaseSizeBytes() {
      refreshSize();
      return size;
    },
    checkDatabase() {},
    async databaseAnswers() {
      await pool.query('SELECT 1');
    },
  };
}

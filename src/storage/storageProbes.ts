import { statfsSync } from 'node:fs';
import { statfs } from 'node:fs/promises';
import path from 'node:path';
import type { StorageFailure, StorageProbes } from '../domain/storageStatus.js';
import type { Db } from './db.js';

/**
 * What the storage status service (src/domain/storageStatus.ts) measures: free space on a
 * file system, the database's size and readability, and which errors are storage failures.
 */
export function storageProbes(db: Db): StorageProbes {
  // A real read of the schema (a read transaction on the file), not `SELECT 1`, which
  // SQLite answers without touching the database.
  const checkDatabase = () => void db.prepare('SELECT count(*) FROM sqlite_master').get();
  return {
    ...fileSystemProbes,
    classify: storageFailureOf,
    databaseSizeBytes() {
      // Pages in use times page size; the WAL is not counted.
      const pages = db.pragma('page_count', { simple: true }) as number;
      const pageSize = db.pragma('page_size', { simple: true }) as number;
      return pages * pageSize;
    },
    checkDatabase,
    databaseAnswers: async () => checkDatabase(),
  };
}

/** Free space on the file system holding a folder (one not created yet: its parent's). */
export const fileSystemProbes: Pick<StorageProbes, 'freeBytes' | 'freeBytesNow'> = {
  async freeBytes(dir) {
    for (let at = dir; ; ) {
      try {
        const s = await statfs(at);
        return s.bavail * s.bsize;
      } catch (err) {
        at = parentIfMissing(err, at);
      }
    }
  },
  freeBytesNow(dir) {
    for (let at = dir; ; ) {
      try {
        const s = statfsSync(at);
        return s.bavail * s.bsize;
      } catch (err) {
        at = parentIfMissing(err, at);
      }
    }
  },
};

/**
 * Where to look next after statfs(at) failed with `err`: a folder not created yet (the
 * snapshots folder before the first upload) lives on its parent's file system. Any other
 * error, or a missing root, is thrown.
 */
function parentIfMissing(err: unknown, at: string): string {
  const parent = path.dirname(at);
  if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || parent === at) throw err;
  return parent;
}

/**
 * SQLite result codes (better-sqlite3 puts the extended code on `code`, e.g. SQLITE_IOERR_WRITE)
 * and file-system errno codes that mean storage cannot take the write now, while the same
 * write may succeed later. A constraint, a corrupt file or a bug is not one of them.
 */
export function storageFailureOf(err: unknown): StorageFailure | null {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return null;
  if (code.startsWith('SQLITE_')) {
    if (code === 'SQLITE_FULL') return { kind: 'disk_full', reason: 'disk full' };
    if (code.startsWith('SQLITE_IOERR')) return { kind: 'io_error', reason: 'I/O error' };
    if (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED')) return { kind: 'busy', reason: 'database busy' };
    if (code.startsWith('SQLITE_READONLY')) return { kind: 'read_only', reason: 'database is read-only' };
    if (code.startsWith('SQLITE_CANTOPEN')) return { kind: 'io_error', reason: 'database file cannot be opened' };
    return null;
  }
  switch (code) {
    case 'ENOSPC':
    case 'EDQUOT':
      return { kind: 'disk_full', reason: 'disk full' };
    case 'EROFS':
      return { kind: 'read_only', reason: 'read-only file system' };
    case 'EACCES':
    case 'EPERM':
      return { kind: 'read_only', reason: 'permission denied' };
    case 'EIO':
      return { kind: 'io_error', reason: 'I/O error' };
  }
  // Any other file-system error (ENOTDIR: a folder replaced by a file, EMFILE, …) is the
  // server's storage, not the caller's request.
  return typeof (err as NodeJS.ErrnoException).syscall === 'string' ? { kind: 'io_error', reason: `file system error (${code})` } : null;
}

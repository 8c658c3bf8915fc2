import { chmodSync, lstatSync, unlinkSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { ensureDataDir } from './db.js';
import { loadNativeBinding } from './native.js';
import { giveToOwnerOf } from './ownership.js';

/** The file in a SQLite data dir whose lock says a `serve` uses that dir. */
const SERVE_LOCK_FILE = 'serve.lock';

export interface ServeLock {
  release(): void;
}

/**
 * One `serve` per SQLite data dir. Two would each run the jobs that must run once per
 * database (retention, silence checks and their notifications, rollups), so every silence
 * would be notified twice. Admin commands do not take it: they work beside the server.
 *
 * The lock is SQLite's own lock on a small file of the data dir, held by an exclusive
 * transaction left open: the kernel drops it when the process ends, however it ends, so a
 * crash leaves nothing to clear by hand (a pid file would, and could name a reused pid).
 * The file holds nothing: its journal stays in memory, and a file of that name holding
 * anything else is replaced rather than taken for a database.
 */
export function holdServeLock(dataDir: string): ServeLock {
  ensureDataDir(dataDir);
  const file = path.join(dataDir, SERVE_LOCK_FILE);
  // Never through a link: run as root (sudo) on a data dir another user owns, a serve.lock
  // planted as a symlink would have root's lock, mode and owner changes land on its target.
  refuseUnlessPlainFile(file);
  let db: Database.Database;
  try {
    db = lockFile(file, dataDir);
  } catch (err) {
    if ((err as { code?: string }).code !== 'SQLITE_NOTADB') throw named(err, file, dataDir);
    // Not a lock file of ours (a held one is always empty): removed, and made again.
    unlinkSync(file);
    try {
      db = lockFile(file, dataDir);
    } catch (again) {
      throw named(again, file, dataDir);
    }
  }
  try {
    // As the database's files: a lock file root made (sudo) must open for the service's user.
    chmodSync(file, 0o600);
    giveToOwnerOf(dataDir, [file]);
  } catch {
    // Mode and owner are a courtesy; the lock is held either way.
  }
  return {
    release() {
      if (db.open) db.close();
    },
  };
}

function refuseUnlessPlainFile(file: string): void {
  let kind: string;
  try {
    const st = lstatSync(file);
    if (st.isFile()) return;
    kind = st.isSymbolicLink() ? 'a symbolic link' : 'not a file';
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  throw new Error(`${file} is ${kind}; remove it and start again (serve creates it)`);
}

function lockFile(file: string, dataDir: string): Database.Database {
  // timeout 0: a lock held by a running server is refused at once, not waited for.
  const db = new Database(file, { nativeBinding: loadNativeBinding(dataDir), timeout: 0 } as Database.Options);
  try {
    db.pragma('journal_mode = MEMORY');
    db.exec('BEGIN EXCLUSIVE');
    return db;
  } catch (err) {
    db.close();
    throw err;
  }
}

/** The error a failed lock ends the start with: which file, and for a held lock what to do. */
function named(err: unknown, file: string, dataDir: string): Error {
  if ((err as { code?: string }).code === 'SQLITE_BUSY')
    return new Error(
      `another telemetryd serve is using the data dir ${dataDir} (it holds ${file}); stop it first, or start this one with another --data-dir`,
    );
  return new Error(`${file}: ${(err as Error).message}`, { cause: err });
}

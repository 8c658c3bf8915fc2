import { chmodSync } from 'node:fs';
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
 */
export function holdServeLock(dataDir: string): ServeLock {
  ensureDataDir(dataDir);
  const file = path.join(dataDir, SERVE_LOCK_FILE);
  // timeout 0: a lock held by a running server is refused at once, not waited for.
  const db = new Database(file, { nativeBinding: loadNativeBinding(dataDir), timeout: 0 } as Database.Options);
  try {
    db.exec('BEGIN EXCLUSIVE');
  } catch (err) {
    db.close();
    if ((err as { code?: string }).code === 'SQLITE_BUSY')
      throw new Error(
        `another telemetryd serve is using the data dir ${dataDir} (it holds ${file}); stop it first, or start this one with another --data-dir`,
      );
    throw err;
  }
  // As the database's files: a lock file root made (sudo) must open for the service's user.
  chmodSync(file, 0o600);
  giveToOwnerOf(dataDir, [file]);
  return {
    release() {
      if (db.open) db.close();
    },
  };
}

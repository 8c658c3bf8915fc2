import { chmodSync, existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { migrate } from './migrations.js';
import { loadNativeBinding } from './native.js';

export type Db = Database.Database;

export interface OpenOptions {
  durability?: 'normal' | 'full';
  readonly?: boolean;
}

export const DB_FILE = 'telemetryd.db';

/** Creates the data dir (mode 0700: it holds secrets' hashes and readings). */
export function ensureDataDir(dataDir: string): void {
  if (!existsSync(dataDir)) mkdirSync(dataDir, { recursive: true, mode: 0o700 });
}

/**
 * Opens the database once, deliberately (style.md §7): busy_timeout first, because the
 * admin CLI and the server share the file; then WAL so readers never block the writer;
 * synchronous NORMAL (survives a process crash) or FULL (also power loss), decisions.md §5.
 */
export function openDatabase(dataDir: string, options: OpenOptions = {}): Db {
  ensureDataDir(dataDir);
  const file = path.join(dataDir, DB_FILE);
  const db = new Database(file, { nativeBinding: loadNativeBinding(dataDir) } as Database.Options);
  db.pragma('busy_timeout = 10000');
  db.pragma('journal_mode = WAL');
  db.pragma(`synchronous = ${options.durability === 'full' ? 'FULL' : 'NORMAL'}`);
  db.pragma('foreign_keys = ON');
  // Larger page cache and memory-mapped reads keep history queries on a big table fast.
  db.pragma('cache_size = -65536');
  // mmap up to SQLite's default ceiling (2 GB): when readings were a rowid table, a device's
  // newest 1,000 readings sat on ~1,000 pages and the map took history p50 from ~12-14 to
  // ~8.5 ms at 10 M rows (BENCHMARKS.md); the clustered table reads ~30 pages, and reads
  // through the map still skip a read() per page. Address space only: pages are the OS page
  // cache's, and an idle server touches none.
  db.pragma('mmap_size = 2147418112');
  db.pragma('temp_store = MEMORY');
  // Fewer, larger checkpoints: each 1,000-reading transaction dirties about one index page
  // per device, and a page dirtied by several transactions between two checkpoints is
  // written back once. 16,000 pages (64 MB of WAL) instead of 4,000: sustained ingest at
  // 10 M rows 25.8-27.1 k → 31.3-33.5 k readings/s back to back; 32,000 gave no more
  // (BENCHMARKS.md). journal_size_limit truncates a WAL that one huge transaction grew.
  db.pragma('wal_autocheckpoint = 16000');
  db.pragma('journal_size_limit = 67108864');
  migrate(db);
  for (const suffix of ['', '-wal', '-shm']) {
    try {
      chmodSync(file + suffix, 0o600);
    } catch {
      // -wal/-shm may not exist yet; SQLite creates them with the main file's mode.
    }
  }
  return db;
}

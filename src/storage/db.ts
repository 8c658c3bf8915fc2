import { chmodSync, existsSync, statSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { makeDirs } from '../fsDirs.js';
import { migrate } from './migrations.js';
import { loadNativeBinding } from './native.js';
import { giveToOwnerOf } from './ownership.js';

export type Db = Database.Database;

export interface OpenOptions {
  durability?: 'normal' | 'full';
  readonly?: boolean;
}

export const DB_FILE = 'telemetryd.db';

/** Creates the data dir (mode 0700: it holds secrets' hashes and readings). */
export function ensureDataDir(dataDir: string): void {
  if (!existsSync(dataDir)) {
    try {
      makeDirs(dataDir, 0o700);
    } catch (err) {
      throw new Error(`cannot create the data dir ${dataDir}: ${(err as Error).message}`, { cause: err });
    }
  } else refuseFileAsDataDir(dataDir);
}

/** Throws when `dataDir` exists and is not a folder: every command says so in the same words. */
export function refuseFileAsDataDir(dataDir: string): void {
  if (existsSync(dataDir) && !statSync(dataDir).isDirectory()) throw new Error(`the data dir ${dataDir} is a file, not a folder`);
}

/** SQLite errors that are about the file itself: they get its path, which SQLite's messages lack. */
const FILE_ERRORS = new Set(['SQLITE_CANTOPEN', 'SQLITE_NOTADB', 'SQLITE_CORRUPT']);

/**
 * Opens the database once, deliberately: busy_timeout first, because the admin CLI and the
 * server share the file; then WAL so readers never block the writer; synchronous NORMAL
 * (survives a process crash) or FULL (also power loss): docs/operations.md, "Durability".
 */
export function openDatabase(dataDir: string, options: OpenOptions = {}): Db {
  ensureDataDir(dataDir);
  const file = path.join(dataDir, DB_FILE);
  let db: Db;
  try {
    db = new Database(file, { nativeBinding: loadNativeBinding(dataDir) } as Database.Options);
    db.pragma('busy_timeout = 10000');
    db.pragma('journal_mode = WAL');
  } catch (err) {
    // "file is not a database" alone does not say which file.
    const e = err as { code?: string; message: string };
    if (e.code && FILE_ERRORS.has(e.code)) e.message = `${file}: ${e.message}`;
    throw err;
  }
  db.pragma(`synchronous = ${options.durability === 'full' ? 'FULL' : 'NORMAL'}`);
  db.pragma('foreign_keys = ON');
  // Larger page cache and memory-mapped reads keep history queries on a big table fast.
  db.pragma('cache_size = -65536');
  // mmap up to SQLite's default ceiling (2 GB): reads through the map skip a read() per page,
  // which history of a device's newest 1,000 readings notices (BENCHMARKS.md, "Design decisions").
  // Address space only: pages are the OS page cache's, and an idle server touches none.
  db.pragma('mmap_size = 2147418112');
  db.pragma('temp_store = MEMORY');
  // Fewer, larger checkpoints: each 1,000-reading transaction dirties about one index page
  // per device, and a page dirtied by several transactions between two checkpoints is
  // written back once. 16,000 pages (64 MB of WAL) is where sustained ingest stopped gaining
  // (BENCHMARKS.md, "Design decisions"). journal_size_limit truncates a WAL that one huge transaction grew.
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
  // A first admin command run with sudo before the service's first start creates the database.
  giveToOwnerOf(dataDir, [file, `${file}-wal`, `${file}-shm`]);
  return db;
}
